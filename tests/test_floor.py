"""The float64 floor widens one submodule at a time (xrand.frameworks.torch.widened): on every
tiny family it gives, bit for bit, the floor of the pipeline cast whole to float64, and its
weights are their own dtype again afterwards."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from xrand.compare import make_plan  # noqa: E402
from xrand.compare.floor import DrawsIn, noise_floor, pipeline_floor  # noqa: E402
from xrand.compare.sides import load, run  # noqa: E402
from xrand.frameworks.torch import cast_whole  # noqa: E402
from xrand.models import DIGITS, TINY_MODELS  # noqa: E402
from xrand.pipelines.recipes import recipe  # noqa: E402
from xrand.pipelines.settings import Settings  # noqa: E402

# not CogView4 Control: it samples its control latents from torch's global random state, so no two
# of its runs are the same (tests/test_next_families.py)
FAMILIES = ["digits", *(name for name in TINY_MODELS if name not in ("sd-inpaint", "cogview4-control"))]


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """A 32x32 picture: the input image, mask or control image a family's pipeline needs."""
    from PIL import Image

    path = tmp_path_factory.mktemp("inputs") / "image.png"
    Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)).save(path)
    return str(path)


def settings(family, tiny_folder, image, dtype="float32"):
    """The family's tiny run, 2 steps, with the input files its pipeline requires."""
    if family == "digits":
        return Settings(model=DIGITS, steps=2, batch_size=1, seed=1, dtype=dtype)
    pipeline = TINY_MODELS[family].pipelines[0]
    files = {name: image for name in recipe(pipeline).required_inputs if name in ("image", "mask", "control_image")}
    return Settings(model=tiny_folder(family), prompt="a red circle", steps=2, batch_size=1, seed=1, dtype=dtype,
                    **TINY_MODELS[family].settings(), **files)


@pytest.mark.parametrize("family, dtype", [(family, "float32") for family in FAMILIES] + [("sd", "float16")])
def test_the_floor_widened_per_call_is_the_floor_of_the_pipeline_cast_whole(family, dtype, tiny_folder, image):
    plan = make_plan(settings(family, tiny_folder, image, dtype), frameworks=("torch",))
    loaded = load(plan, "torch")
    images = run(loaded, plan).images
    weights = lambda: {name: (t.dtype, t.data_ptr()) for c in loaded.pipe.components.values()  # noqa: E731
                       if isinstance(c, torch.nn.Module) for name, t in c.state_dict(keep_vars=True).items()}
    before = weights()
    floor = pipeline_floor(loaded, plan, images, keep=False)
    assert weights() == before  # each tensor its own dtype and its own data again

    def whole(dtype_name):
        with cast_whole(loaded.pipe.components.values()):
            return run(loaded, plan, generator=DrawsIn(plan.settings.seed, plan.settings.stream, dtype)).images

    expected = noise_floor(whole, dtype, "float64", baseline=images)
    assert floor["rel_l2"] > 0 and (floor["rel_l2"], floor["max_abs"]) == (expected["rel_l2"], expected["max_abs"])


def test_a_floor_is_kept_for_the_same_plan_and_images_and_measured_again_for_others(tmp_path, monkeypatch):
    """A floor measured once is read back by a later run of the same plan whose compared images are
    the same bits (xrand compare's second run of a model and settings skips its float64 run); one
    bit of the images, the seed or an unwritable cache measures it again."""
    from xrand.compare.floor import floor_kept, kept_floor

    monkeypatch.setenv("XRAND_CACHE_DIR", str(tmp_path / "cache"))
    plan = make_plan(Settings(model=DIGITS, steps=2, batch_size=1, seed=1), frameworks=("torch",))
    loaded = load(plan, "torch")
    images = run(loaded, plan).images
    measured = []

    def measure(plan=plan, images=images):
        measured.append(plan.settings.seed)
        return pipeline_floor(loaded, plan, images, keep=False)

    assert not floor_kept(plan)
    first = kept_floor(plan, images, measure)
    assert floor_kept(plan)  # known before torch's run (MindSpore's own process starts with it then)
    assert first["kept"].startswith(str(tmp_path / "cache" / "torch-floors" / ""))
    assert kept_floor(plan, images, measure) == first and measured == [1]
    assert {key: first[key] for key in ("rel_l2", "max_abs", "how")} == measure() and first["rel_l2"] > 0

    other = images.copy()
    other.flat[0] = np.nextafter(other.flat[0], np.float32(np.inf))
    assert kept_floor(plan, other, lambda: measure(images=other))["kept"] != first["kept"]
    seed = plan.cell(seed=2)
    assert not floor_kept(seed)
    kept_floor(seed, run(loaded, seed).images, lambda: measure(plan=seed))
    assert measured == [1, 1, 1, 2]

    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XRAND_CACHE_DIR", str(tmp_path / "file"))  # a file where the folder would be
    assert "kept" not in kept_floor(plan, images, measure) and measured == [1, 1, 1, 2, 1]


@pytest.mark.parametrize("channels, kernel, stride, padding, dilation, groups", [
    ((8, 16), 3, 1, 1, 1, 1), ((8, 16), 3, 2, 1, 1, 1), ((8, 8), 3, 1, 2, 2, 2), ((4, 6), 1, 1, 0, 1, 1),
    ((6, 6), (3, 1), (2, 1), (1, 0), 1, 3)])
def test_a_float64_convolution_too_large_to_unfold_at_once_runs_in_row_blocks(
        channels, kernel, stride, padding, dilation, groups, monkeypatch):
    """Under widened_torch a float64 convolution that would unfold more than IM2COL_BYTES at once
    (an SD-1.5-sized VAE decoder's: 1.2 GB at 256 px) runs in blocks of output rows: the same
    shape and values as the whole convolution, but for the order of its sums."""
    import xrand.frameworks.torch as frameworks_torch
    from xrand.frameworks.torch import conv2d_in_row_blocks, widened_torch

    monkeypatch.setattr(frameworks_torch, "IM2COL_BYTES", 4096)
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(*channels, kernel, stride, padding, dilation, groups).double()
    x = torch.randn(2, channels[0], 23, 26, dtype=torch.float64)
    with torch.no_grad():
        whole = conv(x)
        assert conv2d_in_row_blocks(x, conv.weight, conv.bias, stride, padding, dilation, groups) is not None
        with widened_torch():
            blocks = conv(x)
        assert conv2d_in_row_blocks(x.float(), conv.weight.float()) is None  # float32: oneDNN, no unfolding
    assert blocks.shape == whole.shape and blocks.dtype == torch.float64
    torch.testing.assert_close(blocks, whole, rtol=1e-13, atol=1e-13)
