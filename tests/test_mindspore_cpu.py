"""The CPU fallbacks let mindone's models run on a plain CPU with the same math as diffusers."""

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
pytest.importorskip("mindone")
torch = pytest.importorskip("torch")

import mindspore.mint as mint  # noqa: E402
import mindspore.mint.nn.functional as MF  # noqa: E402
import torch.nn.functional as TF  # noqa: E402

from xrand.pipelines import mindspore_cpu  # noqa: E402
from xrand.pipelines.frameworks import mindspore_mode  # noqa: E402

pytestmark = pytest.mark.skipif(ms.get_context("device_target") != "CPU",
                                reason="the fallbacks only apply when MindSpore targets the CPU")

TINY_UNET = dict(
    sample_size=8, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(16, 32),
    down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    norm_num_groups=8, downsample_padding=0,  # padding 0 takes the pad() path in Downsample2D
)


@pytest.fixture(autouse=True)
def clean_slate():
    """Each test starts without the fallbacks (loading a pipeline installs them) and ends as it found them."""
    was_installed = mindspore_cpu.installed()
    mindspore_cpu.uninstall()
    yield
    mindspore_cpu.uninstall()
    if was_installed:
        mindspore_cpu.install()


@pytest.fixture
def fallbacks():
    with mindspore_cpu.cpu_fallbacks():
        yield
    assert not mindspore_cpu.installed()


def _originals():
    from mindone.diffusers.models import downsampling, layers_compat

    return {
        "mint.arange": mint.arange, "mint.baddbmm": mint.baddbmm, "F.pad": MF.pad,
        "F.conv2d": MF.conv2d, "Conv2d.construct": vars(mint.nn.Conv2d)["construct"],
        "layers_compat.pad": layers_compat.pad, "downsampling.pad": downsampling.pad,
    }


def _rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_install_replaces_and_uninstall_restores_the_originals():
    before = _originals()
    assert mindspore_cpu.install() is True
    assert mindspore_cpu.install() is True  # idempotent
    during = _originals()
    assert all(during[k] is not before[k] for k in before)
    assert during["layers_compat.pad"] is during["F.pad"]  # names bound at import time follow
    mindspore_cpu.uninstall()
    mindspore_cpu.uninstall()  # idempotent
    after = _originals()
    assert all(after[k] is before[k] for k in before)


def test_context_manager_keeps_an_earlier_install():
    mindspore_cpu.install()
    try:
        with mindspore_cpu.cpu_fallbacks():
            pass
        assert mindspore_cpu.installed()
    finally:
        mindspore_cpu.uninstall()


def test_install_is_a_no_op_off_the_cpu(monkeypatch):
    before = _originals()
    real = ms.get_context
    monkeypatch.setattr(ms, "get_context", lambda key: "Ascend" if key == "device_target" else real(key))
    assert mindspore_cpu.install() is False
    assert not mindspore_cpu.installed()
    assert _originals() == before


@pytest.mark.parametrize("args, kwargs", [((5,), {}), ((2, 11, 3), {}), ((0.0, 1.0, 0.25), {}),
                                          ((0, 4), {"dtype": ms.float32})])
def test_arange_matches_numpy(fallbacks, args, kwargs):
    out = mint.arange(*args, **kwargs)
    expected = np.arange(*args, dtype=np.float32 if kwargs or isinstance(args[0], float) else np.int64)
    assert out.dtype == ms.tensor(expected).dtype
    np.testing.assert_array_equal(out.asnumpy(), expected)


@pytest.mark.parametrize("beta, alpha", [(1, 1), (0, 0.5), (0.5, 2.0)])
def test_baddbmm_matches_torch(fallbacks, beta, alpha):
    inp, b1, b2 = _rand(2, 3, 5, seed=1), _rand(2, 3, 4, seed=2), _rand(2, 4, 5, seed=3)
    if beta == 0:
        inp[0, 0, 0] = np.nan  # torch ignores input when beta == 0
    out = mint.baddbmm(ms.tensor(inp), ms.tensor(b1), ms.tensor(b2), beta=beta, alpha=alpha)
    ref = torch.baddbmm(torch.from_numpy(inp), torch.from_numpy(b1), torch.from_numpy(b2), beta=beta, alpha=alpha)
    np.testing.assert_allclose(out.asnumpy(), ref.numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("pad, mode, value", [((1, 2), "constant", None), ((1, 0, 0, 1), "constant", 6.0),
                                              ((2, 1, 1, 2), "reflect", None), ((1, 1, 2, 0), "replicate", None)])
def test_pad_matches_torch(fallbacks, pad, mode, value):
    x = _rand(1, 2, 4, 5)
    out = MF.pad(ms.tensor(x), pad, mode=mode, value=value)
    ref = TF.pad(torch.from_numpy(x), pad, mode=mode, value=value)
    np.testing.assert_array_equal(out.asnumpy(), ref.numpy())


@pytest.mark.parametrize("stride, padding, dilation, groups, bias", [
    (1, 1, 1, 1, True), (2, 0, 1, 1, True), (1, (1, 0), 1, 2, False), (1, 2, 2, 1, True), (1, "same", 1, 1, True),
])
def test_conv2d_matches_torch(fallbacks, stride, padding, dilation, groups, bias):
    x, w, b = _rand(2, 4, 7, 6, seed=1), _rand(6, 4 // groups, 3, 3, seed=2), _rand(6, seed=3)
    out = MF.conv2d(ms.tensor(x), ms.tensor(w), ms.tensor(b) if bias else None, stride, padding, dilation, groups)
    ref = TF.conv2d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b) if bias else None,
                    stride, padding, dilation, groups)
    np.testing.assert_allclose(out.asnumpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect"])
def test_conv2d_layer_matches_torch(fallbacks, padding_mode):
    layer = mint.nn.Conv2d(3, 5, 3, stride=2, padding=1, padding_mode=padding_mode)
    ref = torch.nn.Conv2d(3, 5, 3, stride=2, padding=1, padding_mode=padding_mode)
    with torch.no_grad():
        layer.weight.set_data(ms.tensor(ref.weight.numpy()))
        layer.bias.set_data(ms.tensor(ref.bias.numpy()))
        x = _rand(1, 3, 9, 8)
        expected = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(layer(ms.tensor(x)).asnumpy(), expected, rtol=1e-5, atol=1e-5)


def _tiny_unets():
    """A diffusers UNet2DModel and a mindone one of the same config holding the same weights."""
    from diffusers import UNet2DModel
    from mindone.diffusers import UNet2DModel as MSUNet2DModel

    torch.manual_seed(0)
    pt = UNet2DModel(**TINY_UNET).eval()
    ms_unet = MSUNet2DModel(**TINY_UNET)
    state = pt.state_dict()
    for name, param in ms_unet.parameters_dict().items():
        param.set_data(ms.tensor(state[name].numpy()))
    return pt, ms_unet


def test_mindone_unet_matches_diffusers(fallbacks):
    pt, ms_unet = _tiny_unets()
    x = _rand(2, 3, 8, 8)
    with torch.no_grad():
        expected = pt(torch.from_numpy(x), torch.tensor(500)).sample.numpy()
    out = ms_unet(ms.tensor(x), ms.tensor(500))[0].asnumpy()
    assert np.linalg.norm(out - expected) / np.linalg.norm(expected) < 1e-5


def test_mindone_ddim_pipeline_matches_diffusers(fallbacks, monkeypatch):
    """Two DDIM steps from the same noise through each library's own pipeline."""
    import diffusers.pipelines.ddim.pipeline_ddim as pt_ddim
    import mindone.diffusers.pipelines.ddim.pipeline_ddim as ms_ddim
    from diffusers import DDIMPipeline, DDIMScheduler
    from mindone.diffusers import DDIMPipeline as MSDDIMPipeline
    from mindone.diffusers import DDIMScheduler as MSDDIMScheduler

    pt, ms_unet = _tiny_unets()
    noise = _rand(1, 3, 8, 8, seed=7)
    monkeypatch.setattr(pt_ddim, "randn_tensor", lambda shape, **kw: torch.from_numpy(noise))
    monkeypatch.setattr(ms_ddim, "randn_tensor", lambda shape, **kw: ms.tensor(noise))
    expected = DDIMPipeline(unet=pt, scheduler=DDIMScheduler())(
        num_inference_steps=2, output_type="np").images
    out = MSDDIMPipeline(unet=ms_unet, scheduler=MSDDIMScheduler())(
        num_inference_steps=2, output_type="np")[0]
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_graph_mode_compiles_the_fallbacks_and_restores_the_mode():
    pt, ms_unet = _tiny_unets()
    x = _rand(1, 3, 8, 8)
    with torch.no_grad():
        expected = pt(torch.from_numpy(x), torch.tensor(10)).sample.numpy()
    mode = ms.get_context("mode")
    with mindspore_cpu.cpu_fallbacks(), mindspore_mode("graph"):
        assert ms.get_context("mode") == ms.GRAPH_MODE
        out = ms_unet(ms.tensor(x), ms.tensor(10))[0].asnumpy()
    assert ms.get_context("mode") == mode
    assert np.linalg.norm(out - expected) / np.linalg.norm(expected) < 1e-5


def test_tune_cpu_runtime_does_nothing_off_the_cpu(monkeypatch):
    real = ms.get_context
    monkeypatch.setattr(ms, "get_context", lambda key: "GPU" if key == "device_target" else real(key))
    monkeypatch.setattr(ms.runtime, "launch_blocking", lambda: pytest.fail("touched the runtime"))
    assert mindspore_cpu.tune_cpu_runtime() is False
