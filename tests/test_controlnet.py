"""The three ControlNet pipelines (Stable Diffusion, SDXL, Flux) compared end to end through xrand
on their tiny folders, with a control image given as a file (``--control-image``): free and in
lockstep, the ControlNet's residuals recorded at the denoiser's call on torch's side and fed to
MindSpore's; ``--layers`` in the UNet, and ``--layers-component controlnet`` in the ControlNet's
own call, where it names a fault put in MindSpore's ControlNet; bad input refused in one line."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
ms = pytest.importorskip("mindspore")
pytest.importorskip("mindone.diffusers")

from xrand.cli import main  # noqa: E402
from xrand.compare import LayerOptions, compare_loaded, load_pair, make_plan  # noqa: E402
from xrand.compare.sides import Everything, run  # noqa: E402
from xrand.models import TINY_MODELS, build_tiny  # noqa: E402
from xrand.pipelines.settings import Settings  # noqa: E402

pytestmark = pytest.mark.skipif(ms.get_context("device_target") != "CPU", reason="runs mindone on the CPU")

PROMPT = "a red circle on a blue square"
#: family -> (tiny folder, the residual inputs of its denoiser's call)
FAMILIES = {
    "sd": ("sd-controlnet", ("down_block_additional_residuals", "mid_block_additional_residual")),
    "sdxl": ("sdxl-controlnet", ("down_block_additional_residuals", "mid_block_additional_residual")),
    "flux": ("flux-controlnet", ("controlnet_block_samples", "controlnet_single_block_samples")),
}
#: variant -> (family whose tiny folder it runs, pipeline, its input files beyond the control image);
#: their recipes derived (recipes/families.py); image to image and inpainting at strength 0.5 of 4 steps
VARIANTS = {
    "sd-img2img": ("sd", "StableDiffusionControlNetImg2ImgPipeline", ("image",)),
    "sd-inpaint": ("sd", "StableDiffusionControlNetInpaintPipeline", ("image", "mask")),
    "sdxl-img2img": ("sdxl", "StableDiffusionXLControlNetImg2ImgPipeline", ("image",)),
    "sdxl-inpaint": ("sdxl", "StableDiffusionXLControlNetInpaintPipeline", ("image", "mask")),
    "flux-img2img": ("flux", "FluxControlNetImg2ImgPipeline", ("image",)),
    "flux-inpaint": ("flux", "FluxControlNetInpaintPipeline", ("image", "mask")),
    # perturbed-attention guidance at its default pag_scale 3
    "sd-pag": ("sd", "StableDiffusionControlNetPAGPipeline", ()),
    "sd-pag-inpaint": ("sd", "StableDiffusionControlNetPAGInpaintPipeline", ("image", "mask")),
    "sdxl-pag": ("sdxl", "StableDiffusionXLControlNetPAGPipeline", ()),
    "sdxl-pag-img2img": ("sdxl", "StableDiffusionXLControlNetPAGImg2ImgPipeline", ("image",)),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("controlnet")
    return {family: str(build_tiny(name, root / name)) for family, (name, _) in FAMILIES.items()}


@pytest.fixture(scope="module")
def control(tmp_path_factory):
    """Two 32x32 control images as PNG files: a white square, and a white left half."""
    from PIL import Image

    root = tmp_path_factory.mktemp("control")
    square, half = np.zeros((32, 32, 3), np.uint8), np.zeros((32, 32, 3), np.uint8)
    square[8:24, 8:24] = 255
    half[:, :16] = 255
    Image.fromarray(square).save(root / "square.png")
    Image.fromarray(half).save(root / "half.png")
    # an input image and a mask (white: repaint) for the image-to-image and inpainting variants
    Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)).save(root / "image.png")
    Image.fromarray(255 - square[..., 0]).save(root / "mask.png")
    return {"square": str(root / "square.png"), "half": str(root / "half.png"), "image": str(root / "image.png"),
            "mask": str(root / "mask.png")}


def settings(folders, control, family, **override):
    """The family's (or variant's) tiny run: 2 denoising steps, batch 1, the square as control image."""
    pipeline, files = None, ()
    if family in VARIANTS:
        family, pipeline, files = VARIANTS[family]
        strength = {"steps": 4, "strength": 0.5} if files else {}
        override = {**strength, "pipeline": pipeline, **{n: control[n] for n in files}, **override}
    call = dict(TINY_MODELS[FAMILIES[family][0]].call)
    size = {k: call.pop(k) for k in ("height", "width")}
    values = {"steps": 2, **size, "call_options": call, "control_image": control["square"], **override}
    return Settings(model=folders[family], prompt=PROMPT, batch_size=1, seed=1, **values)


def torch_plan(folders, control, family, **override):
    return make_plan(settings(folders, control, family, **override), frameworks=("torch",))


@pytest.fixture(scope="module")
def pairs(folders, control):
    loaded = {}

    def pair(family):
        if family not in loaded:
            loaded[family] = load_pair(settings(folders, control, family))
        return loaded[family]

    return pair


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_controlnet_pipeline_agrees_end_to_end_and_in_lockstep(pairs, folders, control, family):
    plan = make_plan(settings(folders, control, family), lockstep=True, mindspore_mode="pynative")
    assert plan.pipeline == TINY_MODELS[FAMILIES[family][0]].pipelines[0]  # the folder's model_index.json
    c = compare_loaded(pairs(family), plan)
    assert c.ran["a"]["pipeline"] == c.ran["b"]["pipeline"] == plan.pipeline  # the library's own pipeline
    assert c.ran["a"]["input_files"] == c.ran["b"]["input_files"] == plan.input_files
    assert set(plan.input_files) == {"control_image"}  # the file's digest: the same picture on both sides
    # one xrand draw on both sides (SDXL's Euler scales it by init_noise_sigma, in each library)
    assert c.images["a"].shape == (1, 32, 32, 3) and c.initial_noise["rel_l2"] < 1e-6
    assert c.passed and c.final["rel_l2"] < 1e-4, c.verdict()
    causes = [line for line in c.summary_lines() if line.startswith("known cause: ")]
    assert len(causes) == (family == "flux") and all("get_timestep_embedding" in line for line in causes), causes
    assert len(c.local_steps) == len(c.timesteps) >= 2
    assert all(r["sample"]["rel_l2"] < 1e-4 for r in c.local_steps), c.local_steps
    # the control image steers the output: another one is far (the ControlNet is not idle)
    other = run(pairs(family).torch, torch_plan(folders, control, family, control_image=control["half"]))
    assert np.linalg.norm(other.images - c.images["a"]) / np.linalg.norm(c.images["a"]) > 1e-2


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_each_controlnet_variant_agrees_end_to_end_and_in_lockstep(pairs, folders, control, variant):
    """Image to image and inpainting guided by the ControlNet, on the same tiny folders: the
    input image's VAE sample and add_noise's noise are xrand draws on both sides too."""
    plan = make_plan(settings(folders, control, variant), lockstep=True, mindspore_mode="pynative")
    assert plan.pipeline == VARIANTS[variant][1]
    c = compare_loaded(pairs(variant), plan)
    assert c.ran["a"]["pipeline"] == c.ran["b"]["pipeline"] == plan.pipeline  # the library's own pipeline
    assert set(plan.input_files) == {"control_image", *VARIANTS[variant][2]}
    assert c.images["a"].shape == (1, 32, 32, 3) and c.initial_noise["rel_l2"] < 1e-5
    assert c.passed and c.final["rel_l2"] < 1e-4, c.verdict()
    assert len(c.local_steps) == len(c.timesteps) >= 2
    assert all(r["sample"]["rel_l2"] < 1e-4 for r in c.local_steps), c.local_steps
    other = run(pairs(variant).torch, torch_plan(folders, control, variant, control_image=control["half"]))
    assert np.linalg.norm(other.images - c.images["a"]) / np.linalg.norm(c.images["a"]) > 1e-3


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_controlnets_residuals_are_recorded_at_the_denoisers_call_and_fed(pairs, folders, control, family):
    """Lockstep hands MindSpore's denoiser torch's residuals: with MindSpore's ControlNet off by
    10% the free run parts from torch, the fed one does not."""
    plan = make_plan(settings(folders, control, family), lockstep=True, mindspore_mode="pynative")
    pair = pairs(family)
    recording = run(pair.torch, plan, record_calls=Everything(), record_steps=True).recording
    given = recording.call(1)
    residuals = FAMILIES[family][1]
    assert all(given[name] is not None for name in residuals)
    down = given[residuals[0]]  # one tensor per block the ControlNet feeds
    blocks = pair.torch.pipe.controlnet
    expected = len(blocks.controlnet_down_blocks if family != "flux" else blocks.controlnet_blocks)
    assert isinstance(down, (list, tuple)) and len(down) == expected and expected >= 1

    cell = pair.mindspore.pipe.controlnet
    handle = cell.register_forward_hook(lambda cell, args, output: tuple(
        [x * 1.1 for x in part] if isinstance(part, (list, tuple)) else part * 1.1 for part in output))
    try:
        free = run(pair.mindspore, plan)
        fed = run(pair.mindspore, plan, feed=recording)
    finally:
        handle.remove()
    reference = run(pair.torch, plan).images
    assert np.linalg.norm(free.images - reference) / np.linalg.norm(reference) > 1e-3
    assert all(r["model_output"]["rel_l2"] < 1e-4 for r in fed.local_steps), fed.local_steps


def test_layers_look_into_the_unet_fed_the_controlnets_residuals(pairs, folders, control):
    plan = make_plan(settings(folders, control, "sd"), layers=LayerOptions(step=1), mindspore_mode="pynative")
    c = compare_loaded(pairs("sd"), plan)
    layers = c.layers
    assert c.passed and layers.step == 1 and layers.culprit is None, layers.summary()
    assert len(layers.modules) > 10 and not layers.unmatched["torch"] and not layers.unmatched["mindspore"]
    assert any(m.label.startswith("down_blocks.") for m in layers.modules)


def test_layers_component_controlnet_names_a_fault_inside_mindspores_controlnet(pairs, folders, control):
    """The ControlNet's call at ``--layers-step`` on torch's inputs: clean, every module within;
    with one MindSpore block off by 1e-3, that block."""
    options = dict(step=1, threshold=5e-4, component="controlnet")
    plan = make_plan(settings(folders, control, "sd"), layers=LayerOptions(**options), mindspore_mode="pynative")
    pair = pairs("sd")
    clean = compare_loaded(pair, plan).layers
    assert clean.culprit is None and clean.step == 1, clean.summary()
    assert len(clean.modules) > 10 and not clean.unmatched["torch"] and not clean.unmatched["mindspore"]
    assert all(m.label.startswith("controlnet") for m in clean.modules if m.label)  # "": the call itself
    assert clean.summary().startswith("layers in controlnet's call at step 1")

    fault = "controlnet_down_blocks.1"
    cell = dict(pair.mindspore.pipe.controlnet.cells_and_names())[fault]
    handle = cell.register_forward_hook(lambda cell, args, output: output * (1 + 1e-3))
    try:
        report = compare_loaded(pair, plan).layers
    finally:
        handle.remove()
    assert report.culprit == "controlnet." + fault, report.summary()


def test_the_conditioning_scale_is_a_call_option(pairs, folders, control):
    """``controlnet_conditioning_scale=0`` (``--call-option``) reaches the pipeline's call: the
    control image then changes nothing."""
    off = {"controlnet_conditioning_scale": 0.0}
    square = run(pairs("sd").torch, torch_plan(folders, control, "sd", call_options=off)).images
    half = run(pairs("sd").torch, torch_plan(folders, control, "sd", call_options=off,
                                             control_image=control["half"])).images
    np.testing.assert_array_equal(square, half)


def test_the_command_takes_the_control_image_and_writes_it_in_the_command_that_reproduces(folders, control, tmp_path,
                                                                                         monkeypatch):
    import json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "control.png").write_bytes(open(control["square"], "rb").read())
    code = main(["compare", "--model", folders["sd"], "--prompt", PROMPT, "--control-image", "control.png", "--steps",
                 "2", "--batch-size", "1", "--height", "32", "--width", "32", "--call-option",
                 "control_guidance_end=0.5", "--lockstep", "--mindspore-mode", "pynative", "--no-noise-floor",
                 "--quiet", "--out", "out"])
    report = json.load(open(tmp_path / "out" / "report.json"))
    assert code == 0 and report["verdict"] == "pass", report["summary"]
    assert f"--control-image {tmp_path / 'control.png'} " in report["reproduce"]
    assert "--call-option control_guidance_end=0.5" in report["reproduce"]


@pytest.mark.parametrize("args, message", [
    (["--model", "{sd}"], "StableDiffusionControlNetPipeline needs a control_image: give it --control-image"),
    (["--model", "{plain}", "--control-image", "{square}"],
     "StableDiffusionPipeline takes no control_image (--control-image"),
    (["--model", "{sd}", "--control-image", "no-such.png"], "--control-image 'no-such.png' cannot be read"),
    (["--model", "{sd}", "--control-image", "{square}", "--call-option", "image=x"],
     "call option 'image' is StableDiffusionControlNetPipeline's input control_image: give it --control-image"),
    (["--model", "{plain}", "--layers", "--layers-component", "controlnet"],
     "--layers-component 'controlnet': StableDiffusionPipeline in "),
])
def test_bad_control_input_is_one_line(folders, control, tiny_folder, capsys, tmp_path, args, message):
    args = [a.format(**folders, **control, plain=tiny_folder("sd")) for a in args]
    code = main(["compare", "--prompt", PROMPT, "--steps", "2", "--out", str(tmp_path / "out"), *args])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "out").exists()
