"""A tiny random-weight Stable Diffusion folder, built offline for tests and comparisons.

``build_tiny_sd(folder)`` writes what ``StableDiffusionPipeline.from_pretrained(folder)`` reads in
both diffusers and mindone.diffusers: a UNet2DConditionModel (32/64 channels, cross-attention 32),
an AutoencoderKL (32/64), a CLIPTextModel (hidden 32) and a byte-level CLIPTokenizer, with
safetensors weights (mindone reads no other format). Nothing is downloaded: the tokenizer's
vocabulary is CLIP's 256 byte symbols, their end-of-word forms and the two special tokens, with
no BPE merges, so any prompt tokenizes (one token per byte). The weights are random, drawn
from ``seed`` in a forked torch RNG (torch's global RNG is left as it was), so the same seed
writes the same weights on every machine.

    from xrand.models.tiny_sd import build_tiny_sd
    folder = build_tiny_sd("/tmp/tiny-sd", seed=0)
    pipe = diffusers.StableDiffusionPipeline.from_pretrained(folder)

A tiny run: ``height=32, width=32``. ``StableDiffusionImg2ImgPipeline`` loads the same folder and
takes ``image`` (32x32) and ``strength`` (``num_inference_steps=4, strength=0.5`` runs 2 steps);
:func:`build_inpaint` writes a ``StableDiffusionInpaintPipeline`` folder (UNet of 9 input
channels) that takes ``image`` and ``mask_image`` (32x32) as well.

Noise: text to image draws the latents (batch, 4, 16, 16) once. Image to image draws twice:
the VAE's ``latent_dist.sample`` of the input image, then the noise that ``scheduler.add_noise``
mixes into it. Inpainting (9-channel UNet) draws, in order: the input image's VAE sample
(skipped at strength 1), the noise (mixed in by ``add_noise``, or the latents themselves at
strength 1), then the masked image's VAE sample for the UNet's extra channels.
"""
from __future__ import annotations

from pathlib import Path

from .folders import PathLike, new_model_folder, save, seeded_torch
from .tokenizers import BOS, EOS, byte_vocab, clip_text_config_ids, write_clip_tokenizer
from .tokenizers import CLIP_MAX_TOKENS as MAX_TOKENS

__all__ = ["BOS", "EOS", "IMAGE_SIZE", "MAX_TOKENS", "build", "build_inpaint", "build_tiny_sd", "byte_vocab"]

#: Image side in pixels the folder is meant for (latents are half of it: the VAE has two blocks).
IMAGE_SIZE = 32
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE)

UNET = dict(
    sample_size=IMAGE_SIZE // 2, in_channels=4, out_channels=4, layers_per_block=1,
    block_out_channels=(32, 64), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=32, attention_head_dim=8,
    norm_num_groups=32,
)
VAE = dict(
    sample_size=IMAGE_SIZE, in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
    block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
    up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=32,
)
TEXT_ENCODER = dict(
    hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
    max_position_embeddings=MAX_TOKENS, layer_norm_eps=1e-5, projection_dim=32,
)
# Stable Diffusion 1.x's scheduler settings (its scheduler_config.json).
SCHEDULER = dict(
    beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
    skip_prk_steps=True, set_alpha_to_one=False, steps_offset=1,
)


def build_tiny_sd(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``StableDiffusionPipeline`` folder (safetensors) and return its path.

    ``seed`` fixes every weight; the folder may exist but must not hold a model_index.json.
    Needs torch, diffusers and transformers. The images it makes are noise, but the same noise
    in both libraries, which is what a comparison needs. ``StableDiffusionImg2ImgPipeline``
    loads it too.
    """
    return _build(folder, seed, inpaint=False)


def build_inpaint(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``StableDiffusionInpaintPipeline`` folder: the UNet takes 9 channels
    (noisy latents, the mask, the masked image's latents), as Stable Diffusion's inpainting models do."""
    return _build(folder, seed, inpaint=True)


#: The width of the LCM UNet's guidance-scale embedding (``time_cond_proj_dim``).
LCM_GUIDANCE_WIDTH = 32


def build_pix2pix(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``StableDiffusionInstructPix2PixPipeline`` folder: the UNet takes 8
    channels (noisy latents and the input image's latents), as InstructPix2Pix does."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import StableDiffusionInstructPix2PixPipeline

    return save(StableDiffusionInstructPix2PixPipeline(**components(folder, seed, in_channels=8)), folder)


def build_lcm(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``LatentConsistencyModelPipeline`` folder: the UNet embeds the
    guidance scale beside the timestep (``time_cond_proj_dim``, as LCM-distilled UNets do), and the
    scheduler is an ``LCMScheduler``."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import LatentConsistencyModelPipeline, LCMScheduler

    parts = components(folder, seed, time_cond_proj_dim=LCM_GUIDANCE_WIDTH)
    parts["scheduler"] = LCMScheduler(**{k: v for k, v in SCHEDULER.items() if k != "skip_prk_steps"})
    return save(LatentConsistencyModelPipeline(**parts), folder)


build = build_tiny_sd


def _build(folder: PathLike, seed: int, inpaint: bool) -> Path:
    folder, seed = new_model_folder(folder, seed)
    from diffusers import StableDiffusionInpaintPipeline, StableDiffusionPipeline

    pipeline = StableDiffusionInpaintPipeline if inpaint else StableDiffusionPipeline
    return save(pipeline(**components(folder, seed, inpaint)), folder)


def components(folder: Path, seed: int, inpaint: bool = False, in_channels: int = 0, **unet: int) -> dict:
    """The pipeline's arguments: its components drawn from ``seed`` (the tokenizer written in
    ``folder``), no safety checker."""
    from diffusers import AutoencoderKL, PNDMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(str(write_clip_tokenizer(folder / "tokenizer")))
    with seeded_torch(seed):
        unet = UNet2DConditionModel(**{**UNET, "in_channels": in_channels or (9 if inpaint else 4), **unet})
        vae = AutoencoderKL(**VAE)
        text_encoder = CLIPTextModel(CLIPTextConfig(**clip_text_config_ids(), **TEXT_ENCODER))
    return dict(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                scheduler=PNDMScheduler(**SCHEDULER), safety_checker=None, feature_extractor=None,
                requires_safety_checker=False)
