"""Half precision: compares in bfloat16 and float16 judged by torch's own floor at that dtype, and
the bfloat16 stand-ins for MindSpore's CPU kernels, each against torch in bfloat16."""

import numpy as np
import pytest

from xrand.cli import default_model
from xrand.compare.plan import DEFAULT_TOLERANCE, make_plan
from xrand.pipelines.settings import DTYPES, Settings


def test_every_dtype_has_a_default_tolerance():
    assert set(DEFAULT_TOLERANCE) == set(DTYPES) == {"float32", "float16", "bfloat16"}


def test_bfloat16_runs_pynative_on_a_cpu_with_the_reason(mindone):
    plan = make_plan(Settings(model=default_model(), steps=2, dtype="bfloat16"))
    assert plan.mindspore_mode == "pynative" and "lack bfloat16" in plan.mindspore_mode_reason
    assert plan.tolerance == DEFAULT_TOLERANCE["bfloat16"]
    assert make_plan(Settings(model=default_model(), steps=2, dtype="float16")).mindspore_mode == "graph"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_compare_on_digits_with_its_floor(mindone, dtype):
    from xrand.compare import compare_frameworks

    c = compare_frameworks(Settings(model=default_model(), steps=4, batch_size=1, dtype=dtype), noise_floor=True)
    assert c.passed, c.verdict()
    floor = c.noise_floor["rel_l2"]
    assert f"torch's own {dtype} floor" in c.verdict() and c.noise_floor["how"].startswith(f"torch {dtype} vs torch float64")
    # a half-precision floor is far above float32's (a few 1e-7) and the sides stay near it
    assert 1e-4 < floor < 5e-2 and c.final["rel_l2"] < 5 * floor
    assert c.ran["a"]["dtype"] == c.ran["b"]["dtype"] == dtype
    assert c.environments["b"]["mindspore_mode"] == ("pynative" if dtype == "bfloat16" else "graph")  # the defaults
    stand_ins = c.ran["b"]["half_precision_stand_ins"]
    if dtype == "bfloat16":  # DDIMPipeline's .numpy() refuses bfloat16: the generic loop runs it
        assert c.ran["a"]["pipeline"] == c.ran["b"]["pipeline"] == "denoising_loop"
        assert {"Dense (mint.nn.Linear)", "Conv2D (mint.nn.Conv2d)", "GroupNorm", "RealDiv"} <= set(stand_ins)
        assert all(v == ["bfloat16"] for v in stand_ins.values())
    else:
        assert c.ran["b"]["pipeline"] == "DDIMPipeline" and stand_ins == {}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_compare_on_tiny_stable_diffusion_with_its_floor(mindone, tiny_sd, dtype):
    from xrand.compare import compare_frameworks

    # float16 graph mode (the default) is test_half_precision_compare_on_digits_with_its_floor's
    c = compare_frameworks(Settings(model=tiny_sd, prompt="a red circle", steps=3, batch_size=1, dtype=dtype),
                           noise_floor=True, mindspore_mode="pynative")
    floor = c.noise_floor["rel_l2"]
    assert c.passed and 1e-4 < floor < 5e-2 and c.final["rel_l2"] < 5 * floor, c.verdict()
    stand_ins = c.ran["b"]["half_precision_stand_ins"]
    if dtype == "bfloat16":  # the CLIP text encoder's too (mindone.transformers: nn.Dense, nn.LayerNorm)
        assert {"MatMul (nn.Dense)", "LayerNorm (nn.LayerNorm)", "Gather (nn.Embedding)", "FillV2 (full)"} <= set(stand_ins)
    else:
        assert stand_ins == {}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_layers_at_half_precision_judge_each_module_by_torchs_floor_at_that_dtype(mindone, dtype):
    import copy

    import torch

    from xrand.compare import LayerOptions, compare_loaded, load_pair
    from xrand.compare.layers import LAYER_FLOOR_MULTIPLE, LayerReport
    from xrand.compare.metrics import rel_l2

    plan = make_plan(Settings(model=default_model(), steps=2, batch_size=1, dtype=dtype), layers=LayerOptions(step=0),
                     mindspore_mode="pynative")
    pair = load_pair(plan)
    conv, inputs = pair.torch.pipe.unet.conv_in, []
    hook = conv.register_forward_pre_hook(lambda module, args: inputs.append(args[0]))
    try:
        c = compare_loaded(pair, plan)
    finally:
        hook.remove()
    layers = c.layers
    assert c.passed and layers.dtype == dtype, c.verdict()
    root, eps = layers.modules[0], torch.finfo(getattr(torch, dtype)).eps
    assert root.name == "" and layers.floor["how"].startswith(f"torch {dtype} vs torch float64")
    # the denoiser's floor is of the dtype's size (float32's is about 1e-7) and sets the threshold
    assert 0.1 * eps < root.floor_rel_l2 < eps and layers.threshold == LAYER_FLOOR_MULTIPLE * root.floor_rel_l2
    # every module's too, but for the sinusoids diffusers computes in float32 whatever the weights
    # (embeddings.py, get_timestep_embedding)
    assert [m.label for m in layers.modules if m.floor_rel_l2 < 0.1 * eps] == ["time_proj"]
    # conv_in's floor is torch's conv at the dtype against float64 on the same input (the float64
    # pass's, widened from the dtype: exact)
    sample = next(x for x in inputs if x.dtype == torch.float64)
    with torch.no_grad():
        narrow = conv(sample.to(conv.weight.dtype)).float().numpy()
        wide = copy.deepcopy(conv).double()(sample).numpy()
    conv_in = next(m for m in layers.modules if m.name == "conv_in")
    assert conv_in.floor_rel_l2 == pytest.approx(rel_l2(wide, narrow), rel=1e-3)
    # MindSpore within every limit: no culprit, nothing over
    assert all(m.limit == max(layers.threshold, LAYER_FLOOR_MULTIPLE * m.floor_rel_l2) for m in layers.modules)
    assert layers.culprit is None and layers.over == [] and "no culprit" in layers.summary()
    assert max(m.local_rel_l2 for m in layers.modules) < layers.threshold
    assert LayerReport.from_dict(layers.to_dict()).dtype == dtype


@pytest.fixture(scope="module")
def tiny_sd(tmp_path_factory):
    """The tiny Stable Diffusion folder, built once for this module."""
    from xrand.models.tiny_sd import build_tiny_sd

    return str(build_tiny_sd(tmp_path_factory.mktemp("tiny-sd") / "model", seed=0))


@pytest.fixture(scope="module")
def tiny_flow(tmp_path_factory):
    """The tiny SD3 and Flux folders, each built once."""
    from xrand.models import build_tiny

    built = {}

    def folder(name):
        if name not in built:
            built[name] = str(build_tiny(name, tmp_path_factory.mktemp(name) / "model", seed=0))
        return built[name]

    return folder


@pytest.mark.parametrize("family, dtype", [("sd3", "bfloat16"), ("sd3", "float16"), ("flux", "bfloat16")])
def test_half_precision_compare_on_tiny_flow_matching_models_with_their_floor(mindone, tiny_flow, family, dtype):
    """Flow-matching families (an MMDiT transformer, CLIP and T5 text encoders) at half precision."""
    from xrand.compare import compare_frameworks

    c = compare_frameworks(Settings(model=tiny_flow(family), prompt="a red circle", steps=2, batch_size=1, dtype=dtype,
                                    height=32, width=32, call_options={"max_sequence_length": 32}), noise_floor=True)
    floor = c.noise_floor["rel_l2"]
    assert c.passed and 1e-4 < floor < 5e-2 and c.final["rel_l2"] < 5 * floor, c.verdict()
    assert f"torch's own {dtype} floor" in c.verdict()
    stand_ins = c.ran["b"]["half_precision_stand_ins"]
    if dtype == "bfloat16":  # T5's gated-gelu, the transformer's; SD3 pads the CLIP embeddings to T5's width
        expected = {"Pow (mint.pow)", "Tanh", "Dense (mint.nn.Linear)", "Split (chunk)"}
        assert expected | ({"PadV3 (pad)"} if family == "sd3" else set()) <= set(stand_ins)
    else:
        assert stand_ins == {}


def _bf16(ms, torch, array):
    """The same bfloat16 values on both frameworks."""
    t = torch.from_numpy(array).to(torch.bfloat16)
    return t, ms.tensor(t.float().numpy()).astype(ms.bfloat16)


def _values(ms, out):
    return out.astype(ms.float32).asnumpy() if out.dtype == ms.bfloat16 else out.asnumpy()


# each stand-in: the MindSpore call (on bfloat16 tensors x, y), torch's, the kernel it lists
STAND_INS = {
    "linear": (lambda ms, mint, cells, x, y: cells["linear"](x), lambda tnn, cells, x, y: cells["linear"](x),
               "Dense (mint.nn.Linear)"),
    "conv2d": (lambda ms, mint, cells, x, y: cells["conv"](x.reshape(2, 3, 4, 4)),
               lambda tnn, cells, x, y: cells["conv"](x.reshape(2, 3, 4, 4)), "Conv2D (mint.nn.Conv2d)"),
    "silu": (lambda ms, mint, cells, x, y: mint.nn.functional.silu(x), lambda tnn, cells, x, y: tnn.functional.silu(x),
             "Sigmoid (silu)"),
    "group_norm": (lambda ms, mint, cells, x, y: mint.nn.GroupNorm(3, 3, dtype=ms.bfloat16)(x.reshape(2, 3, 4, 4)),
                   lambda tnn, cells, x, y: tnn.functional.group_norm(x.reshape(2, 3, 4, 4), 3), "GroupNorm"),
    "bmm": (lambda ms, mint, cells, x, y: mint.bmm(x.reshape(2, 6, 8), y.reshape(2, 8, 6)),
            lambda tnn, cells, x, y: x.reshape(2, 6, 8).bmm(y.reshape(2, 8, 6)), "BatchMatMulExt (bmm)"),
    "baddbmm": (lambda ms, mint, cells, x, y: mint.baddbmm(x.reshape(2, 6, 8)[:, :, :6], x.reshape(2, 6, 8),
                                                            y.reshape(2, 8, 6)),
                lambda tnn, cells, x, y: x.reshape(2, 6, 8)[:, :, :6].baddbmm(x.reshape(2, 6, 8), y.reshape(2, 8, 6)),
                "BatchMatMul (baddbmm)"),
    "softmax": (lambda ms, mint, cells, x, y: mint.nn.functional.softmax(x, -1),
                lambda tnn, cells, x, y: tnn.functional.softmax(x, -1), "Softmax"),
    "div by a 0-d float32": (lambda ms, mint, cells, x, y: x / ms.tensor(np.float32(0.3)),
                             lambda tnn, cells, x, y: x / __import__("torch").tensor(0.3),
                             "RealDiv"),
    "pow": (lambda ms, mint, cells, x, y: y ** 0.5,
            lambda tnn, cells, x, y: y ** 0.5, "Pow"),
    "rsub": (lambda ms, mint, cells, x, y: 1 - y, lambda tnn, cells, x, y: 1 - y, "Sub (scalar)"),
    "clamp": (lambda ms, mint, cells, x, y: x.clamp(-0.5, 0.5), lambda tnn, cells, x, y: x.clamp(-0.5, 0.5),
              "Maximum and Minimum (clamp)"),
    "nn.Dense": (lambda ms, mint, cells, x, y: cells["dense"](x), lambda tnn, cells, x, y: cells["linear"](x),
                 "MatMul (nn.Dense)"),
    "nn.LayerNorm": (lambda ms, mint, cells, x, y: __import__("mindspore").nn.LayerNorm((48,), dtype=ms.bfloat16)(x),
                     lambda tnn, cells, x, y: tnn.functional.layer_norm(x, (48,)), "LayerNorm (nn.LayerNorm)"),
    "full": (lambda ms, mint, cells, x, y: __import__("mindspore").ops.full((2, 3), -3.3895313892515355e38,
                                                                             dtype=ms.bfloat16),
             lambda tnn, cells, x, y: __import__("torch").full((2, 3), -3.3895313892515355e38,
                                                               dtype=__import__("torch").bfloat16), "FillV2 (full)"),
    "stack": (lambda ms, mint, cells, x, y: mint.stack([x, y]), lambda tnn, cells, x, y: __import__("torch").stack([x, y]),
              "Stack"),
    "tile": (lambda ms, mint, cells, x, y: x.tile((2, 1)), lambda tnn, cells, x, y: x.tile((2, 1)), "Tile"),
    # SD3's T5 (gated-gelu) and prompt embeddings
    "mint.pow": (lambda ms, mint, cells, x, y: mint.pow(x, 3.0), lambda tnn, cells, x, y: x.pow(3.0),
                 "Pow (mint.pow)"),
    "pow -2": (lambda ms, mint, cells, x, y: y ** -2, lambda tnn, cells, x, y: y ** -2, "Pow"),
    "tanh": (lambda ms, mint, cells, x, y: mint.tanh(x), lambda tnn, cells, x, y: x.tanh(), "Tanh"),
    "pad": (lambda ms, mint, cells, x, y: mint.nn.functional.pad(x, (0, 3)),
            lambda tnn, cells, x, y: tnn.functional.pad(x, (0, 3)), "PadV3 (pad)"),
}


@pytest.mark.parametrize("name", list(STAND_INS))
def test_a_bfloat16_stand_in_computes_as_torch_does_in_bfloat16(mindone, name):
    import mindspore as ms
    import mindspore.mint as mint
    import torch

    from xrand import mindspore_cpu

    if ms.get_context("device_target") != "CPU":
        pytest.skip("the stand-ins apply when MindSpore targets the CPU")
    rng = np.random.default_rng(0)
    (xt, xm), (yt, ym) = _bf16(ms, torch, rng.standard_normal((2, 48)).astype(np.float32)), \
        _bf16(ms, torch, rng.random((2, 48)).astype(np.float32) + 0.5)
    t_linear, t_conv = torch.nn.Linear(48, 5).to(torch.bfloat16), torch.nn.Conv2d(3, 4, 3, padding=1).to(torch.bfloat16)
    m_linear = mint.nn.Linear(48, 5, dtype=ms.bfloat16)
    m_conv = mint.nn.Conv2d(3, 4, 3, padding=1, dtype=ms.bfloat16)
    for tm, mm in ((t_linear, m_linear), (t_conv, m_conv)):  # the same bfloat16 weights
        mm.weight.set_data(ms.tensor(tm.weight.detach().float().numpy()).astype(ms.bfloat16))
        mm.bias.set_data(ms.tensor(tm.bias.detach().float().numpy()).astype(ms.bfloat16))
    m_dense = ms.nn.Dense(48, 5, dtype=ms.bfloat16)
    m_dense.weight.set_data(ms.tensor(t_linear.weight.detach().float().numpy()).astype(ms.bfloat16))
    m_dense.bias.set_data(ms.tensor(t_linear.bias.detach().float().numpy()).astype(ms.bfloat16))
    ms_call, torch_call, kernel = STAND_INS[name]
    with torch.no_grad():
        expected = torch_call(torch.nn, {"linear": t_linear, "conv": t_conv}, xt, yt)
    with mindspore_cpu.cpu_fallbacks(), mindspore_cpu.half_precision() as ran:
        got = ms_call(ms, mint, {"linear": m_linear, "conv": m_conv, "dense": m_dense},
                      xm, ym)
    assert kernel in ran and got.dtype == ms.bfloat16 and expected.dtype == torch.bfloat16
    # float32 arithmetic rounded once to bfloat16, as torch's CPU kernels: at most one bfloat16
    # step (2**-8 relative) apart where the float32 sums' order differs
    np.testing.assert_allclose(_values(ms, got), expected.float().numpy(), rtol=2 ** -8, atol=1e-6)


def test_component_dtypes_are_checked_when_planned(tiny_sd):
    from xrand.checks import UsageError

    settings = dict(model=tiny_sd, prompt="a red circle", steps=2, dtype="bfloat16")
    with pytest.raises(UsageError, match="unknown dtype 'float64'; accepted: float32, float16, bfloat16"):
        Settings(**settings, component_dtypes={"vae": "float64"})
    with pytest.raises(UsageError, match="has no component 'vea' with weights; accepted: text_encoder, vae"):
        make_plan(Settings(**settings, component_dtypes={"vea": "float32"}), frameworks=("torch",))
    with pytest.raises(UsageError, match=r"unet=float32: the denoiser runs in --dtype \(bfloat16\)"):
        make_plan(Settings(**settings, component_dtypes={"unet": "float32"}), frameworks=("torch",))
    with pytest.raises(UsageError, match="tokenizer"):  # no weights
        make_plan(Settings(**settings, component_dtypes={"tokenizer": "float32"}), frameworks=("torch",))
    mixed = make_plan(Settings(**dict(settings, dtype="float16"), component_dtypes={"vae": "float32"}))
    assert mixed.mindspore_mode == "pynative" and "--component-dtype casts" in mixed.mindspore_mode_reason


@pytest.mark.parametrize("components", [{"vae": "float32"}, {"vae": "float32", "text_encoder": "float32"}])
def test_mixed_precision_on_tiny_stable_diffusion_denoiser_bfloat16_vae_float32(mindone, tiny_sd, components):
    import torch

    from xrand.compare import compare_loaded, load_pair

    plan = make_plan(Settings(model=tiny_sd, prompt="a red circle", steps=2, batch_size=1, dtype="bfloat16",
                              component_dtypes=components), noise_floor=True)
    pair = load_pair(plan)
    c = compare_loaded(pair, plan)
    ran = {"text_encoder": "bfloat16", "unet": "bfloat16", **components}
    assert c.ran["a"]["component_dtypes"] == c.ran["b"]["component_dtypes"] == ran
    assert c.settings.component_dtypes == components
    floor = c.noise_floor["rel_l2"]
    assert c.passed and 1e-4 < floor < 5e-2 and c.final["rel_l2"] < 5 * floor, c.verdict()
    # the VAE's float32 weights come from the file, not rounded through bfloat16
    weight = pair.torch.pipe.vae.decoder.conv_in.weight
    assert weight.dtype == torch.float32 and bool((weight != weight.bfloat16().float()).any())
    np.testing.assert_array_equal(pair.mindspore.pipe.vae.decoder.conv_in.weight.asnumpy(), weight.detach().numpy())
