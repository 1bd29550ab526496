"""Checkpoints as users hold them: a folder saved with ``variant="fp16"`` (``--variant fp16``) and a
single file in the original layout with a folder of its configs (``--model FILE --config FOLDER``),
compared end to end on the tiny Stable Diffusion folder, and the bad input each form invites."""
import json
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
ms = pytest.importorskip("mindspore")
pytest.importorskip("mindone.diffusers")

from conftest import make_tiny_model  # noqa: E402
from xrand.cli import main  # noqa: E402
from xrand.compare import compare_frameworks, make_plan  # noqa: E402
from xrand.pipelines.settings import Settings  # noqa: E402

pytestmark = pytest.mark.skipif(ms.get_context("device_target") != "CPU", reason="runs mindone on the CPU")

TINY = dict(prompt="a red circle", steps=2, batch_size=1, seed=3, height=32, width=32)


def compare(**settings):
    """Both sides of a tiny run (PyNative: graph mode would only add its compile time here)."""
    return compare_frameworks(Settings(**TINY, **settings), mindspore_mode="pynative")


@pytest.fixture(scope="module")
def plain(tiny_sd):
    """The tiny folder's own comparison, the one each form is held against."""
    return compare(model=tiny_sd)


def fingerprint(**settings):
    """The model fingerprint a side of these settings carries (sides from two machines are matched by it)."""
    return make_plan(Settings(prompt="x", **settings), frameworks=("torch",)).folder.fingerprint()


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def test_the_single_file_converts_back_to_the_folders_tensors(tiny_sd, tiny_sd_file):
    """diffusers' own conversion (original layout -> diffusers) gives back every tensor of the folder."""
    from diffusers.loaders import single_file_utils as convert
    from safetensors.torch import load_file

    checkpoint = load_file(tiny_sd_file[0])
    for part, back in (("unet", convert.convert_ldm_unet_checkpoint), ("vae", convert.convert_ldm_vae_checkpoint),
                       ("text_encoder", None)):
        config = json.load(open(os.path.join(tiny_sd, part, "config.json")))
        want = load_file(next(os.path.join(tiny_sd, part, n) for n in os.listdir(os.path.join(tiny_sd, part))
                              if n.endswith(".safetensors")))
        got = back(checkpoint, config) if back else convert.convert_ldm_clip_checkpoint(checkpoint)
        assert sorted(got) == sorted(want), part
        assert all(torch.equal(got[k], want[k]) for k in want), part


def test_a_float32_single_file_gives_the_folders_images_on_both_sides(plain, tiny_sd_file):
    """from_single_file in each library, the configs from a folder without weights: the same
    images as the folder's, bit for bit, so the same comparison."""
    file, config = tiny_sd_file
    c = compare(model=file, config=config)
    assert c.passed, c.verdict()
    for side in ("a", "b"):
        np.testing.assert_array_equal(c.images[side], plain.images[side])
    assert c.final == plain.final


def test_a_single_file_is_known_by_its_content_not_its_name(tiny_sd, tiny_sd_file, tmp_path):
    """Sides from two machines match a single file by its bytes, wherever it lies, whatever its name."""
    file, config = tiny_sd_file
    copy = shutil.copy(file, tmp_path / "renamed.safetensors")
    assert fingerprint(model=file, config=config) == fingerprint(model=str(copy), config=config) \
        != fingerprint(model=tiny_sd)


def test_an_fp16_variant_loads_its_half_weights_into_a_float32_pipeline_on_both_sides(plain, tiny_sd_fp16):
    """Both libraries read */*.fp16.safetensors and widen the weights to the run's float32: the
    sides agree as the plain folder's do, and differ from it by the weights' rounding alone."""
    c = compare(model=tiny_sd_fp16, variant="fp16")
    assert c.passed and c.final["rel_l2"] < 1e-5, c.verdict()
    for side in ("a", "b"):
        assert set(c.ran[side]["component_dtypes"].values()) == {"float32"}, c.ran[side]
        assert 0 < rel_l2(c.images[side], plain.images[side]) < 1e-2  # the fp16 weights, not other ones


def test_a_variant_folder_fingerprints_the_variants_files(tiny_sd, tiny_sd_fp16, tmp_path):
    """A folder of plain and fp16 files: the plain ones without --variant, the fp16 ones with it."""
    both = tmp_path / "both"
    shutil.copytree(tiny_sd, both)
    for part in ("unet", "vae", "text_encoder"):
        for name in os.listdir(os.path.join(tiny_sd_fp16, part)):
            if name.endswith(".fp16.safetensors"):
                shutil.copy(os.path.join(tiny_sd_fp16, part, name), both / part / name)
    assert fingerprint(model=str(both)) == fingerprint(model=tiny_sd)
    assert fingerprint(model=str(both), variant="fp16") not in (fingerprint(model=tiny_sd), None)
    assert "variant" in Settings.COMPARED  # a side of the plain files never compares with an fp16 one


@pytest.fixture(scope="module")
def wrong_configs(tiny_sd_file, tmp_path_factory):
    """Config folders that do not fit the tiny SD file: a DDIM pipeline's, and the SD config with
    a UNet of 9 input channels (an inpainting model's) or of another cross-attention width."""
    root = tmp_path_factory.mktemp("wrong-configs")
    out = {"ddim": make_tiny_model(root / "ddim")}
    for name, change in (("channels", {"in_channels": 9}), ("width", {"cross_attention_dim": 48})):
        folder = root / name
        shutil.copytree(tiny_sd_file[1], folder)
        config = json.loads((folder / "unet" / "config.json").read_text())
        (folder / "unet" / "config.json").write_text(json.dumps({**config, **change}))
        out[name] = str(folder)
    return out


def test_each_forms_bad_input_is_one_line_before_any_model_loads(tiny_sd, tiny_sd_fp16, tiny_sd_file, wrong_configs,
                                                                 capsys, tmp_path):
    file, config = tiny_sd_file
    ckpt = tmp_path / "tiny-sd.ckpt"
    ckpt.write_bytes(b"a torch pickle")
    cases = [
        ([tiny_sd_fp16], "holds unet/ weights only as variants (fp16): give --variant fp16"),
        ([tiny_sd_fp16, "--variant", "bf16"], "has no bf16 variant of its weights (no *.bf16.safetensors); "
                                              "its variants: fp16"),
        ([tiny_sd, "--variant", "fp16"], "it holds plain weights only: leave out --variant"),
        ([tiny_sd_fp16, "--variant", "fp16.x"], "variant must be the name in the weight files' names"),
        ([file], "is a single file: give --config FOLDER too"),
        ([str(tmp_path / "none.safetensors"), "--config", config], "none.safetensors': no such file"),
        ([str(ckpt), "--config", config], "mindone.diffusers reads a .ckpt as a MindSpore checkpoint"),
        ([file, "--config", str(tmp_path / "none")], "is not a folder; give the diffusers folder"),
        ([tiny_sd, "--config", config], "but model " + repr(tiny_sd) + " is not a file"),
        ([file, "--config", config, "--variant", "fp16"], "a single file (--model"),
        ([file, "--config", config, "--component-dtype", "vae=float32"], "--component-dtype loads a component again"),
        ([file, "--config", wrong_configs["ddim"]], "cannot load as DDIMPipeline: xrand does not load DDIMPipeline "
                                                    "from a single file; single files load as StableDiffusionPipeline"),
        ([file, "--config", wrong_configs["channels"]], "its UNet's first convolution is (32, 4) (out, in channels), "
                                                        "the config's unet (32, 9)"),
        ([file, "--config", wrong_configs["width"]], "its UNet cross-attends at width 32, the config's unet at 48"),
    ]
    for model, message in cases:
        assert main(["compare", "--model", *model, "--prompt", "x", "--out", str(tmp_path / "out")]) == 2, model
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_run_and_sweep_take_the_variant(tiny_sd_fp16, capsys, tmp_path):
    """--variant reaches xrand run (its side file carries it) and xrand sweep, as it reaches compare."""
    from xrand.compare.sidefile import load_side

    side = tmp_path / "side.safetensors"
    tiny = ["--model", tiny_sd_fp16, "--prompt", "x", "--steps", "1", "--batch-size", "1", "--height", "32",
            "--width", "32", "--quiet"]
    assert main(["run", "--backend", "torch", "--out", str(side), "--variant", "fp16"] + tiny) == 0
    assert load_side(str(side)).settings.variant == "fp16"
    sweep = ["sweep", "--seeds", "0-1", "--out", str(tmp_path / "sweep")] + tiny
    assert main(sweep) == 2
    assert "give --variant fp16" in capsys.readouterr().err
    assert main(sweep + ["--variant", "fp16", "--scheduler", "no-such"]) == 2  # the folder is read; the next check
    assert "unknown scheduler 'no-such'" in capsys.readouterr().err


# -- SDXL single files: two CLIP text encoders told apart by width ------------------------------------------------
def test_the_sdxl_single_file_converts_back_to_the_folders_tensors(tiny_sdxl_file):
    """diffusers' own conversion gives back every tensor of the sdxl-wide folder: the UNet (its
    label_emb), the VAE, CLIP-L under conditioner.embedders.0 and OpenCLIP under embedders.1."""
    from diffusers.loaders import single_file_utils as convert
    from safetensors.torch import load_file
    from transformers import CLIPTextModelWithProjection

    file, _, folder = tiny_sdxl_file
    checkpoint = load_file(file)

    def want(part):
        return load_file(next(os.path.join(folder, part, n) for n in os.listdir(os.path.join(folder, part))
                              if n.endswith(".safetensors")))

    text_encoder_2 = CLIPTextModelWithProjection.from_pretrained(os.path.join(folder, "text_encoder_2"))
    for part, back in (
            ("unet", lambda c: convert.convert_ldm_unet_checkpoint(c, json.load(open(os.path.join(folder, "unet",
                                                                                               "config.json"))))),
            ("vae", lambda c: convert.convert_ldm_vae_checkpoint(c, json.load(open(os.path.join(folder, "vae",
                                                                                             "config.json"))))),
            ("text_encoder", convert.convert_ldm_clip_checkpoint),
            ("text_encoder_2", lambda c: convert.convert_open_clip_checkpoint(text_encoder_2, c,
                                                                             "conditioner.embedders.1.model."))):
        got, expected = back(checkpoint), want(part)
        assert sorted(got) == sorted(expected), part
        assert all(torch.equal(got[k], expected[k]) for k in expected), part


def test_an_sdxl_single_file_gives_the_folders_images_on_both_sides(tiny_sdxl_file):
    file, config, folder = tiny_sdxl_file
    plain = compare(model=folder)
    c = compare(model=file, config=config)
    assert c.passed and c.weights["passed"], c.verdict()
    assert {r["component"] for r in c.weights["rows"]} >= {"unet", "vae", "text_encoder", "text_encoder_2"}
    for side in ("a", "b"):
        np.testing.assert_array_equal(c.images[side], plain.images[side])
    assert c.final == plain.final


def test_sdxl_single_files_that_cannot_load_right_are_one_line_errors(tiny_folder, tiny_sd_file, tiny_sdxl_file,
                                                                      capsys, tmp_path):
    """An SDXL folder whose text encoders have one width does not convert (its file would load the
    first encoder into both); a file that does not fit the config folder is refused before loading."""
    import xrand
    from xrand.models.checkpoints import save_single_file

    with pytest.raises(xrand.UsageError, match="text_encoder_2 is 32 wide, its text_encoder 32; the SDXL single-file"):
        save_single_file(tiny_folder("sdxl"), tmp_path / "same-width.safetensors")
    file, config, _ = tiny_sdxl_file
    cases = [
        ([file, "--config", tiny_folder("sdxl")], "its UNet cross-attends at width 80, the config's unet at 64"),
        ([tiny_sd_file[0], "--config", config], "holds no conditioner.embedders.0.transformer.* tensors (a CLIP-L "
                                                "text encoder in the original SDXL layout"),
        ([file, "--config", tiny_sd_file[1]], "holds no cond_stage_model.transformer.* tensors"),
    ]
    for model, message in cases:
        assert main(["compare", "--model", *model, "--prompt", "x", "--out", str(tmp_path / "out")]) == 2, model
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err


def test_a_flux_single_file_is_refused_naming_why(tiny_folder, tiny_sdxl_file, capsys, tmp_path):
    """Both libraries have FluxPipeline.from_single_file, but their conversion splits single blocks
    at FLUX.1's width (3072): no tiny Flux file can check the path, so it is refused, one line."""
    assert main(["compare", "--model", tiny_sdxl_file[0], "--config", tiny_folder("flux"), "--prompt", "x",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot load as FluxPipeline: both libraries' single-file conversion" in err
    assert "FLUX.1's width 3072" in err and "single files load as StableDiffusionPipeline" in err, err
