"""A tiny random-weight Stable Diffusion 3 folder (``StableDiffusion3Pipeline``), built offline.

Components: an SD3Transformer2DModel (MMDiT, 2 layers, 4 heads of 8, patch 2), two CLIP text
encoders with projection (hidden 32 each), a T5 encoder (64 wide: SD3 pads the two CLIP
embeddings, 32 + 32, to the T5 width, so it must be at least their sum), two byte-level CLIP
tokenizers and a T5 tokenizer, an AutoencoderKL with 16 latent channels and a ``shift_factor``
(SD3's VAE shifts and scales latents), and SD3's FlowMatchEulerDiscreteScheduler (shift 3).

A tiny run: ``height=32, width=32, max_sequence_length=32`` (default size: transformer sample
16 x VAE factor 2; the default 256 T5 tokens would cost most of the time).
Noise: one draw of the latents, (batch, 16, 16, 16); FlowMatchEulerDiscreteScheduler's ``step``
draws none by default.
"""
from __future__ import annotations

from pathlib import Path

from .folders import T5_WIDTH, PathLike, new_model_folder, save, seeded_torch, t5_encoder
from .tokenizers import CLIP_MAX_TOKENS, clip_text_config_ids, write_clip_tokenizer, write_t5_tokenizer

IMAGE_SIZE = 32
MAX_SEQUENCE_LENGTH = 32
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, max_sequence_length=MAX_SEQUENCE_LENGTH)

CLIP_WIDTH = 32
LATENT_CHANNELS = 16
TRANSFORMER = dict(
    sample_size=IMAGE_SIZE // 2, patch_size=2, in_channels=LATENT_CHANNELS, out_channels=LATENT_CHANNELS,
    num_layers=2, attention_head_dim=8, num_attention_heads=4, caption_projection_dim=32,
    joint_attention_dim=T5_WIDTH, pooled_projection_dim=2 * CLIP_WIDTH, pos_embed_max_size=16,
)
VAE = dict(
    sample_size=IMAGE_SIZE, in_channels=3, out_channels=3, latent_channels=LATENT_CHANNELS, layers_per_block=1,
    block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
    up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=32, use_quant_conv=False, use_post_quant_conv=False,
    shift_factor=0.0609, scaling_factor=1.5305,  # stable-diffusion-3-medium's vae/config.json
)
TEXT_ENCODER = dict(
    hidden_size=CLIP_WIDTH, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
    max_position_embeddings=CLIP_MAX_TOKENS, layer_norm_eps=1e-5, projection_dim=CLIP_WIDTH, hidden_act="gelu",
)
SCHEDULER = dict(num_train_timesteps=1000, shift=3.0)  # stable-diffusion-3-medium's scheduler_config.json


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``StableDiffusion3Pipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import (AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel,
                           StableDiffusion3Pipeline)
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, CLIPTokenizer, T5TokenizerFast

    tokenizer = CLIPTokenizer.from_pretrained(str(write_clip_tokenizer(folder / "tokenizer")))
    tokenizer_2 = CLIPTokenizer.from_pretrained(str(write_clip_tokenizer(folder / "tokenizer_2")))
    tokenizer_3 = T5TokenizerFast.from_pretrained(str(write_t5_tokenizer(folder / "tokenizer_3")))
    config = CLIPTextConfig(**clip_text_config_ids(), **TEXT_ENCODER)
    with seeded_torch(seed):
        transformer = SD3Transformer2DModel(**TRANSFORMER)
        vae = AutoencoderKL(**VAE)
        text_encoder = CLIPTextModelWithProjection(config)
        text_encoder_2 = CLIPTextModelWithProjection(config)
        text_encoder_3 = t5_encoder(folder / "tokenizer_3")
    return save(StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=vae,
        text_encoder=text_encoder, tokenizer=tokenizer, text_encoder_2=text_encoder_2, tokenizer_2=tokenizer_2,
        text_encoder_3=text_encoder_3, tokenizer_3=tokenizer_3), folder)
