"""A Stable-Diffusion-1.5-sized random-weight folder, built offline: what a real model costs.

``build_sd15_sized(folder)`` writes a ``StableDiffusionPipeline`` folder with Stable Diffusion
1.5's architecture (its ``unet/config.json``, ``vae/config.json`` and CLIP ViT-L/14 text encoder)
and random weights: UNet 860M parameters, VAE 84M, text encoder 86M (CLIP's 123M less its
49,408-token embedding: the byte-level tokenizer of :mod:`.tiny_sd` has 514 tokens). About
4.1 GB of safetensors; the weights are drawn from ``seed`` as the tiny folders' are. Images of
256x256 (latents 32x32) or 512x512 run; the benchmarks (``benchmarks/bench_scale.py``) use it.
"""
from __future__ import annotations

from pathlib import Path

from .folders import PathLike, new_model_folder, save, seeded_torch
from .tiny_sd import SCHEDULER
from .tokenizers import clip_text_config_ids, write_clip_tokenizer

# Stable Diffusion 1.5's configs (runwayml/stable-diffusion-v1-5: unet/, vae/, text_encoder/config.json)
UNET = dict(
    sample_size=64, in_channels=4, out_channels=4, layers_per_block=2, block_out_channels=(320, 640, 1280, 1280),
    down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
    up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
    cross_attention_dim=768, attention_head_dim=8, norm_num_groups=32,
)
VAE = dict(
    sample_size=512, in_channels=3, out_channels=3, latent_channels=4, layers_per_block=2,
    block_out_channels=(128, 256, 512, 512), down_block_types=("DownEncoderBlock2D",) * 4,
    up_block_types=("UpDecoderBlock2D",) * 4, norm_num_groups=32,
)
TEXT_ENCODER = dict(
    hidden_size=768, intermediate_size=3072, num_attention_heads=12, num_hidden_layers=12,
    max_position_embeddings=77, layer_norm_eps=1e-5, projection_dim=768, hidden_act="quick_gelu",
)


def build_sd15_sized(folder: PathLike, seed: int = 0) -> Path:
    """Write the random-weight SD-1.5-sized ``StableDiffusionPipeline`` folder and return its path
    (a minute or two and about 4.1 GB; needs torch, diffusers and transformers)."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(str(write_clip_tokenizer(folder / "tokenizer")))
    with seeded_torch(seed):
        unet = UNet2DConditionModel(**UNET)
        vae = AutoencoderKL(**VAE)
        text_encoder = CLIPTextModel(CLIPTextConfig(**clip_text_config_ids(), **TEXT_ENCODER))
    return save(StableDiffusionPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                        scheduler=PNDMScheduler(**SCHEDULER), safety_checker=None,
                                        feature_extractor=None, requires_safety_checker=False), folder)


__all__ = ["TEXT_ENCODER", "UNET", "VAE", "build_sd15_sized"]
