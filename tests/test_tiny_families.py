"""The tiny family folders: built offline, read by diffusers and mindone.diffusers, and both
libraries' own pipelines give the same images from one xrand seed (mindone's 5e-3 limit)."""
import hashlib
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
pytest.importorskip("transformers")
ms = pytest.importorskip("mindspore")
mindone_diffusers = pytest.importorskip("mindone.diffusers")

import xrand  # noqa: E402
from xrand import mindspore_cpu  # noqa: E402
from xrand.models import TINY_MODELS, build_tiny  # noqa: E402
from xrand.models.tokenizers import write_t5_tokenizer  # noqa: E402
from conftest import unipc_flow_timesteps_agree  # noqa: E402

pytestmark = pytest.mark.skipif(ms.get_context("device_target") != "CPU", reason="runs mindone on the CPU")

PROMPT = "a red circle on a blue square"
LIMIT = 5e-3  # mindone's own float32 limit (tests/diffusers_tests/pipelines/pipeline_test_utils.py)
DENOISERS = {"unet", "transformer"}


def rel_l2(out, expected):
    return float(np.linalg.norm(out - expected) / np.linalg.norm(expected))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {name: build_tiny(name, root / name, seed=0) for name in TINY_MODELS}


@pytest.fixture(scope="module")
def pipelines(folders):
    """Loaded once per (family, pipeline class): (diffusers pipeline, mindone pipeline)."""
    loaded = {}
    with mindspore_cpu.cpu_fallbacks():  # mindone builds PixArt's blocks with mint.randn
        def load(name, pipeline=None):
            pipeline = pipeline or TINY_MODELS[name].pipelines[0]
            if (name, pipeline) not in loaded:
                loaded[name, pipeline] = (getattr(diffusers, pipeline).from_pretrained(folders[name]),
                                          getattr(mindone_diffusers, pipeline).from_pretrained(folders[name]))
                if name == "wan" and not unipc_flow_timesteps_agree():
                    # the libraries' UniPC flow schedules differ (test_families names that gap): both
                    # run flow-matching Euler, so these tests still look at the models
                    for library, loaded_pipeline in zip((diffusers, mindone_diffusers), loaded[name, pipeline]):
                        loaded_pipeline.scheduler = library.FlowMatchEulerDiscreteScheduler(shift=3.0)
            return loaded[name, pipeline]

        yield load


def _images():
    """A 32x32 input image and a mask (white: repaint) for image-to-image and inpainting."""
    from PIL import Image

    pixels = (np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)
    mask = np.zeros((32, 32), np.uint8)
    mask[8:24, 8:24] = 255
    return Image.fromarray(pixels), Image.fromarray(mask)


def _run(pipeline, name, seed=0, **extra):
    """One pipeline, 2 denoising steps, noise from ``xrand.Generator(seed)``; its output as NumPy."""
    args = {"num_inference_steps": 2, "output_type": "np", **TINY_MODELS[name].call, **extra}
    with xrand.patched():
        out = pipeline(PROMPT, generator=xrand.Generator(seed), **args)
    if isinstance(out, tuple):  # mindone returns tuples by default, of MindSpore tensors for latents
        out = out[0]
        return out.asnumpy() if isinstance(out, ms.Tensor) else np.asarray(out)
    out = out.frames if hasattr(out, "frames") else out.images
    return out.numpy() if isinstance(out, torch.Tensor) else np.asarray(out)


# ---------------------------------------------------------------- the folders

def test_an_unknown_tiny_model_is_refused_with_the_accepted_names(tmp_path):
    with pytest.raises(xrand.UsageError, match="unknown tiny model 'sd4'; accepted: sd, sd-inpaint, sdxl, sd3, flux"):
        build_tiny("sd4", tmp_path)


@pytest.mark.parametrize("name", list(TINY_MODELS))
def test_the_folder_has_safetensors_weights_and_the_pipeline_class(folders, name):
    index = json.loads((folders[name] / "model_index.json").read_text())
    assert index["_class_name"] == TINY_MODELS[name].pipelines[0]
    weights = [p for p in folders[name].rglob("*") if p.suffix in (".safetensors", ".bin")]
    assert weights and all(p.suffix == ".safetensors" for p in weights)
    with pytest.raises(xrand.UsageError, match="model_index.json"):
        build_tiny(name, folders[name])


@pytest.mark.parametrize("name", ["sd-inpaint", "sdxl", "sd3", "flux", "pixart", "wan", "sd-controlnet",
                                  "flux-controlnet"])
def test_the_same_seed_writes_the_same_weights(folders, tmp_path, name):
    def digests(folder):
        return {p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*")
                if p.is_file()}

    state = torch.random.get_rng_state()
    assert digests(build_tiny(name, tmp_path / "again", seed=0)) == digests(folders[name])
    assert torch.equal(torch.random.get_rng_state(), state)  # torch's global RNG left alone
    other = digests(build_tiny(name, tmp_path / "other", seed=1))
    weights = {k: v for k, v in digests(folders[name]).items() if k.suffix == ".safetensors"}
    assert all(other[k] != v for k, v in weights.items())


def test_the_t5_tokenizer_is_built_offline_and_reads_like_t5(tmp_path):
    from transformers import AutoTokenizer, T5TokenizerFast

    tokenizer = AutoTokenizer.from_pretrained(write_t5_tokenizer(tmp_path / "t5", max_length=64))
    assert isinstance(tokenizer, T5TokenizerFast) and tokenizer.model_max_length == 64
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (0, 1, 2)
    ids = tokenizer("a red cat ✓", padding="max_length", max_length=12, truncation=True).input_ids
    assert len(ids) == 12 and ids[-1] == 0 and 1 in ids and 2 in ids  # padded, </s> appended, ✓ unknown
    assert tokenizer.decode(ids, skip_special_tokens=True).strip() == "a red cat"
    again = AutoTokenizer.from_pretrained(write_t5_tokenizer(tmp_path / "again"))
    assert again.get_vocab() == tokenizer.get_vocab()  # training is deterministic


@pytest.mark.parametrize("name", list(TINY_MODELS))
def test_both_libraries_load_every_component_with_the_same_parameter_count(pipelines, name):
    pt, ms_pipe = pipelines(name)
    for component, module in pt.components.items():
        if not hasattr(module, "parameters"):
            continue
        ms_module = getattr(ms_pipe, component)
        assert type(ms_module).__name__ == type(module).__name__, component
        # the saved tensors, tied ones (T5's embeddings) once: SD3's position embedding is a saved
        # buffer in diffusers, a Parameter in mindone
        saved = {n: t for n, t in module.state_dict().items() if not n.endswith(TORCH_ONLY.get(name, ()))}
        count = sum({t.data_ptr(): t.numel() for t in saved.values()}.values())
        extra = {p.name: p for p in ms_module.get_parameters() if p.name in MINDONE_ONLY.get((name, component), ())}
        assert sum(p.size for p in ms_module.get_parameters()) - sum(p.size for p in extra.values()) == count, \
            component
        for parameter_name, value in MINDONE_ONLY.get((name, component), {}).items():  # as diffusers computes
            np.testing.assert_array_equal(extra[parameter_name].asnumpy(), value)
    assert DENOISERS & set(pt.components)


#: Parameters mindone has and diffusers does not (left at their initial values, which compute
#: what diffusers does): LTX's final LayerNorm has an affine in mindone 0.5.0
#: (models/transformers/transformer_ltx.py, norm_out), none in diffusers 0.35.2.
MINDONE_ONLY = {("ltx", "transformer"): {"norm_out.weight": 1.0, "norm_out.bias": 0.0}}
#: Saved tensors diffusers loads and mindone does not hold as parameters (by the end of their
#: names): AnimateDiff's motion modules' position table is a persistent buffer, which mindone
#: 0.5.0's from_pretrained leaves unloaded (tests/test_next_families.py asserts that finding).
TORCH_ONLY = {"animatediff": ("pos_embed.pe",)}


# ---------------------------------------------------------------- both libraries, one seed

@pytest.mark.parametrize("name, pipeline, extra", [
    ("sd", "StableDiffusionImg2ImgPipeline", {"strength": 0.5, "num_inference_steps": 4}),  # 2 steps run
    ("sd-inpaint", "StableDiffusionInpaintPipeline", {"strength": 0.5, "num_inference_steps": 4}),
    ("sdxl", None, {}), ("sd3", None, {}), ("flux", None, {}), ("pixart", None, {}),
    ("wan", None, {"output_type": "latent"}),  # the video: see the next test
])
def test_mindone_runs_the_family_like_diffusers(pipelines, name, pipeline, extra):
    image, mask = _images()
    if pipeline is not None:
        extra = dict(extra, image=image, **({"mask_image": mask} if "Inpaint" in pipeline else {}))
    pt, ms_pipe = pipelines(name, pipeline)
    expected, got = _run(pt, name, **extra), _run(ms_pipe, name, **extra)
    assert got.shape == expected.shape
    assert rel_l2(got, expected) < LIMIT, name
    assert rel_l2(_run(pt, name, seed=1, **extra), expected) > LIMIT  # the check can fail: another seed is far


def test_mindones_wan_video_differs_by_its_unscaled_vae_attention(pipelines, monkeypatch):
    """mindone 0.5.0's Wan VAE calls FlashAttentionScore with its default scale 1.0
    (mindone/diffusers/models/autoencoders/autoencoder_kl_wan.py, AttentionBlock) where diffusers'
    scaled_dot_product_attention scales by 1/sqrt(channels). Scaled so, the videos agree."""
    pt, ms_pipe = pipelines("wan")
    expected, got = _run(pt, "wan"), _run(ms_pipe, "wan")
    assert got.shape == expected.shape == (1, 5, 32, 32, 3)
    assert rel_l2(got, expected) > LIMIT

    scale_wan_vae_attention_as_diffusers(monkeypatch)
    assert rel_l2(_run(ms_pipe, "wan"), expected) < LIMIT


def scale_wan_vae_attention_as_diffusers(monkeypatch):
    """The CPU FlashAttentionScore stand-in given 1/sqrt(head size) where its caller left the
    default scale 1.0 (mindone's Wan VAE), for the rest of the test."""
    flash = mindspore_cpu.ops._FlashAttentionScore
    unscaled = flash.__call__

    def scaled_as_diffusers(self, query, key, value, *args):
        if self.scale_value == 1.0:
            self.scale_value = query.shape[-1] ** -0.5
        return unscaled(self, query, key, value, *args)

    monkeypatch.setattr(flash, "__call__", scaled_as_diffusers)
