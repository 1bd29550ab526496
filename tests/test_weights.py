"""The weights each library loaded, checked before any step: by name (mindone's names mapped to
torch's), shape, dtype and the largest |difference|, on both sides against the files both read;
a tensor MindSpore holds otherwise is a FAIL that names it."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
ms = pytest.importorskip("mindspore")
pytest.importorskip("mindone.diffusers")

from xrand.cli import main  # noqa: E402
from xrand.compare import make_plan  # noqa: E402
from xrand.compare.run import compare_loaded, load_pair  # noqa: E402
from xrand.compare.weights import compare_weights, rounded  # noqa: E402
from xrand.pipelines.settings import Settings  # noqa: E402

pytestmark = pytest.mark.skipif(ms.get_context("device_target") != "CPU", reason="runs mindone on the CPU")

TINY = dict(prompt="a red circle", steps=2, batch_size=1, seed=3, height=32, width=32)
ALTERED = ("unet", "conv_in.weight")


@pytest.fixture(scope="module")
def plan(tiny_sd):
    return make_plan(Settings(model=tiny_sd, **TINY), mindspore_mode="pynative")


@pytest.fixture(scope="module")
def checked(plan):
    """Both pipelines loaded once and compared as loaded."""
    pair = load_pair(plan)
    return pair, compare_loaded(pair, plan)


def test_every_tensor_of_every_component_is_matched_by_name_and_equal(checked):
    """mindone's CLIP text encoder holds embedding_table, gamma and beta; matched to torch's weight
    and bias, no name is on one side only and every tensor is the file's on both sides."""
    c = checked[1]
    assert c.weights["passed"], c.weights["problems"]
    rows = {(r["component"], r["name"]): r for r in c.weights["rows"]}
    assert {component for component, _ in rows} == {"unet", "vae", "text_encoder"}
    for name in ("text_model.embeddings.token_embedding.weight", "text_model.final_layer_norm.bias"):
        assert rows["text_encoder", name]["max_abs"] == 0.0
    assert all(r["max_abs"] == 0.0 for r in rows.values())
    assert rows[ALTERED]["shape"] == list(checked[0].torch.pipe.unet.conv_in.weight.shape)


def test_a_tensor_mindspore_holds_otherwise_is_a_fail_that_names_it(plan, checked):
    """One element of MindSpore's loaded conv_in changed after loading (as a faulty load would):
    the check names the tensor and measures the change, and the verdict FAILs."""
    pair = checked[0]
    mindspore_side = pair.mindspore
    parameter = mindspore_side.pipe.unet.conv_in.weight
    values = parameter.asnumpy().copy()
    values.flat[0] += 0.25
    parameter.set_data(ms.Tensor(values))
    mindspore_side.weights = None  # checked again: the pipeline's weights changed
    try:
        c = compare_loaded(pair, plan)
    finally:
        values.flat[0] -= 0.25
        parameter.set_data(ms.Tensor(values))
        mindspore_side.weights = None
    assert not c.passed
    assert [p.split(":")[0] for p in c.weights["problems"]] == ["unet/conv_in.weight"]
    row = next(r for r in c.weights["rows"] if (r["component"], r["name"]) == ALTERED)
    assert row["max_abs"] == pytest.approx(0.25, rel=1e-6)
    assert "unet/conv_in.weight: differs by 0.25" in c.verdict()


def test_a_name_on_one_side_only_and_another_shape_are_named():
    side = {"shape": [2], "dtype": "float32", "sha256": None, "file_max_abs": 0.0, "scale": None}
    a = {"framework": "torch", "tensors": {"unet": {"x": side, "y": side}}}
    b = {"framework": "mindspore", "tensors": {"unet": {"x": {**side, "shape": [3]}, "z": side}}}
    assert compare_weights(a, b)["problems"] == ["unet/x: shape [2] vs [3]", "unet/y only on torch",
                                                 "unet/z only on mindspore"]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_files_values_are_rounded_as_torch_rounds_them(dtype):
    values = (np.random.default_rng(0).standard_normal(10_000)
              * 10.0 ** np.random.default_rng(1).integers(-6, 4, 10_000)).astype(np.float32)
    want = torch.from_numpy(values).to(getattr(torch, dtype)).float().numpy()
    np.testing.assert_array_equal(rounded(values, dtype), want)


def test_the_check_is_in_report_json_and_can_be_skipped(tiny_sd, tmp_path):
    args = ["compare", "--model", tiny_sd, "--prompt", "a red circle", "--steps", "2", "--height", "32", "--width",
            "32", "--mindspore-mode", "pynative", "--no-noise-floor", "--quiet"]
    assert main(args + ["--out", str(tmp_path / "checked")]) == 0
    report = json.load(open(tmp_path / "checked" / "report.json"))
    assert report["weights"]["passed"] and report["weights"]["tensors"] > 300
    assert "loaded weights" in open(tmp_path / "checked" / "report.html").read()
    assert main(args + ["--out", str(tmp_path / "skipped"), "--no-weights-check"]) == 0
    assert "weights" not in json.load(open(tmp_path / "skipped" / "report.json"))


# -- LoRA adapters (--lora FILE[:SCALE], --fuse-lora): each library's load_lora_weights ------------------------
@pytest.fixture(scope="module")
def lora(tiny_sd, tmp_path_factory):
    """A random LoRA of the tiny SD UNet's attention projections (xrand.models.checkpoints.save_lora)."""
    pytest.importorskip("peft")  # diffusers loads LoRAs through peft (the diffusers extra)
    from xrand.models.checkpoints import save_lora

    return str(save_lora(tiny_sd, tmp_path_factory.mktemp("lora") / "style.safetensors"))


def test_a_lora_loads_on_both_sides_changes_the_images_and_its_layers_are_matched(plan, checked, lora):
    from xrand.compare import compare_frameworks

    c = compare_frameworks(Settings(model=plan.folder.path, **TINY, loras=((lora, 0.8),)), mindspore_mode="pynative")
    assert c.passed, c.verdict()
    names = {r["name"] for r in c.weights["rows"] if r["component"] == "unet"}
    assert "mid_block.attentions.0.transformer_blocks.0.attn1.to_q.lora_A.style.weight" in names
    assert c.weights["passed"] and c.weights["tensors"] > checked[1].weights["tensors"]
    assert np.abs(c.images["a"] - checked[1].images["a"]).max() > 1e-3  # the adapter did something


def test_a_fused_lora_is_measured_against_torchs_fused_weights_across_the_folder(tiny_sd, lora, tmp_path):
    """Fused weights are not the files': torch keeps them (torch-weights.safetensors) and
    MindSpore's fused weights are measured against them."""
    out = tmp_path / "fused"
    assert main(["compare", "--model", tiny_sd, "--prompt", "a red circle", "--steps", "2", "--height", "32",
                 "--width", "32", "--batch-size", "1", "--mindspore-mode", "pynative", "--no-noise-floor", "--quiet",
                 "--lora", f"{lora}:0.8", "--fuse-lora", "--out", str(out)]) == 0
    report = json.load(open(out / "report.json"))
    weights = report["weights"]
    assert weights["passed"] and weights["kept"] == 32  # to_q, to_k, to_v, to_out.0 of 8 attentions
    assert report["stages"]["bytes"]["torch weights"] > 0
    fused = [r for r in weights["rows"] if r["name"].endswith("attn1.to_q.weight")]
    assert fused and all(r["max_abs"] is not None and not r["bound"] for r in fused)


@pytest.mark.parametrize("args, message", [
    (["--lora", "missing.safetensors"], "--lora 'missing.safetensors': no such file"),
    (["--lora", "{lora}:much"], "SCALE must be a number"),
    (["--fuse-lora"], "fuse_lora merges the LoRAs given"),
    (["--lora", "{model}/model_index.json"], "a LoRA is a .safetensors file"),
])
def test_bad_lora_input_is_one_line_before_any_model_loads(tiny_sd, lora, args, message, capsys):
    args = [a.format(lora=lora, model=tiny_sd) for a in args]
    assert main(["compare", "--model", tiny_sd, "--prompt", "x", "--steps", "2", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_a_pipeline_without_lora_loading_refuses_it(lora, capsys):
    assert main(["compare", "--steps", "2", "--lora", lora]) == 2  # the digits model: DDIMPipeline
    assert "DDIMPipeline loads no LoRA" in capsys.readouterr().err


# -- LoRA on SDXL's UNet and Flux's transformer ------------------------------------------------------------------
#: family -> (a layer the adapter wraps, its number of adapted projections)
DENOISER_LORAS = {"sdxl": ("unet", "down_blocks.1.attentions.0.transformer_blocks.0.attn1.to_q", 32),
                  "flux": ("transformer", "transformer_blocks.0.attn.to_q", 7)}


@pytest.fixture(scope="module")
def family_lora(tiny_folder, tmp_path_factory):
    """``family_lora(name)``: (tiny folder, a random LoRA of its denoiser, the folder's own comparison)."""
    pytest.importorskip("peft")
    from xrand.compare import compare_frameworks
    from xrand.models.checkpoints import save_lora

    made = {}

    def make(name):
        if name not in made:
            folder = tiny_folder(name)
            lora = str(save_lora(folder, tmp_path_factory.mktemp(f"lora-{name}") / f"{name}-style.safetensors"))
            made[name] = folder, lora, compare_frameworks(Settings(model=folder, **TINY), mindspore_mode="pynative")
        return made[name]

    return make


@pytest.mark.parametrize("family", sorted(DENOISER_LORAS))
def test_a_lora_of_the_denoiser_loads_on_both_sides_of_sdxl_and_flux(family_lora, family):
    """save_lora writes unet.* (SDXL) or transformer.* (Flux) tensors; each library's
    load_lora_weights wraps the same layers, the images change, and the sides agree."""
    from safetensors import safe_open

    from xrand.compare import compare_frameworks

    folder, lora, plain = family_lora(family)
    component, layer, _ = DENOISER_LORAS[family]
    with safe_open(lora, "np") as f:
        assert {key.split(".")[0] for key in f.keys()} == {component}
    c = compare_frameworks(Settings(model=folder, **TINY, loras=((lora, 0.8),)), mindspore_mode="pynative")
    assert c.passed, c.verdict()
    names = {r["name"] for r in c.weights["rows"] if r["component"] == component}
    assert f"{layer}.lora_A.{family}-style.weight" in names and f"{layer}.lora_B.{family}-style.weight" in names
    assert c.weights["passed"] and c.weights["tensors"] > plain.weights["tensors"]
    for side in ("a", "b"):
        assert np.abs(c.images[side] - plain.images[side]).max() > 1e-3  # the adapter did something


@pytest.mark.parametrize("family", sorted(DENOISER_LORAS))
def test_a_fused_lora_of_sdxl_and_flux_is_measured_against_torchs_fused_weights(family_lora, family, tmp_path):
    folder, lora, _ = family_lora(family)
    component, layer, adapted = DENOISER_LORAS[family]
    out = tmp_path / "fused"
    assert main(["compare", "--model", folder, "--prompt", "a red circle", "--steps", "2", "--height", "32",
                 "--width", "32", "--batch-size", "1", "--seed", "3", "--mindspore-mode", "pynative",
                 "--no-noise-floor", "--quiet", "--lora", f"{lora}:0.8", "--fuse-lora", "--out", str(out)]) == 0
    weights = json.load(open(out / "report.json"))["weights"]
    assert weights["passed"] and weights["kept"] == adapted
    fused = [r for r in weights["rows"] if r["component"] == component and r["name"] == f"{layer}.weight"]
    assert fused and all(r["max_abs"] is not None and not r["bound"] for r in fused)
    assert not any(".lora_" in r["name"] for r in weights["rows"])


def test_a_lora_of_another_denoiser_is_one_line_before_any_model_loads(family_lora, capsys):
    """A UNet's LoRA given to Flux would load nothing (set_adapters then fails): refused up front."""
    sdxl_lora, flux = family_lora("sdxl")[1], family_lora("flux")[0]
    assert main(["compare", "--model", flux, "--prompt", "x", "--steps", "2", "--lora", sdxl_lora]) == 2
    err = capsys.readouterr().err.strip()
    assert "adapts a unet (unet.* tensors); FluxPipeline's denoiser is its transformer" in err
    assert len(err.splitlines()) == 1, err
