"""The CPU fallbacks let mindone's models run on a plain CPU with the same math as diffusers."""

import numpy as np
import pytest

from conftest import ALL_CPUS, every_cpu

ms = pytest.importorskip("mindspore")
pytest.importorskip("mindone")
torch = pytest.importorskip("torch")

import mindspore.mint as mint  # noqa: E402
import mindspore.mint.nn.functional as MF  # noqa: E402
import torch.nn.functional as TF  # noqa: E402

from xrand import mindspore_cpu  # noqa: E402
from xrand.frameworks import mindspore_mode  # noqa: E402

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


def test_a_fallback_is_one_decorated_function_installed_where_its_decorator_says(monkeypatch):
    from xrand.mindspore_cpu import ops

    monkeypatch.setattr(ops, "STAND_INS", list(ops.STAND_INS))  # the registry as it was, after the test

    @ops.fallback_for("mindspore.mint.mm")
    def _mm(input, mat2):
        """mint.mm (kernel Mm, no CPU version): ops.matmul."""
        return ms.ops.matmul(input, mat2)

    original, a, b = mint.mm, _rand(2, 3), _rand(3, 4, seed=1)
    mindspore_cpu.install()
    assert mint.mm is _mm
    np.testing.assert_allclose(mint.mm(ms.tensor(a), ms.tensor(b)).asnumpy(), a @ b, rtol=1e-5)
    mindspore_cpu.uninstall()
    assert mint.mm is original


def test_a_bfloat16_stand_in_is_one_decorated_wrapper_and_lists_its_kernel(monkeypatch):
    from xrand.mindspore_cpu import ops

    monkeypatch.setattr(ops, "STAND_INS", list(ops.STAND_INS))
    ops.half_precision_for({"mindspore.mint.neg": "Neg"})(ops.half_stand_in)
    original, x = mint.neg, ms.tensor(_rand(3)).astype(ms.bfloat16)
    with mindspore_cpu.half_precision() as ran:
        assert mint.neg is not original
        out = mint.neg(x)
    assert mint.neg is original and ran["Neg"] == ["bfloat16"] and out.dtype == ms.bfloat16
    np.testing.assert_array_equal(out.astype(ms.float32).asnumpy(), -x.astype(ms.float32).asnumpy())


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


@pytest.fixture(params=[True, False], ids=["conv2d-by-onednn", "conv2d-by-im2col"])
def conv_route(request, monkeypatch):
    """Each conv fallback route: MindSpore's Conv2D (oneDNN at AVX2) or im2col and a matmul."""
    monkeypatch.setattr(mindspore_cpu.ops, "conv2d_by_onednn", request.param)


@pytest.mark.parametrize("padding_mode", ["zeros", "reflect"])
def test_conv2d_layer_matches_torch(fallbacks, conv_route, padding_mode):
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


@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 1), (1, 0)])
def test_the_conv_fallback_gives_the_same_bits_in_graph_mode_as_in_pynative(conv_route, stride, padding):
    """One of the pieces that let graph mode give PyNative's bits (README; graph_calls for Linear)."""
    x, w, b = ms.tensor(_rand(2, 8, 6, 6)), ms.tensor(_rand(4, 8, 3, 3, seed=1)), ms.tensor(_rand(4, seed=2))

    class Conv(ms.nn.Cell):
        def construct(self, x, w, b):
            return MF.conv2d(x, w, b, stride, padding)

    with mindspore_cpu.cpu_fallbacks():
        pynative = Conv()(x, w, b).asnumpy()
        with mindspore_mode("graph"):
            graph = Conv()(x, w, b).asnumpy()
    np.testing.assert_array_equal(graph, pynative)


_ONEDNN = ("import numpy as np, mindspore as ms\nfrom mindspore import ops\n"
           "from xrand import mindspore_cpu\nlibrary = mindspore_cpu.runtime._mindspore_onednn()\n")
_TUNED = ("mindspore_cpu.tune_cpu_runtime()\n"
          "print(mindspore_cpu.onednn_isa(), mindspore_cpu.ops.conv2d_by_onednn, library.dnnl_get_effective_cpu_isa())")
_RUN_A_CONV = "ops.conv2d(ms.tensor(np.ones((1, 1, 3, 3), np.float32)), ms.tensor(np.ones((1, 1, 1, 1), np.float32)))\n"
needs_onednn = pytest.mark.skipif(mindspore_cpu.runtime._mindspore_onednn() is None,
                                  reason="MindSpore has no oneDNN of its own here")


def _new_process(code, **env):
    """The words ``code`` prints last, run in a fresh process after the imports (no ONEDNN_MAX_CPU_ISA unless given)."""
    from conftest import run_python

    result = run_python(_ONEDNN + code, env={"ONEDNN_MAX_CPU_ISA": "", "DNNL_MAX_CPU_ISA": "", **env})
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.splitlines()[-1].split()


@needs_onednn
def test_tune_cpu_runtime_caps_mindspores_onednn_at_avx2_and_convs_go_to_onednn():
    assert _new_process(_TUNED) == ["AVX2", "True", str(0x7)]


@needs_onednn
def test_tune_cpu_runtime_keeps_the_users_onednn_cap():
    assert _new_process(_TUNED, ONEDNN_MAX_CPU_ISA="AVX") == ["AVX", "True", str(0x3)]


@needs_onednn
def test_once_onednn_has_run_its_instruction_set_stays_and_picks_the_conv():
    machine = int(_new_process("print(library.dnnl_get_effective_cpu_isa())")[0])
    expected = [mindspore_cpu.runtime._ISA_NAMES.get(machine, hex(machine)), str((machine | 0x7) == 0x7), str(machine)]
    assert _new_process(_RUN_A_CONV + _TUNED) == expected


_PINNED = ("import os\ncpus = sorted(os.sched_getaffinity(0))\nmindspore_cpu.tune_cpu_runtime(len(cpus), 'every CPU')\n"
           "tids = lambda: {open(f'/proc/self/task/{t}/comm').read().strip(): int(t) for t in os.listdir('/proc/self/task')}\n"
           "with mindspore_cpu.kernel_threads_pinned() as pinned:\n"
           "    inside = all(os.sched_getaffinity(tids()[name]) == {cpu} for name, cpu in pinned.items())\n"
           "after = all(os.sched_getaffinity(tids()[name]) == set(cpus) for name in pinned)\n"
           "print(cpus == sorted(pinned.values()), inside, after, ','.join(sorted(pinned)))")


@pytest.mark.skipif(len(ALL_CPUS) < 2, reason="no thread affinity here, or one CPU (MindSpore's pool has two threads)")
def test_mindspores_kernel_threads_are_pinned_one_per_cpu_while_they_are_as_many_as_the_cpus():
    with every_cpu():  # as many kernel threads as CPUs: the machine's, not a pytest-xdist worker's
        each_cpu_once, each_on_its_own, free_after, names = _new_process(_PINNED)
    assert (each_cpu_once, each_on_its_own, free_after) == ("True", "True", "True")
    assert names.startswith("ActorThread_0")  # the pool that runs its CPU kernels


def test_mindspores_kernel_threads_stay_unpinned_when_xrand_gave_it_fewer_threads_than_cpus():
    if mindspore_cpu.cpu_threads()[0] >= len(ALL_CPUS):  # not so where pytest-xdist workers share them
        pytest.skip("this process's kernel threads are as many as its CPUs")
    with every_cpu(), mindspore_cpu.kernel_threads_pinned() as pinned:  # more CPUs than kernel threads
        assert pinned == {}


# ---------------------------------------------------------------- scheduler and Stable Diffusion operators

def _all_originals():
    import mindspore.nn.layer.normalization as normalization

    return {
        "Tensor.nonzero": vars(ms.Tensor).get("nonzero"), "Tensor.lerp": ms.Tensor.lerp, "mint.lerp": mint.lerp,
        "mint.atan2": mint.atan2, "mint.stack": mint.stack, "mint.linspace": mint.linspace,
        "mint.zeros_like": mint.zeros_like, "mint.full": mint.full, "mint.log": mint.log, "mint.mm": mint.mm,
        "F.layer_norm": MF.layer_norm, "F.gelu": MF.gelu,
        "LayerNorm.construct": vars(normalization.LayerNormExt)["construct"],
    }


def test_every_scheduler_and_sd_operator_is_replaced_on_the_cpu_and_restored():
    before = _all_originals()
    assert "lerp" not in vars(ms.Tensor)  # inherited from the C++ TensorPy
    mindspore_cpu.install()
    during = _all_originals()
    assert [k for k in before if during[k] is before[k]] == []
    mindspore_cpu.uninstall()
    assert _all_originals() == before
    assert "lerp" not in vars(ms.Tensor)


def test_none_of_the_new_operators_is_replaced_off_the_cpu(monkeypatch):
    before = _all_originals()
    real = ms.get_context
    monkeypatch.setattr(ms, "get_context", lambda key: "GPU" if key == "device_target" else real(key))
    assert mindspore_cpu.install() is False
    assert _all_originals() == before


def test_without_the_fallbacks_these_operators_fail_on_the_cpu():
    """The reason each fallback exists (if MindSpore gains a CPU kernel, this test says so)."""
    x = ms.tensor(_rand(3))
    for call in (lambda: x.nonzero(as_tuple=True), lambda: mint.atan2(x, x), lambda: mint.stack([x, x]),
                 lambda: mint.linspace(0, 1, 5), lambda: mint.zeros_like(x), lambda: mint.full((2,), 1.0),
                 lambda: mint.log(ms.tensor([1, 2])), lambda: MF.layer_norm(x, (3,)), lambda: MF.gelu(x),
                 lambda: mint.mm(x[:, None], x[None, :])):
        with pytest.raises((RuntimeError, TypeError), match="kernel|Unsupported data type"):
            out = call()
            (out[0] if isinstance(out, tuple) else out).asnumpy()  # PyNative may fail only when read
    assert np.isnan(ms.tensor([-np.inf], ms.float32).lerp(ms.tensor([1.0]), 0.5).asnumpy()[0])


@pytest.mark.parametrize("values", [[0.0, 1.5, 0.0, -2.0], [[0, 3], [4, 0], [0, 0]], [[0.0, 0.0]], [], 7.0, 0.0])
def test_nonzero_matches_torch(fallbacks, values):
    x = np.array(values, np.float32)
    for as_tuple in (True, False):
        out = ms.tensor(x).nonzero(as_tuple=as_tuple)
        ref = torch.from_numpy(x).nonzero(as_tuple=as_tuple)
        if as_tuple:
            assert len(out) == len(ref)
            for o, r in zip(out, ref):
                assert o.dtype == ms.int64
                np.testing.assert_array_equal(o.asnumpy(), r.numpy())
        else:
            assert out.shape == tuple(ref.shape)
            np.testing.assert_array_equal(out.asnumpy(), ref.numpy())


def test_the_ddpm_index_lookup_runs(fallbacks):
    """mindone's DDPMScheduler.index_for_timestep: (timesteps == t).nonzero(as_tuple=True)[0][0]."""
    timesteps = ms.tensor(np.arange(999, -1, -100))
    assert int((timesteps == 499).nonzero(as_tuple=True)[0][0]) == 5


@pytest.mark.parametrize("weight", [0.0, 0.25, 0.5, 0.75, 1.0, 1.5, -0.5, "tensor"])
def test_lerp_matches_torch_also_from_minus_infinity(fallbacks, weight):
    start = np.concatenate([[-np.inf, 0.0, -np.inf], _rand(5, seed=1)]).astype(np.float32)
    end = np.concatenate([[1.0, -np.inf, 2.0], _rand(5, seed=2)]).astype(np.float32)
    w = _rand(8, seed=3) if weight == "tensor" else weight
    ms_w, pt_w = (ms.tensor(w), torch.from_numpy(w)) if weight == "tensor" else (w, w)
    ref = torch.from_numpy(start).lerp(torch.from_numpy(end), pt_w).numpy()
    for out in (ms.tensor(start).lerp(ms.tensor(end), ms_w), mint.lerp(ms.tensor(start), ms.tensor(end), ms_w)):
        # same inf/NaN places; finite values within an ulp (torch's vectorised kernel fuses multiply-add)
        np.testing.assert_allclose(out.asnumpy(), ref, rtol=2.4e-7, atol=0)


def test_kdpm2_log_sigma_interpolation_keeps_its_last_sigma_zero(fallbacks):
    """KDPM2's ``sigmas.log().lerp(rolled.log(), 0.5).exp()`` with a final sigma of 0 (log -inf)."""
    sigmas = np.array([14.6, 3.2, 0.5, 0.0], np.float32)
    rolled = np.roll(sigmas, 1)
    out = ms.tensor(sigmas).log().lerp(ms.tensor(rolled).log(), 0.5).exp().asnumpy()
    ref = torch.from_numpy(sigmas).log().lerp(torch.from_numpy(rolled).log(), 0.5).exp().numpy()
    assert out[-1] == ref[-1] == 0.0  # NaN without the fallback; the NaN at 0 is dropped by both libraries
    np.testing.assert_allclose(out, ref, rtol=1e-6)


@pytest.mark.parametrize("dtypes", [("float32", "float32"), ("int64", "int64"), ("float32", "int32")])
def test_atan2_matches_torch(fallbacks, dtypes):
    a = (_rand(4, 5, seed=1) * 3).astype(dtypes[0])
    b = (_rand(5, seed=2) * 3).astype(dtypes[1])  # broadcast
    a[0, :3], b[:3] = [0, 0, -1], [0, -1, 0]
    out = mint.atan2(ms.tensor(a), ms.tensor(b))
    ref = torch.atan2(torch.from_numpy(a), torch.from_numpy(b))
    assert out.dtype == ms.float32 and ref.dtype == torch.float32
    np.testing.assert_allclose(out.asnumpy(), ref.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shapes", [((9, 1), (1, 9)), ((3, 4), (4, 5))])  # SAG's blur kernel: an outer product
def test_mm_matches_torch(fallbacks, shapes):
    a, b = _rand(*shapes[0], seed=1), _rand(*shapes[1], seed=2)
    out = mint.mm(ms.tensor(a), ms.tensor(b))
    np.testing.assert_allclose(out.asnumpy(), torch.mm(torch.from_numpy(a), torch.from_numpy(b)).numpy(), rtol=1e-6,
                               atol=1e-7)


@pytest.mark.parametrize("dim", [0, 1, -1, 2])
def test_stack_matches_torch(fallbacks, dim):
    xs = [_rand(2, 3, seed=k) for k in range(3)]
    out = mint.stack([ms.tensor(x) for x in xs], dim=dim)
    ref = torch.stack([torch.from_numpy(x) for x in xs], dim=dim)
    np.testing.assert_array_equal(out.asnumpy(), ref.numpy())
    tup = mint.stack(tuple(ms.tensor(x) for x in xs))  # a tuple, as mindone passes it too
    np.testing.assert_array_equal(tup.asnumpy(), np.stack(xs))


@pytest.mark.parametrize("start, end, steps, dtype", [
    (0.0001, 0.02, 1000, None), (0.0001 ** 0.5, 0.012 ** 0.5, 1000, None), (0, 1, 10, None),
    (np.log(80.0), np.log(0.002), 7, None), (3.0, -2.0, 5, None), (0, 999, 11, "int64"), (1.5, 1.5, 1, None),
    (0.0, 1.0, 0, None), (-1.0, 2.0, 4, "float64"),
])
def test_linspace_matches_torch(fallbacks, start, end, steps, dtype):
    out = mint.linspace(start, end, steps, dtype=None if dtype is None else getattr(ms, dtype))
    ref = torch.linspace(start, end, steps, dtype=None if dtype is None else getattr(torch, dtype))
    assert out.shape == tuple(ref.shape)
    assert out.asnumpy().dtype == ref.numpy().dtype
    np.testing.assert_array_equal(out.asnumpy()[[0, -1]] if steps else [], ref.numpy()[[0, -1]] if steps else [])
    # torch's vectorised kernel steps from a block's base value: an ulp apart in places
    np.testing.assert_allclose(out.asnumpy(), ref.numpy(), rtol=2.4e-7, atol=0)


@pytest.mark.parametrize("dtype", [None, "int32", "float16"])
def test_zeros_like_matches_torch(fallbacks, dtype):
    x = _rand(2, 3)
    out = mint.zeros_like(ms.tensor(x), dtype=None if dtype is None else getattr(ms, dtype))
    ref = torch.zeros_like(torch.from_numpy(x), dtype=None if dtype is None else getattr(torch, dtype))
    assert out.asnumpy().dtype == ref.numpy().dtype
    np.testing.assert_array_equal(out.asnumpy(), ref.numpy())
    assert mint.zeros_like(ms.tensor(np.zeros((0, 4), np.float32))).shape == (0, 4)


@pytest.mark.parametrize("size, value, dtype", [
    ((1,), 0.002, None), ((2, 3), 3, None), ((2,), True, None), ((3,), -np.inf, None), ((2,), 7, "float32"),
    ((0,), 1.0, None), ((2, 2), "tensor", None),
])
def test_full_matches_torch(fallbacks, size, value, dtype):
    ms_value, pt_value = (ms.tensor(0.25), torch.tensor(0.25)) if value == "tensor" else (value, value)
    out = mint.full(size, ms_value, dtype=None if dtype is None else getattr(ms, dtype))
    ref = torch.full(size, pt_value, dtype=None if dtype is None else getattr(torch, dtype))
    assert out.asnumpy().dtype == ref.numpy().dtype
    np.testing.assert_array_equal(out.asnumpy(), ref.numpy())


@pytest.mark.parametrize("dtype", ["int64", "int32", "bool", "float32"])
def test_log_matches_torch_also_on_integers(fallbacks, dtype):
    x = np.array([0, 1, 2, 10, 1000], dtype=dtype) if dtype != "float32" else np.abs(_rand(5)) + [0, 1, 0, 0, 0]
    x = x.astype(dtype)
    out = mint.log(ms.tensor(x))
    ref = torch.log(torch.from_numpy(x))
    assert out.asnumpy().dtype == ref.numpy().dtype == np.float32
    np.testing.assert_allclose(out.asnumpy(), ref.numpy(), rtol=1e-6)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(fallbacks, approximate):
    x = np.concatenate([_rand(2000) * 4, [0.0, -20.0, 20.0, -5.0]]).astype(np.float32)
    out = MF.gelu(ms.tensor(x), approximate=approximate).asnumpy()
    ref = TF.gelu(torch.from_numpy(x), approximate=approximate).numpy()
    # erf's float32 error near x = -5 is 3e-7 absolute (measured 1.2e-6 at most on 2,000 values)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=2e-6)
    layer = mint.nn.GELU(approximate=approximate)(ms.tensor(x)).asnumpy()
    np.testing.assert_array_equal(layer, out)
    # the exact form is written out as ops.gelu computes it (its Div as "/"): the same bits
    np.testing.assert_array_equal(out, ms.ops.gelu(ms.tensor(x), approximate=approximate).asnumpy())


@pytest.mark.parametrize("shape, normalized, affine", [((2, 5, 8), (8,), True), ((3, 4, 6), (4, 6), True),
                                                        ((2, 8), 8, False), ((0, 8), (8,), True)])
def test_layer_norm_matches_torch(fallbacks, shape, normalized, affine):
    x = _rand(*shape) * 3 + 1
    norm_shape = (normalized,) if isinstance(normalized, int) else normalized
    w, b = (_rand(*norm_shape, seed=4), _rand(*norm_shape, seed=5)) if affine else (None, None)
    conv = (lambda a, f: None if a is None else f(a))
    out = MF.layer_norm(ms.tensor(x), normalized, conv(w, ms.tensor), conv(b, ms.tensor), 1e-5).asnumpy()
    ref = TF.layer_norm(torch.from_numpy(x), norm_shape, conv(w, torch.from_numpy), conv(b, torch.from_numpy),
                        1e-5).numpy()
    assert out.shape == ref.shape
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=2e-6)


def test_layer_norm_layer_matches_torch(fallbacks):
    ref = torch.nn.LayerNorm(8, eps=1e-6)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(_rand(8, seed=1)))
        ref.bias.copy_(torch.from_numpy(_rand(8, seed=2)))
    layer = mint.nn.LayerNorm(8, eps=1e-6)
    layer.weight.set_data(ms.tensor(ref.weight.detach().numpy()))
    layer.bias.set_data(ms.tensor(ref.bias.detach().numpy()))
    x = _rand(2, 3, 8)
    with torch.no_grad():
        expected = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(layer(ms.tensor(x)).asnumpy(), expected, rtol=1e-5, atol=2e-6)
    plain = mint.nn.LayerNorm(8, elementwise_affine=False)(ms.tensor(x)).asnumpy()
    np.testing.assert_allclose(plain, TF.layer_norm(torch.from_numpy(x), (8,)).numpy(), rtol=1e-5, atol=2e-6)


def test_layer_norm_and_gelu_fallbacks_compile_in_graph_mode():
    class Block(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.norm = mint.nn.LayerNorm(8)

        def construct(self, x):
            return MF.gelu(self.norm(x)) + MF.layer_norm(x, (8,))

    x = _rand(2, 8)
    t = torch.from_numpy(x)
    expected = (TF.gelu(TF.layer_norm(t, (8,))) + TF.layer_norm(t, (8,))).numpy()
    block = Block()
    with mindspore_cpu.cpu_fallbacks(), mindspore_mode("graph"):
        out = block(ms.tensor(x)).asnumpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=2e-6)


def test_geglu_compiles_in_graph_mode_with_pynative_numbers():
    from mindone.diffusers.models.activations import GEGLU

    ms.set_seed(0)
    cell = GEGLU(8, 4)
    x = ms.tensor(_rand(2, 3, 8))
    with mindspore_cpu.cpu_fallbacks():
        pynative = cell(x).asnumpy()
        with mindspore_mode("graph"):
            graph = cell(x).asnumpy()
    assert graph.shape == (2, 3, 4)
    np.testing.assert_allclose(graph, pynative, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------- SDXL, SD3, Flux, PixArt, Wan operators

def _family_originals():
    from mindone.diffusers.models import layers_compat
    from mindone.diffusers.models.attention_processor import Attention
    from mindspore.ops.operations import nn_ops

    return {
        "mint.outer": mint.outer, "F.embedding": MF.embedding,
        "Embedding.construct": vars(mint.nn.Embedding)["construct"], "mint.einsum": mint.einsum,
        "Tensor.repeat_interleave": vars(ms.Tensor).get("repeat_interleave"),
        "mint.repeat_interleave": mint.repeat_interleave, "nn_ops.FlashAttentionScore": nn_ops.FlashAttentionScore,
        "mint.randn": mint.randn, "Attention.math_attention_op": vars(Attention)["math_attention_op"],
        "F.conv3d": MF.conv3d, "Conv3d.construct": vars(mint.nn.Conv3d)["construct"],
        "Tensor.clone": vars(ms.Tensor).get("clone"), "mint.clone": mint.clone, "F.normalize": MF.normalize,
        "layers_compat.FlashAttentionScore": layers_compat.ops.operations.nn_ops.FlashAttentionScore,
    }


def test_every_family_operator_is_replaced_on_the_cpu_and_restored():
    before = _family_originals()
    assert "repeat_interleave" not in vars(ms.Tensor) and "clone" not in vars(ms.Tensor)  # the C++ TensorPy's
    mindspore_cpu.install()
    during = _family_originals()
    assert [k for k in before if during[k] is before[k]] == []
    mindspore_cpu.uninstall()
    assert _family_originals() == before
    assert "repeat_interleave" not in vars(ms.Tensor) and "clone" not in vars(ms.Tensor)


def test_none_of_the_family_operators_is_replaced_off_the_cpu(monkeypatch):
    before = _family_originals()
    real = ms.get_context
    monkeypatch.setattr(ms, "get_context", lambda key: "Ascend" if key == "device_target" else real(key))
    assert mindspore_cpu.install() is False
    assert _family_originals() == before


def _flash(layout="BNSD", scale=1.0):
    from mindspore.ops.operations import nn_ops

    return nn_ops.FlashAttentionScore(head_num=2, scale_value=scale, input_layout=layout)


def test_without_the_fallbacks_the_family_operators_fail_on_the_cpu():
    """Why each family stand-in exists (if MindSpore gains a CPU kernel, this test says so)."""
    x, ids = ms.tensor(_rand(2, 3)), ms.tensor(np.array([[0, 1]]))
    q = ms.tensor(_rand(1, 2, 3, 4)).astype(ms.float16)
    for call in (lambda: mint.outer(x[0], x[1]), lambda: MF.embedding(ids, x),
                 lambda: mint.nn.Embedding(2, 3)(ids),
                 lambda: x.repeat_interleave(2, 1, output_size=6),  # as Flux calls it (without: another kernel)
                 lambda: mint.repeat_interleave(x, 2), lambda: _flash()(q, q, q)[3], lambda: mint.randn(2, 3),
                 lambda: mint.nn.Conv3d(2, 1, 1)(ms.tensor(_rand(1, 2, 3, 3, 3))),
                 lambda: x.clone(), lambda: mint.clone(x), lambda: MF.normalize(x)):
        with pytest.raises(RuntimeError, match="kernel"):
            call().asnumpy()  # PyNative may fail only when read
    with pytest.raises(NotImplementedError, match="only supports Ascend"):
        mint.einsum("ij->ji", x)
    with pytest.raises(NotImplementedError, match="only supports Ascend"):
        MF.conv3d(ms.tensor(_rand(1, 2, 3, 3, 3)), ms.tensor(_rand(1, 2, 1, 1, 1)))
    with pytest.raises(RuntimeError, match="'repeat' is not supported on this device"):
        x.repeat(1, 2)  # MindSpore 2.10 mindspore/ops/tensor_method.py tensor_repeat
    with pytest.raises(RuntimeError, match="OnesLikeExt"):
        mint.ones_like(x).asnumpy()


def test_without_its_fallback_mindones_math_attention_refuses_a_4d_mask():
    """mindone's own attention off Ascend flattens query, key and value to 3-D but not the mask
    (with every other fallback in place: Baddbmm has no CPU kernel either). In PixArt the batch
    sizes differ and the add cannot broadcast; here the scores come out 4-D for the next bmm."""
    from mindone.diffusers.models.attention_processor import Attention

    mindones = vars(Attention)["math_attention_op"]
    attn = Attention(query_dim=8, heads=2, dim_head=4)
    q, mask = ms.tensor(_rand(1, 2, 3, 4)), ms.tensor(np.zeros((1, 2, 1, 5), np.float32))
    with mindspore_cpu.cpu_fallbacks(), pytest.raises(ValueError, match="broadcast|3D"):  # mask and scores mix
        mindones(attn, q, ms.tensor(_rand(1, 2, 5, 4)), ms.tensor(_rand(1, 2, 5, 4)), mask).asnumpy()


@pytest.mark.parametrize("dtypes", [("float32", "float32"), ("float32", "float64"), ("int64", "int64")])
def test_outer_matches_torch(fallbacks, dtypes):
    a, b = (_rand(5, seed=1) * 10).astype(dtypes[0]), (_rand(3, seed=2) * 10).astype(dtypes[1])
    out = mint.outer(ms.tensor(a), ms.tensor(b)).asnumpy()
    ref = torch.outer(torch.from_numpy(a), torch.from_numpy(b)).numpy()
    assert out.dtype == ref.dtype
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("max_norm", [None, 1.5])
def test_embedding_matches_torch(fallbacks, max_norm):
    weight, ids = _rand(10, 4) * 2, np.array([[0, 3, 9], [3, 3, 1]])
    out = MF.embedding(ms.tensor(ids), ms.tensor(weight), max_norm=max_norm).asnumpy()
    ref = TF.embedding(torch.from_numpy(ids), torch.from_numpy(weight.copy()), max_norm=max_norm).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=0 if max_norm is None else 1e-7)
    layer = mint.nn.Embedding(10, 4, _weight=ms.tensor(weight))
    np.testing.assert_array_equal(layer(ms.tensor(ids)).asnumpy(), weight[ids])


@pytest.mark.parametrize("equation, shapes", [
    ("nhwpqc->nchpwq", [(2, 3, 4, 2, 2, 5)]),  # SD3's and PixArt's unpatchify: a permutation
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("...n,d->...nd", [(2, 3, 4), (6,)]), ("ij,jk", [(3, 4), (4, 2)]),
    ("i,i->", [(7,), (7,)]), ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]), ("ij->j", [(3, 4)]),
])
def test_einsum_matches_torch(fallbacks, equation, shapes):
    xs = [_rand(*s, seed=k) for k, s in enumerate(shapes)]
    out = mint.einsum(equation, *[ms.tensor(x) for x in xs]).asnumpy()
    ref = torch.einsum(equation, *[torch.from_numpy(x) for x in xs]).numpy()
    assert out.shape == ref.shape
    if len(xs) == 1 and "->" in equation and len(equation.split("->")[1]) == len(equation.split("->")[0]):
        np.testing.assert_array_equal(out, ref)  # a permutation moves values, exactly
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    listed = mint.einsum(equation, [ms.tensor(x) for x in xs]).asnumpy()  # operands as one list, as torch takes
    np.testing.assert_array_equal(listed, out)


def test_einsum_refuses_what_it_does_not_compute(fallbacks):
    with pytest.raises(ValueError, match="repeats a letter"):
        mint.einsum("ii->i", ms.tensor(_rand(3, 3)))
    with pytest.raises(ValueError, match="2 operands, 1 given"):
        mint.einsum("ij,jk->ik", ms.tensor(_rand(3, 3)))


@pytest.mark.parametrize("repeats, dim", [(2, 1), (3, 0), (2, -1), (2, None), ("tensor", 1)])
def test_repeat_interleave_matches_torch(fallbacks, repeats, dim):
    x = _rand(2, 3, 4)
    ms_reps, pt_reps = (ms.tensor([1, 0, 2]), torch.tensor([1, 0, 2])) if repeats == "tensor" else (repeats, repeats)
    ref = torch.from_numpy(x).repeat_interleave(pt_reps, dim).numpy()
    for out in (ms.tensor(x).repeat_interleave(ms_reps, dim), mint.repeat_interleave(ms.tensor(x), ms_reps, dim)):
        np.testing.assert_array_equal(out.asnumpy(), ref)
    # Flux's rotary embedding: freqs.cos().repeat_interleave(2, dim=1, output_size=...)
    np.testing.assert_array_equal(ms.tensor(x[0]).repeat_interleave(2, dim=1, output_size=8).asnumpy(),
                                  np.repeat(x[0], 2, axis=1))


@pytest.mark.parametrize("layout", ["BNSD", "BSND", "BSH"])
@pytest.mark.parametrize("masked", [False, True])
def test_flash_attention_matches_torch_sdpa(fallbacks, layout, masked):
    q, k, v = _rand(2, 2, 5, 4, seed=1), _rand(2, 2, 7, 4, seed=2), _rand(2, 2, 7, 4, seed=3)
    keep = np.ones((2, 1, 5, 7), bool)
    if masked:
        keep[0, :, :, 4:] = False
        keep[1, :, :, :2] = False
    scale = 0.5
    ref = TF.scaled_dot_product_attention(*(torch.from_numpy(t) for t in (q, k, v)),
                                          attn_mask=torch.from_numpy(keep) if masked else None, scale=scale).numpy()
    to_layout = {"BNSD": lambda t: t, "BSND": lambda t: t.transpose(0, 2, 1, 3),
                 "BSH": lambda t: t.transpose(0, 2, 1, 3).reshape(t.shape[0], t.shape[2], -1)}[layout]
    mask = ms.tensor(~keep) if masked else None  # MindSpore's mask: True discards
    out = _flash(layout, scale)(*(ms.tensor(to_layout(t)) for t in (q, k, v)), None, None, None, mask)[3]
    np.testing.assert_allclose(out.asnumpy(), to_layout(ref), rtol=1e-5, atol=1e-6)
    half = _flash(layout, scale)(*(ms.tensor(to_layout(t)).astype(ms.float16) for t in (q, k, v)),
                                 None, None, None, mask)[3]
    assert half.dtype == ms.float16  # computed in float32, returned in the inputs' dtype
    np.testing.assert_allclose(half.asnumpy().astype(np.float32), to_layout(ref), rtol=2e-3, atol=2e-3)


def test_flash_attention_refuses_what_it_does_not_compute(fallbacks):
    from mindspore.ops.operations import nn_ops

    with pytest.raises(ValueError, match="layouts"):
        nn_ops.FlashAttentionScore(1, input_layout="TND")
    with pytest.raises(ValueError, match="inference"):
        nn_ops.FlashAttentionScore(1, keep_prob=0.9)


def test_mindones_math_attention_with_a_4d_mask_matches_torch_sdpa(fallbacks):
    """PixArt's cross-attention: (batch, heads, 1, tokens) additive text mask."""
    from mindone.diffusers.models.attention_processor import Attention

    attn = Attention(query_dim=8, heads=2, dim_head=4)
    q, k, v = _rand(2, 2, 3, 4, seed=1), _rand(2, 2, 5, 4, seed=2), _rand(2, 2, 5, 4, seed=3)
    bias = np.zeros((2, 2, 1, 5), np.float32)
    bias[0, :, :, 3:] = -10000.0
    out = attn.math_attention_op(ms.tensor(q), ms.tensor(k), ms.tensor(v), ms.tensor(bias)).asnumpy()
    ref = TF.scaled_dot_product_attention(*(torch.from_numpy(t) for t in (q, k, v)),
                                          attn_mask=torch.from_numpy(bias)).numpy()
    # mindone scales query and key by sqrt(scale) each, torch their product: a few ulps apart
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=3e-6)
    keep = bias == 0  # a boolean mask (True keeps, torch's convention, as mindone's callers pass it)
    out = attn.math_attention_op(ms.tensor(q), ms.tensor(k), ms.tensor(v), ms.tensor(keep)).asnumpy()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=3e-6)


def test_randn_draws_standard_normal_values_of_the_asked_shape(fallbacks):
    """No torch counterpart to match value for value: mindone draws with it only to initialise
    weights that loading replaces (PixArt's scale_shift_table)."""
    ms.set_seed(0)
    a = mint.randn(200, 50)
    ms.set_seed(0)
    b = mint.randn((200, 50), dtype=ms.float16)
    assert a.shape == b.shape == (200, 50) and a.dtype == ms.float32 and b.dtype == ms.float16
    values = a.asnumpy()
    assert abs(values.mean()) < 0.05 and abs(values.std() - 1) < 0.05
    np.testing.assert_allclose(b.asnumpy(), values, atol=2e-3)  # the same seed, the same draw
    with pytest.raises(RuntimeError, match="generator"):
        mint.randn(2, generator=ms.Generator())


@pytest.mark.parametrize("stride, padding, dilation, groups, bias", [
    (1, 1, 1, 1, True), ((1, 2, 2), 0, 1, 1, True), (1, (0, 1, 1), 1, 2, False), (1, 2, 2, 1, True),
    (1, "same", 1, 1, True),
])
def test_conv3d_matches_torch(fallbacks, stride, padding, dilation, groups, bias):
    x, w, b = _rand(2, 4, 5, 7, 6, seed=1), _rand(6, 4 // groups, 3, 3, 3, seed=2), _rand(6, seed=3)
    out = MF.conv3d(ms.tensor(x), ms.tensor(w), ms.tensor(b) if bias else None, stride, padding, dilation, groups)
    ref = TF.conv3d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b) if bias else None,
                    stride, padding, dilation, groups)
    np.testing.assert_allclose(out.asnumpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("padding_mode", ["zeros", "replicate"])
def test_conv3d_layer_matches_torch(fallbacks, padding_mode):
    layer = mint.nn.Conv3d(3, 5, 3, stride=(1, 2, 2), padding=1, padding_mode=padding_mode)
    ref = torch.nn.Conv3d(3, 5, 3, stride=(1, 2, 2), padding=1, padding_mode=padding_mode)
    with torch.no_grad():
        layer.weight.set_data(ms.tensor(ref.weight.numpy()))
        layer.bias.set_data(ms.tensor(ref.bias.numpy()))
        x = _rand(1, 3, 4, 9, 8)
        expected = ref(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(layer(ms.tensor(x)).asnumpy(), expected, rtol=1e-5, atol=1e-5)


def test_ones_like_keeps_the_shape_and_the_dtype_or_takes_one(fallbacks):
    """LTX's rotary embedding pads its cosines with mint.ones_like."""
    x = ms.tensor(_rand(2, 3)).astype(ms.float16)
    for out, dtype in ((mint.ones_like(x), ms.float16), (mint.ones_like(x, dtype=ms.int32), ms.int32)):
        assert out.dtype == dtype and out.shape == (2, 3) and (out.asnumpy() == 1).all()


@pytest.mark.parametrize("repeats", [(1, 2), (2, 1, 3), ((2, 2),), ([3, 1],)])
def test_tensor_repeat_matches_torch(fallbacks, repeats):
    """Flux Kontext's CLIP embedding: ``prompt_embeds.repeat(1, num_images_per_prompt)``."""
    x = _rand(2, 3)
    np.testing.assert_array_equal(ms.tensor(x).repeat(*repeats).asnumpy(), torch.from_numpy(x).repeat(*repeats).numpy())
    with pytest.raises(ValueError, match="1 repeats for a tensor of 2 dimensions"):
        ms.tensor(x).repeat(2)  # torch refuses fewer repeats than dimensions too


def test_clone_copies_the_values_and_owns_them(fallbacks):
    x = ms.tensor(_rand(2, 3))
    copies = [x.clone(), mint.clone(x), x[:, 1:].clone()]
    expected = [x.asnumpy().copy(), x.asnumpy().copy(), x.asnumpy()[:, 1:].copy()]
    x[0, 1] = 100.0  # Wan's VAE keeps clones of its cache: a later write to the source must not reach them
    for copy, want in zip(copies, expected):
        assert copy.dtype == x.dtype
        np.testing.assert_array_equal(copy.asnumpy(), want)


@pytest.mark.parametrize("p, dim", [(2.0, 1), (2.0, -1), (1.0, 0), (float("inf"), 1), (3.0, 1)])
def test_normalize_matches_torch(fallbacks, p, dim):
    x = _rand(3, 4, 5)
    x[0, :, 0] = 0.0  # a zero vector: the eps clamp
    out = MF.normalize(ms.tensor(x), p=p, dim=dim).asnumpy()
    ref = TF.normalize(torch.from_numpy(x), p=p, dim=dim).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7)


def test_the_family_fallbacks_compile_in_graph_mode_with_pynatives_numbers():
    from mindspore.ops.operations import nn_ops

    class Block(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.embed = mint.nn.Embedding(10, 8)
            self.conv = mint.nn.Conv3d(2, 2, 3, padding=1)

        def construct(self, ids, x, video):
            h = self.embed(ids) + mint.outer(x[0, 0], x[0, 1])[:2, :8] + MF.normalize(x, dim=-1)
            h = mint.einsum("bsd->bds", h).swapaxes(1, 2)
            q = h.reshape(1, 2, 2, 4).swapaxes(1, 2).astype(ms.float16)
            attn = nn_ops.FlashAttentionScore(head_num=2, scale_value=0.5, input_layout="BNSD")(q, q, q)[3]
            return h + attn.swapaxes(1, 2).reshape(1, 2, 8).astype(ms.float32), self.conv(video)

    block = Block()
    inputs = (ms.tensor(np.array([[1, 7]])), ms.tensor(_rand(1, 2, 8)), ms.tensor(_rand(1, 2, 3, 4, 4)))
    with mindspore_cpu.cpu_fallbacks():
        pynative = [o.asnumpy() for o in block(*inputs)]
        with mindspore_mode("graph"):
            graph = [o.asnumpy() for o in block(*inputs)]
    for g, p in zip(graph, pynative):
        np.testing.assert_allclose(g, p, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------- Sana, Lumina 2 (Gemma-2) operators

def _gemma_originals():
    return {"Tensor.normal_": vars(ms.Tensor).get("normal_"), "Tensor.zero_": vars(ms.Tensor).get("zero_"),
            "mint.tril": mint.tril, "mint.unique": mint.unique, "mint.norm": mint.norm}


def test_the_gemma_family_operators_fail_without_their_stand_ins_and_are_replaced_and_restored():
    """Why each stand-in exists (if MindSpore gains a CPU kernel, this test says so)."""
    x = ms.tensor(_rand(3, 4))
    for call in (lambda: ms.tensor(_rand(2, 3)).normal_(), lambda: ms.tensor(_rand(2, 3)).zero_(),
                 lambda: mint.tril(x), lambda: mint.unique(ms.tensor(np.array([2, 1, 2]))),
                 lambda: mint.norm(x, dim=-1)):
        with pytest.raises(RuntimeError, match="kernel"):
            call().asnumpy()
    before = _gemma_originals()
    mindspore_cpu.install()
    assert [k for k, v in _gemma_originals().items() if v is before[k]] == []
    mindspore_cpu.uninstall()
    assert _gemma_originals() == before


def test_normal_and_zero_fill_in_place(fallbacks):
    """What mindone.transformers' Gemma-2 initialisation asks of them (loading replaces the values)."""
    x = ms.tensor(np.zeros((200, 50), np.float32))
    assert x.normal_(mean=1.0, std=0.5) is x
    values = x.asnumpy()
    assert abs(values.mean() - 1.0) < 0.02 and abs(values.std() - 0.5) < 0.02
    assert x.zero_() is x and not x.asnumpy().any()
    with pytest.raises(RuntimeError, match="takes no generator"):
        x.normal_(generator=object())


@pytest.mark.parametrize("diagonal", [0, -2, 1])
def test_tril_matches_torch(fallbacks, diagonal):
    x = _rand(2, 5, 5)
    np.testing.assert_array_equal(mint.tril(ms.tensor(x), diagonal=diagonal).asnumpy(),
                                  torch.tril(torch.from_numpy(x), diagonal=diagonal).numpy())
    mask = np.ones((4, 4), bool)
    np.testing.assert_array_equal(mint.tril(ms.tensor(mask), diagonal=-1).asnumpy(), np.tril(mask, -1))


@pytest.mark.parametrize("inverse, counts", [(False, False), (True, True)])
def test_unique_matches_torch(fallbacks, inverse, counts):
    values = np.array([[3, 1, 3], [2, 1, 7]], np.int64)
    got = mint.unique(ms.tensor(values), return_inverse=inverse, return_counts=counts)
    want = torch.unique(torch.from_numpy(values), return_inverse=inverse, return_counts=counts)
    for g, w in zip(got if inverse else (got,), want if inverse else (want,)):
        np.testing.assert_array_equal(g.asnumpy(), w.numpy())


@pytest.mark.parametrize("p, dim, keepdim", [("fro", -1, True), (2, None, False), (1, 0, False), (3, (0, 1), True)])
def test_norm_matches_torch(fallbacks, p, dim, keepdim):
    x = _rand(3, 4, 5)
    np.testing.assert_allclose(mint.norm(ms.tensor(x), p=p, dim=dim, keepdim=keepdim).asnumpy(),
                               torch.norm(torch.from_numpy(x), p=p, dim=dim, keepdim=keepdim).numpy(), rtol=2e-6)


# ---------------------------------------------------------------- Qwen-Image (Qwen2.5-VL, its VAE) operators

def test_the_qwen_image_operators_fail_without_their_stand_ins_and_are_replaced_and_restored():
    """Tensor.masked_fill_ (Qwen2.5-VL's position ids) and ops.flash_attention_score (Qwen-Image's
    VAE attention) have no CPU kernel (if MindSpore gains one, this test says so)."""
    from mindspore import ops

    x = ms.tensor(_rand(2, 3))
    q = ms.tensor(_rand(1, 1, 4, 8))
    for call in (lambda: x.masked_fill_(x > 0, 1.0), lambda: ops.flash_attention_score(q, q, q, 1,
                                                                                         input_layout="BNSD")):
        with pytest.raises(RuntimeError, match="kernel"):
            call().asnumpy()
    before = (vars(ms.Tensor).get("masked_fill_"), ops.flash_attention_score)
    mindspore_cpu.install()
    assert vars(ms.Tensor).get("masked_fill_") is not before[0] and ops.flash_attention_score is not before[1]
    mindspore_cpu.uninstall()
    assert (vars(ms.Tensor).get("masked_fill_"), ops.flash_attention_score) == before


@pytest.mark.parametrize("value", [1, -2.5])
def test_masked_fill_in_place_matches_torch(fallbacks, value):
    a = (_rand(3, 5) * 4).astype(np.int64)
    x = ms.tensor(a)
    assert x.masked_fill_(ms.tensor(a == 0), value) is x
    expected = torch.from_numpy(a).masked_fill_(torch.from_numpy(a == 0), value)
    np.testing.assert_array_equal(x.asnumpy(), expected.numpy())


def test_flash_attention_score_function_matches_torch_sdpa_with_its_scale(fallbacks):
    from mindspore import ops

    q, k, v = _rand(2, 1, 16, 8, seed=1), _rand(2, 1, 16, 8, seed=2), _rand(2, 1, 16, 8, seed=3)
    out = ops.flash_attention_score(ms.tensor(q), ms.tensor(k), ms.tensor(v), 1, scalar_value=8 ** -0.5,
                                    input_layout="BNSD")
    expected = TF.scaled_dot_product_attention(*(torch.from_numpy(t) for t in (q, k, v)))
    np.testing.assert_allclose(out.asnumpy(), expected.numpy(), rtol=1e-5, atol=1e-5)


def test_a_launch_set_synchronous_after_mindspores_first_operator_is_named_in_a_warning():
    """MindSpore takes its launch setting before its first operator only: set after it, MindSpore
    runs its operator queue's thread for good and launch_synchronously warns once, naming the fix
    (before, nothing said so: the README's example ran MindSpore's steps about 10x slower). Before
    the first operator nothing warns (test_readme: the README's example, patched before loading)."""
    from conftest import run_python

    code = ("import mindspore as ms\nfrom xrand import mindspore_cpu\n"
            "before = mindspore_cpu.launches_asynchronously()\n"
            "ms.mint.zeros((2, 2)).asnumpy()\n"  # the first operator, launched asynchronously
            "print(before, mindspore_cpu.launches_asynchronously(), mindspore_cpu.launch_synchronously(),"
            " mindspore_cpu.launch_synchronously())\n")
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True", "False", "False"]
    warned = [line for line in done.stderr.splitlines() if "RuntimeWarning" in line]
    assert len(warned) == 1 and "before MindSpore's first operator" in warned[0], done.stderr[-2000:]
