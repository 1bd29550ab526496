"""Say why, not only where: each component of a pipeline (the prompt embeddings, the latents, the
decoded output) compared apart, and the verdict naming the first one over its limit, in one
process and split across two machines (a comparison folder made by ``--only torch`` then
``--only mindspore``)."""
import json
import os

import numpy as np
import pytest

pytest.importorskip("diffusers")
ms = pytest.importorskip("mindspore")
pytest.importorskip("mindone.diffusers")

from conftest import unipc_flow_timesteps_agree  # noqa: E402

from xrand.cli import main  # noqa: E402
from xrand.compare.components import compare_components, components_text  # noqa: E402
from xrand.models import build_tiny  # noqa: E402

pytestmark = pytest.mark.skipif(ms.get_context("device_target") != "CPU", reason="runs mindone on the CPU")


@pytest.fixture(scope="module")
def wan(tmp_path_factory):
    return str(build_tiny("wan", tmp_path_factory.mktemp("why") / "wan"))


def test_the_tiny_wan_video_is_parted_by_mindones_vae_decode_with_the_latents_agreeing_on_two_machines(
        wan, tmp_path, capsys):
    """mindone 0.5.0's Wan VAE attention runs FlashAttentionScore without a scale
    (/work/shared/notes/two-machines.md): the prompt embeddings and the latents agree, the
    decoded video does not; the verdict says so from the folder both machines wrote, and
    ``--layers-component vae`` (the VAE decode of torch's final latents) names the attention block
    of the VAE's decoder."""
    out = str(tmp_path / "wan")
    scheduler = [] if unipc_flow_timesteps_agree() else ["--scheduler", "FlowMatchEulerDiscreteScheduler"]
    args = ["compare", "--model", wan, "--prompt", "a red circle", "--height", "32", "--width", "32", "--frames", "5",
            "--call-option", "max_sequence_length=32", "--steps", "3", "--no-noise-floor", "--out", out,
            "--layers", "--layers-component", "vae",
            *scheduler]
    assert main([*args, "--only", "torch"]) in (0, 1)
    assert main([*args, "--only", "mindspore"]) == 1
    with open(os.path.join(out, "report.json")) as f:
        report = json.load(f)
    names = [c["name"] for c in report["components"]]
    assert names == ["prompt embeddings", "latents", "VAE decode"]
    prompt, latents, decode = report["components"]
    assert prompt["inputs"].keys() == {"encoder_hidden_states"} and not prompt["over"] and prompt["rel_l2"] < 1e-5
    assert not latents["over"] and latents["steps"] == 3 and latents["first_over"] is None
    assert decode["over"] and decode["rel_l2"] == report["final"]["rel_l2"] > 1e-2
    assert report["parted_by"] == "VAE decode"
    assert "; the prompt embeddings agree (" in report["summary"]
    assert f"the latents agree ({latents['rel_l2']:.2g} after 3 steps); the VAE decode parts them (" \
        in report["summary"], report["summary"]
    console = capsys.readouterr().out
    assert "the VAE decode parts them" in console
    culprit = "vae.decoder.mid_block.attentions.0"
    assert report["layers"]["component"] == "vae" and report["layers"]["culprit"] == culprit
    assert report["layers"]["step"] is None and not any(report["layers"]["unmatched"].values())
    assert f"layers in the VAE decode: MindSpore parts from torch at {culprit} (WanAttentionBlock)" in console
    html = open(os.path.join(out, "report.html")).read()
    assert "the VAE decode parts them" in html and '<tr class="flagged"><td>VAE decode</td>' in html
    # the page and layers.csv say which call the modules are of, not a step of the denoiser
    assert "Layers in the VAE decode: " in html and "Module by module, in the VAE decode</h2>" in html
    assert "step None" not in html and "(denoiser)" not in html and "(vae)" in html
    assert open(os.path.join(out, "layers.csv")).read().splitlines()[1].startswith("(vae),(vae),")


def test_the_first_component_over_its_limit_is_named_and_the_ones_after_it_are_not():
    rng = np.random.default_rng(0)
    states = rng.standard_normal((4, 1, 2, 3, 3))
    parted = states.copy()
    parted[2:] *= 1.1  # the latents part at the third step
    prompt = {"encoder_hidden_states": rng.standard_normal((1, 4, 8))}
    final = {"rel_l2": 0.2, "max_abs": 0.5}
    components = compare_components(prompt, prompt, states, parted, final, 5e-3)
    assert [c["over"] for c in components] == [False, True, True]
    assert components[1]["first_over"] == 2
    text = components_text(components)
    assert text == "the prompt embeddings agree (0); the latents part them (0.1 after 4 steps, over from step 3)"
    assert "VAE decode" not in text
    agreeing = compare_components({}, {}, states, states, {"rel_l2": 1e-3, "max_abs": 1e-3}, 5e-3, "output")
    assert [c["name"] for c in agreeing] == ["latents", "output"]
    assert components_text(agreeing) == "the latents agree (0 after 4 steps), the output agrees (0.001)"


def test_an_inf_made_by_one_mindspore_cell_at_one_step_is_found_there_and_said_first(tmp_path):
    """A forward hook makes ``down_blocks.1.attentions.0``'s output Inf at the third step's
    timestep only: MindSpore's side sees it first in its denoiser output at call 2 (NaN there: the
    Inf goes on through a group norm), --layers at
    that call names the cell and that its inputs were finite, and the verdict says so before any
    number; the numbers stay defined over the finite values, with the count of the others."""
    from xrand.cli import default_model
    from xrand.compare import LayerOptions, compare_loaded, load_pair, make_plan
    from xrand.pipelines.settings import Settings
    from xrand.report.compare import write_report

    settings = Settings(model=default_model(), batch_size=1, steps=4)
    pair = load_pair(settings)
    plan = make_plan(settings, layers=LayerOptions(step=2), mindspore_mode="pynative", noise_floor=False)
    timesteps = pair.torch.pipe.scheduler.__class__.from_config(pair.torch.pipe.scheduler.config)
    timesteps.set_timesteps(4)
    chosen = int(timesteps.timesteps[2])
    unet = pair.mindspore.pipe.unet
    now = {}

    def remember(cell, args, kwargs):
        now["t"] = int(np.asarray((kwargs.get("timestep") if "timestep" in kwargs else args[1]).asnumpy()).ravel()[0])

    def inf(cell, args, output):
        return output + float("inf") if now.get("t") == chosen else output

    handles = [unet.register_forward_pre_hook(remember, with_kwargs=True),
               dict(unet.cells_and_names())["down_blocks.1.attentions.0"].register_forward_hook(inf)]
    try:
        c = compare_loaded(pair, plan)
    finally:
        for h in handles:
            h.remove()
    seen = c.nonfinite_seen()
    assert "torch" not in seen
    assert seen["mindspore"] == {"component": "denoiser output", "step": 2, "call": 2, "kind": "NaN",
                                 "count": seen["mindspore"]["count"], "module": "down_blocks.1.attentions.0",
                                 "type": "Attention", "inputs_finite": True}
    assert not c.passed
    assert c.verdict().startswith("FAIL: MindSpore's output is NaN from step 3: its denoiser output at call 2 ("), \
        c.verdict()
    assert "made by down_blocks.1.attentions.0 (Attention) from finite inputs; torch vs mindspore" in c.verdict()
    assert np.isfinite(c.global_steps[-1]["rel_l2"]) and c.global_steps[-1]["nonfinite_b"] > 0
    assert c.global_steps[1].get("nonfinite_b") is None  # the step before: finite
    report = json.load(open(write_report(c, str(tmp_path))["report.json"]))
    assert report["nonfinite"]["torch"] is None and report["nonfinite"]["mindspore"]["module"] == \
        "down_blocks.1.attentions.0"
    assert "the first NaN or Inf" in open(os.path.join(str(tmp_path), "report.html")).read()
    assert "; the latents part them (256 values NaN or Inf after 4 steps, over from step 3)" in c.verdict()


@pytest.mark.parametrize("args, said", [
    (["--layers", "--layers-component", "unet"], "--layers-component 'unet' is not one xrand looks into; accepted: "
                                                 "denoiser, vae, text_encoder, text_encoder_2, text_encoder_3"),
    (["--layers", "--layers-component", "text_encoder_2"], "--layers-component 'text_encoder_2': WanPipeline in "),
    (["--layers-component", "vae"], "--layers-component needs --layers"),
])
def test_a_component_layers_cannot_look_into_is_one_line_and_exit_2(wan, args, said, tmp_path, capsys):
    code = main(["compare", "--model", wan, "--prompt", "a red circle", "--frames", "5", "--out", str(tmp_path / "o"),
                 *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and said in err[0], err
