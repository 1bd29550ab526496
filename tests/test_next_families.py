"""The next families, their recipes read from the pipeline classes (recipes/families.py), compared
end to end through xrand on their tiny folders: Sana (Gemma-2, DC-AE), Lumina 2 (Gemma-2),
CogView4 (GLM-4), Chroma, Wan 2.1 image and video to video and CogVideoX (text, image and video
to video, its two samplers: the third scheduler kind), AnimateDiff, Qwen-Image (a Qwen2.5-VL
text encoder) and HunyuanVideo (Llama and CLIP, a 3-D VAE), and variants (Sana PAG, CogView4
Control). Each runs free and in lockstep from one xrand seed with the same draws on both sides;
``--layers`` names a fault inside each new denoiser; Chroma's and HunyuanVideo's genuine library
differences are asserted, and CogView4 Control's draw from the global random state, in both
libraries."""
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
ms = pytest.importorskip("mindspore")
pytest.importorskip("mindone.diffusers")

from xrand.compare import LayerOptions, compare_loaded, load_pair, make_plan  # noqa: E402
from xrand.compare.sides import run  # noqa: E402
from xrand.models import TINY_MODELS  # noqa: E402
from xrand.pipelines.settings import Settings  # noqa: E402
from conftest import unipc_flow_timesteps_agree  # noqa: E402

pytestmark = pytest.mark.skipif(ms.get_context("device_target") != "CPU", reason="runs mindone on the CPU")

PROMPT = "a red circle on a blue square"

# family -> (tiny folder, pipeline (None: the folder's), settings beyond the prompt)
FAMILIES = {
    "sana": ("sana", None, {}),
    "sana-pag": ("sana", "SanaPAGPipeline", {}),  # perturbed-attention guidance at its default pag_scale 3
    "lumina2": ("lumina2", None, {}),
    "cogview4": ("cogview4", None, {}),
    "cogview4-control": ("cogview4-control", None, dict(control_image=True)),
    "chroma": ("chroma", None, {}),
    "chroma-img2img": ("chroma", "ChromaImg2ImgPipeline", dict(steps=4, strength=0.5, image=True)),
    "wan-i2v": ("wan-i2v", None, dict(image=True)),
    "wan-v2v": ("wan", "WanVideoToVideoPipeline", dict(steps=4, strength=0.5, video=True)),
    "cogvideox": ("cogvideox", None, {}),
    "cogvideox-dpm": ("cogvideox", None, dict(scheduler="CogVideoXDPMScheduler")),
    "cogvideox-i2v": ("cogvideox-i2v", None, dict(image=True)),
    "cogvideox-v2v": ("cogvideox", "CogVideoXVideoToVideoPipeline", dict(steps=4, strength=0.5, video=True)),
    "animatediff": ("animatediff", None, {}),
    "qwenimage": ("qwenimage", None, {}),
    "hunyuan-video": ("hunyuan-video", None, {}),
}


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    from PIL import Image

    path = tmp_path_factory.mktemp("inputs") / "image.png"
    Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)).save(path)
    # beside it, a video of 5 frames (an animated PNG): the video-to-video pipelines' --video
    frames = [Image.fromarray((f * 255).astype(np.uint8)) for f in np.random.default_rng(1).random((5, 32, 32, 3))]
    frames[0].save(path.with_name("video.png"), save_all=True, append_images=frames[1:])
    return str(path)


def settings(tiny_folder, image, family, **override):
    """The family's tiny run: 2 denoising steps, batch 1, its tiny call options."""
    name, pipeline, values = FAMILIES[family]
    tiny = TINY_MODELS[name].settings()
    if values.get("video"):  # a video's frames are an input (--frames), or those of the input video
        tiny.pop("frames", None)
    if name.startswith("wan") and not unipc_flow_timesteps_agree():  # as tests/test_families.py does for Wan
        values = {"scheduler": "FlowMatchEulerDiscreteScheduler", **values}
    values = {"steps": 2, **tiny, **values, **override}
    for key in ("image", "control_image"):  # the input image's file
        if values.pop(key, None):
            values[key] = image
    if values.pop("video", None):
        values["video"] = str(Path(image).with_name("video.png"))
    return Settings(model=tiny_folder(name), pipeline=pipeline, prompt=PROMPT, batch_size=1, seed=1, **values)


@pytest.fixture(scope="module")
def pairs(tiny_folder, image):
    loaded = {}

    def pair(family):
        if family not in loaded:
            loaded[family] = load_pair(settings(tiny_folder, image, family))
        return loaded[family]

    return pair


def skip_on_newer_diffusers(why):
    """Skip where diffusers is newer than the 0.35 mindone 0.5.0 follows, saying what differs."""
    import diffusers
    from packaging.version import Version

    if Version(diffusers.__version__) >= Version("0.36"):
        pytest.skip(f"diffusers {diffusers.__version__} (CI's latest set): {why}")


def return_the_math_attention(monkeypatch):
    """mindone 0.5.0's scaled_dot_product_attention with the ``return`` its math branch lacks
    (mindone/diffusers/models/layers_compat.py, line 689), for the rest of the test."""
    from mindone.diffusers.models import attention_dispatch, layers_compat

    original = layers_compat.scaled_dot_product_attention

    def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
             backend="flash"):
        if attn_mask is not None and attn_mask.dtype != ms.bool_ and 1.0 in attn_mask:
            return layers_compat.math_attention_op(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                                   enable_gqa)
        return original(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, backend)

    monkeypatch.setattr(attention_dispatch, "scaled_dot_product_attention", sdpa)


def collect_llamas_hidden_states(monkeypatch):
    """mindone 0.5.0's LlamaModel.construct with the hidden states ``output_hidden_states`` asks
    for, as transformers' (each layer's input, the embeddings first; the normed output last), for
    the rest of the test and for an encoder's call (token ids, no cache), as the pipeline makes
    it: mindone's ignores the flag and returns the last hidden state and, with ``use_cache``, the
    cache (mindone/transformers/models/llama/modeling_llama.py, line 603)."""
    from mindone.transformers.models.llama import modeling_llama

    def construct(self, input_ids=None, attention_mask=None, position_ids=None, past_key_values=None,
                  inputs_embeds=None, use_cache=None, output_attentions=None, output_hidden_states=None,
                  return_dict=False, cache_position=None, **kwargs):
        hidden_states = self.embed_tokens(input_ids)
        cache_position = ms.mint.arange(0, hidden_states.shape[1], dtype=ms.int32)
        position_ids = cache_position.unsqueeze(0)
        mask = self._update_causal_mask(attention_mask, hidden_states, cache_position, None, output_attentions)
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        states = ()
        for layer in self.layers:
            states += (hidden_states,)
            hidden_states = layer(hidden_states, attention_mask=mask, position_ids=position_ids, past_key_values=None,
                                  output_attentions=output_attentions, use_cache=False, cache_position=cache_position,
                                  position_embeddings=position_embeddings)
        hidden_states = self.norm(hidden_states)
        return hidden_states, states + (hidden_states,)

    monkeypatch.setattr(modeling_llama.LlamaModel, "construct", construct)


#: family -> what makes mindone 0.5.0 run it as diffusers does (each difference asserted below)
FIXES = {"hunyuan-video": collect_llamas_hidden_states}


def _agrees(pairs, tiny_folder, image, family):
    plan = make_plan(settings(tiny_folder, image, family), lockstep=True, mindspore_mode="pynative")
    c = compare_loaded(pairs(family), plan)
    assert c.ran["a"]["pipeline"] == c.ran["b"]["pipeline"] == plan.pipeline  # the library's own pipeline
    video = c.images["a"].ndim == 5  # (batch, frames, ...): CogVideoX's VAE gives 8 of 5 asked
    assert c.images["a"].shape[:1] + c.images["a"].shape[1 + video:] == (1, 32, 32, 3)
    assert len(c.local_steps) == len(c.timesteps) >= 2
    # no step draws noise but CogVideoX's DPM-Solver, whose draws come from the one shared stream
    draws = 0 if plan.scheduler.cls != "CogVideoXDPMScheduler" else c.ran["a"]["noise_draws"]
    assert c.ran["a"]["noise_draws"] == c.ran["b"]["noise_draws"] == draws
    # one xrand draw on both sides (image to image: noised onto the image's VAE sample by each library)
    noised = plan.settings.image or plan.settings.video
    assert c.initial_noise["max_abs"] == 0.0 if not noised else c.initial_noise["rel_l2"] < 1e-5
    return plan, c


@pytest.mark.parametrize("family", [f for f in FAMILIES if not f.startswith(("chroma", "wan", "animatediff"))
                                    and f != "cogview4-control"])
def test_each_next_family_agrees_end_to_end_and_in_lockstep(pairs, tiny_folder, image, family, monkeypatch):
    if family in FIXES:
        FIXES[family](monkeypatch)
    plan, c = _agrees(pairs, tiny_folder, image, family)
    assert c.passed and c.final["rel_l2"] < 1e-4, c.verdict()
    assert all(r["sample"]["rel_l2"] < 1e-4 for r in c.local_steps), c.local_steps
    other = run(pairs(family).torch, plan.cell(seed=2))  # the check can fail: another seed is far
    assert np.linalg.norm(other.images - c.images["a"]) / np.linalg.norm(c.images["a"]) > 5e-3


def test_cogview4_control_draws_its_control_latents_from_the_global_rng_in_both_libraries(pairs, tiny_folder, image):
    """CogView4ControlPipeline samples the control image's VAE latents without the generator, in
    both libraries (diffusers' pipeline_cogview4_control.py: ``latent_dist.sample()``; mindone's:
    ``diag_gauss_dist.sample(...)``): from torch's and from NumPy's global random state, so the free
    runs part while every step fed the same inputs agrees, and torch's own run does not repeat
    from one seed."""
    plan, c = _agrees(pairs, tiny_folder, image, "cogview4-control")
    assert not c.passed and c.final["rel_l2"] > 1e-3, c.verdict()
    assert all(r["sample"]["rel_l2"] < 1e-4 for r in c.local_steps), c.local_steps  # fed the same, it agrees
    again = [run(pairs("cogview4-control").torch, plan).images for _ in range(2)]
    assert np.linalg.norm(again[0] - again[1]) / np.linalg.norm(again[0]) > 1e-3


@pytest.mark.parametrize("family", ["chroma", "chroma-img2img"])
def test_chroma_differs_by_mindones_float_mask_attention_and_agrees_with_its_math_branch(
        pairs, tiny_folder, image, family, monkeypatch):
    """Chroma hands attention a float 0/1 text mask. diffusers' SDPA adds it to the scores;
    mindone 0.5.0's scaled_dot_product_attention computes that (its math branch) and then, with
    no return, overwrites it with FlashAttentionScore, which reads the 1s as "discard": the
    prompt's own tokens are masked out. With the math branch returned, the sides agree."""
    _, c = _agrees(pairs, tiny_folder, image, family)
    assert not c.passed and c.local_steps[0]["model_output"]["rel_l2"] > 0.1, c.verdict()
    import diffusers
    from packaging.version import Version

    if Version(diffusers.__version__) >= Version("0.36"):  # mindone 0.5.0 follows diffusers 0.35
        pytest.skip(f"diffusers {diffusers.__version__}'s Chroma prompt embeddings differ from mindone 0.5.0's "
                    "(relative L2 0.064, CI's latest set): the math branch alone cannot make the sides agree")
    return_the_math_attention(monkeypatch)
    _, c = _agrees(pairs, tiny_folder, image, family)
    assert c.passed and c.final["rel_l2"] < 1e-4, c.verdict()
    assert all(r["sample"]["rel_l2"] < 1e-4 for r in c.local_steps), c.local_steps


@pytest.mark.parametrize("family", ["wan-i2v", "wan-v2v"])
def test_wan_image_and_video_to_video_part_at_mindones_unscaled_vae_attention_and_agree_scaled(
        pairs, tiny_folder, image, family, monkeypatch):
    """Wan 2.1 image to video (a CLIP vision encoder, the image's VAE latents beside the noise) and
    video to video (the video's VAE latents noised): the denoiser agrees step by step, but mindone
    0.5.0's Wan VAE attention is unscaled (mindone/diffusers/models/autoencoders/autoencoder_kl_wan.py,
    AttentionBlock: FlashAttentionScore at its default scale 1.0), on the way in (the input's
    latents) and out (the decode); scaled as diffusers scales, the sides agree."""
    from test_tiny_families import scale_wan_vae_attention_as_diffusers

    plan = make_plan(settings(tiny_folder, image, family), lockstep=True, mindspore_mode="pynative")
    c = compare_loaded(pairs(family), plan)
    assert not c.passed and c.final["rel_l2"] > 1e-3, c.verdict()
    assert "known cause: mindone's Wan VAE attention calls FlashAttentionScore" in c.summary_lines()[1]
    # the self-attention's rotary embedding keeps Wan's local error near 3e-4 (tests/test_families.py: 1e-3)
    assert all(r["sample"]["rel_l2"] < 1e-3 and r["model_output"]["rel_l2"] < 1e-3 for r in c.local_steps)
    scale_wan_vae_attention_as_diffusers(monkeypatch)
    _, c = _agrees(pairs, tiny_folder, image, family)
    assert c.passed and c.final["rel_l2"] < 1e-4, c.verdict()
    assert c.global_steps[-1]["rel_l2"] < 1e-3


def test_animatediff_agrees_but_mindone_leaves_the_motion_modules_saved_position_table_unloaded(
        pairs, tiny_folder, image):
    """AnimateDiff (a MotionAdapter merged into the UNet, a UNetMotionModel) agrees step by step and
    end to end, but fails the weights check: the motion modules' sinusoidal position table
    (``pos_embed.pe``, a persistent buffer diffusers saves and loads) is not loaded by mindone
    0.5.0, whose from_pretrained expects parameters only (mindone/diffusers/models/modeling_utils.py,
    line 1106: ``model.parameters_and_names()``): MindSpore keeps the table it computed."""
    plan, c = _agrees(pairs, tiny_folder, image, "animatediff")
    assert not c.passed and c.final["rel_l2"] < 1e-4, c.verdict()
    assert all(r["sample"]["rel_l2"] < 1e-4 for r in c.local_steps), c.local_steps
    assert "the loaded weights differ before any step: motion_adapter/" in c.verdict()
    assert "pos_embed.pe only on torch" in c.verdict()


def test_cogvideox_dpm_draws_its_step_noise_from_the_shared_stream_and_lockstep_feeds_its_carried_sample(
        pairs, tiny_folder, image):
    """CogVideoXDPMScheduler draws its noise in step() (a draw a step here: the last step's
    second is skipped) from the generator both pipelines give it, and its step() takes the previous
    step's predicted original sample, which lockstep records on torch's side and feeds on
    MindSpore's as it feeds the sample."""
    from xrand.compare.sides import Everything

    plan = make_plan(settings(tiny_folder, image, "cogvideox-dpm"), lockstep=True, mindspore_mode="pynative")
    recorded = run(pairs("cogvideox-dpm").torch, plan, record_calls=Everything(), record_steps=True)
    assert recorded.ran["noise_draws"] == 2 * 128  # (1, 2, 4, 4, 4) latents, one draw in each of 2 steps
    assert "old_pred_original_sample" not in recorded.recording.step(0)  # the first step has none
    assert recorded.recording.step(1)["old_pred_original_sample"].shape == (1, 2, 4, 4, 4)


@pytest.mark.parametrize("family, fault", [("wan-i2v", "blocks.0.attn2.add_k_proj"),
                                           ("cogvideox-dpm", "transformer_blocks.0.attn1.to_v"),
                                           ("animatediff", "mid_block.motion_modules.0.proj_out"),
                                           ("qwenimage", "transformer_blocks.0.img_mlp.net.2")])
def test_layers_name_a_fault_inside_a_new_denoiser(pairs, tiny_folder, image, family, fault):
    """A fault on MindSpore's side is named: in the image branch of Wan's cross-attention, in
    CogVideoX's joint attention, in a motion module of AnimateDiff's UNet, in the image stream's
    feed-forward of Qwen-Image's dual-stream block."""
    if family == "qwenimage":
        skip_on_newer_diffusers("its QwenImagePipeline calls the transformer with txt_seq_lens None where the "
                                "prompt mask is dropped (pipeline_qwenimage.py), a call mindone 0.5.0's transformer "
                                "cannot be fed (QwenEmbedRope: max(txt_seq_lens))")
    pair = pairs(family)
    denoiser = getattr(pair.mindspore.pipe, "transformer", None) or pair.mindspore.pipe.unet
    cell = dict(denoiser.cells_and_names())[fault]
    handle = cell.register_forward_hook(lambda cell, args, output: output * (1 + 1e-3))
    try:
        plan = make_plan(settings(tiny_folder, image, family), layers=LayerOptions(step=1, threshold=5e-4),
                         mindspore_mode="pynative")
        report = compare_loaded(pair, plan).layers
    finally:
        handle.remove()
    assert report.culprit == fault, report.summary()
    assert not report.unmatched["torch"] and not report.unmatched["mindspore"]


def test_hunyuan_video_fails_on_mindones_llama_without_its_hidden_states(pairs, tiny_folder, image):
    """HunyuanVideoPipeline takes the Llama encoder's third-to-last hidden states. mindone 0.5.0's
    pipeline reads them as ``text_encoder(..., output_hidden_states=True)[1][-3]``
    (mindone/diffusers/pipelines/hunyuan_video/pipeline_hunyuan_video.py, line 243), but its
    LlamaModel ignores ``output_hidden_states``: the tuple holds the last hidden state (and the
    cache where ``use_cache``), so MindSpore's side cannot run: xrand says so in one line (the
    IndexError it raises kept as the cause). With them collected it agrees (the family's row above)."""
    import xrand

    plan = make_plan(settings(tiny_folder, image, "hunyuan-video"), mindspore_mode="pynative")
    with pytest.raises(xrand.UsageError, match="^mindspore's HunyuanVideoPipeline cannot run: mindone 0.5.0's "
                                               "LlamaModel ignores output_hidden_states") as raised:
        compare_loaded(pairs("hunyuan-video"), plan)
    assert isinstance(raised.value.__cause__, IndexError) and "tuple index out of range" in str(raised.value.__cause__)


@pytest.mark.parametrize("family, reason", [("sana", "Gemma-2"), ("lumina2", "Gemma-2"), ("cogview4", "Chunk"),
                                            ("chroma", "Chunk"), ("wan-i2v", "Chunk"), ("cogvideox", "T5 encoder"),
                                            ("animatediff", "RepeatInterleaveInt"), ("qwenimage", "Qwen2.5-VL"),
                                            ("hunyuan-video", "Clone")])
def test_mindspore_runs_pynative_on_a_cpu_and_says_why(tiny_folder, image, family, reason):
    plan = make_plan(settings(tiny_folder, image, family))
    assert plan.mindspore_mode == "pynative" and reason in plan.mindspore_mode_reason


def _layers(pair, tiny_folder, image, family, fault, size, threshold):
    """The layer report at step 1 with MindSpore's ``fault`` module (None: none) off by ``size``."""
    handles = []
    if fault is not None:
        cell = dict(pair.mindspore.pipe.transformer.cells_and_names())[fault]
        handles.append(cell.register_forward_hook(lambda cell, args, output: output * (1 + size)))
    try:
        plan = make_plan(settings(tiny_folder, image, family), layers=LayerOptions(step=1, threshold=threshold),
                         mindspore_mode="pynative")
        report = compare_loaded(pair, plan).layers
    finally:
        for handle in handles:
            handle.remove()
    assert not report.unmatched["torch"] and not report.unmatched["mindspore"]
    return report


def test_cogvideox_takes_its_own_samplers_and_they_drive_no_other_kind(tiny_folder, image):
    import xrand

    with pytest.raises(xrand.UsageError, match="scheduler DDIMScheduler cannot drive CogVideoXPipeline, CogVideoX's "
                                               r"v-prediction model \(its SNR-shifted samplers\): it drives a noise-"
                                               "prediction .*; accepted: CogVideoXDDIMScheduler, CogVideoXDPMScheduler$"):
        make_plan(settings(tiny_folder, image, "cogvideox", scheduler="ddim"))
    with pytest.raises(xrand.UsageError, match="scheduler CogVideoXDPMScheduler cannot drive SanaPipeline, a flow-"
                                               "matching .*: it drives CogVideoX's v-prediction model"):
        make_plan(settings(tiny_folder, image, "sana", scheduler="CogVideoXDPM"))


def test_complex_module_outputs_are_measured_as_real_and_imaginary_parts():
    """Qwen-Image's rotary embedding returns complex tables: --layers measures their real and
    imaginary parts as pairs of reals, the imaginary part kept."""
    from xrand.compare.metrics import Errors, flat

    a = np.array([1 + 1j, 2 - 1j], np.complex64)
    b = np.array([1 + 1j, 2 + 1j], np.complex64)
    assert Errors()([a], [b], max_abs=True) == pytest.approx({"rel_l2": 2 / np.sqrt(7), "max_abs": 2.0})
    assert flat([a]).tolist() == [1, 1, 2, -1]


HUNYUAN_ROTARY = ("its HunyuanVideo transformer lays out its rotary tables other than mindone 0.5.0's, so torch's "
                  "recorded submodule calls cannot be fed to MindSpore's (a broadcast error in mindone's "
                  "apply_rotary_emb)")


# family -> (MindSpore's faulty module, how far off, the layer limit)
FAULTS = {"sana": ("transformer_blocks.0.ff.conv_point", 1e-3, 5e-4),
          # above the guidance embedding's own gap (the next test)
          "hunyuan-video": ("single_transformer_blocks.0.proj_mlp", 1e-2, 3e-3)}


@pytest.mark.parametrize("family", FAULTS)
def test_layers_name_a_fault_inside_a_transformer(pairs, tiny_folder, image, monkeypatch, family):
    if family == "hunyuan-video":
        skip_on_newer_diffusers(HUNYUAN_ROTARY)
    if family in FIXES:
        FIXES[family](monkeypatch)
    fault, size, threshold = FAULTS[family]
    report = _layers(pairs(family), tiny_folder, image, family, fault, size, threshold)
    assert report.culprit == fault, report.summary()


def test_hunyuan_videos_guidance_embedding_parts_by_mindspores_cpu_exp(pairs, tiny_folder, image, monkeypatch):
    """With no fault, the first module call over 5e-4 is the timestep projection of the guidance
    (6 x 1000): its frequencies exp(-ln(10000) k / 128) times 6000 (mindone's embeddings.py,
    get_timestep_embedding, as diffusers'). MindSpore 2.10's CPU exp is 30x further from the
    exact value than torch's (relative L2 6.8e-7 against 2.1e-8), and 6000 radians carry that
    into the sines and cosines: 1e-3 from torch's, while the timestep's own call (875) is within."""
    skip_on_newer_diffusers(HUNYUAN_ROTARY)
    import math

    exponent = (-math.log(10000) * np.arange(128) / 128).astype(np.float32)
    exact = np.exp(exponent.astype(np.float64))

    def error(x):
        return np.linalg.norm(x.astype(np.float64) - exact) / np.linalg.norm(exact)

    assert error(ms.mint.exp(ms.tensor(exponent)).asnumpy()) > 10 * error(torch.exp(torch.tensor(exponent)).numpy())
    FIXES["hunyuan-video"](monkeypatch)
    report = _layers(pairs("hunyuan-video"), tiny_folder, image, "hunyuan-video", None, 0, 5e-4)
    assert report.culprit == "time_text_embed.time_proj#1", report.summary()
