"""The tiny Stable Diffusion folder: built offline, read by both libraries, same images from one seed."""
import hashlib
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
pytest.importorskip("transformers")

import xrand  # noqa: E402
from xrand.models.tiny_sd import IMAGE_SIZE, build_tiny_sd, byte_vocab  # noqa: E402

PROMPT = "a photo of a cat"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_tiny_sd(tmp_path_factory.mktemp("tiny-sd") / "model", seed=0)


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_folder_has_safetensors_weights_and_the_pipeline_class(folder):
    index = json.loads((folder / "model_index.json").read_text())
    assert index["_class_name"] == "StableDiffusionPipeline"
    for part in ("unet", "vae", "text_encoder"):
        assert list((folder / part).glob("*.safetensors")), part
        assert not list((folder / part).glob("*.bin")), part


def test_the_same_seed_writes_the_same_weights_and_leaves_torch_global_rng_alone(folder, tmp_path):
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    again = build_tiny_sd(tmp_path / "again", seed=0)
    assert torch.equal(torch.random.get_rng_state(), state)
    other = build_tiny_sd(tmp_path / "other", seed=1)
    unet = "unet/diffusion_pytorch_model.safetensors"
    assert _digest(again / unet) == _digest(folder / unet)
    assert _digest(other / unet) != _digest(folder / unet)


def test_an_existing_model_folder_is_refused(folder):
    with pytest.raises(xrand.UsageError, match="model_index.json"):
        build_tiny_sd(folder)


def test_the_byte_tokenizer_covers_every_byte(folder):
    vocab = byte_vocab()
    assert len(vocab) == 514 and vocab["<|startoftext|>"] == 512 and vocab["<|endoftext|>"] == 513
    tokenizer = diffusers.StableDiffusionPipeline.from_pretrained(folder).tokenizer
    ids = tokenizer("a cat", padding="max_length", max_length=tokenizer.model_max_length).input_ids
    assert ids[:6] == [512, vocab["a</w>"], vocab["c"], vocab["a"], vocab["t</w>"], 513]
    assert len(ids) == 77 and set(ids[6:]) == {513}
    assert max(tokenizer("ünïcödé ✓ 123").input_ids) <= 513  # any text: one token per byte


def test_mindone_runs_the_folder_like_diffusers(folder):
    """Two steps of text-to-image, guidance 7.5, from one xrand seed: the images agree (mindone's 5e-3)."""
    pytest.importorskip("mindspore")
    mindone_diffusers = pytest.importorskip("mindone.diffusers")
    from xrand import mindspore_cpu

    mindspore_cpu.tune_cpu_runtime()
    args = dict(num_inference_steps=2, guidance_scale=7.5, height=IMAGE_SIZE, width=IMAGE_SIZE, output_type="np")
    with mindspore_cpu.cpu_fallbacks(), xrand.patched():
        pt = diffusers.StableDiffusionPipeline.from_pretrained(folder)
        ms = mindone_diffusers.StableDiffusionPipeline.from_pretrained(folder)
        for name in ("PNDMScheduler", "EulerAncestralDiscreteScheduler"):  # the folder's own; one that draws noise
            pt.scheduler = getattr(diffusers, name).from_config(pt.scheduler.config)
            ms.scheduler = getattr(mindone_diffusers, name).from_config(ms.scheduler.config)
            expected = pt(PROMPT, generator=xrand.Generator(7), **args).images
            images = ms(PROMPT, generator=xrand.Generator(7), **args)[0]
            assert images.shape == expected.shape == (1, IMAGE_SIZE, IMAGE_SIZE, 3)
            assert np.linalg.norm(images - expected) / np.linalg.norm(expected) < 5e-3, name
        # the comparison can fail: another seed's image is far from this one
        other = pt(PROMPT, generator=xrand.Generator(8), **args).images
        assert np.linalg.norm(other - expected) / np.linalg.norm(expected) > 5e-3
