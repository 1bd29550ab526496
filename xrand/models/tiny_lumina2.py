"""A tiny random-weight Lumina-Image 2.0 folder (``Lumina2Pipeline``), built offline.

Components: a Lumina2Transformer2DModel (2 layers and 1 refiner layer of each kind, 1 head of
8, patch 2, rotary axes 4/2/2), the Gemma-2 text encoder of the tiny Sana (its second-to-last
hidden states the caption) with a Gemma tokenizer, an AutoencoderKL (8x, 4 latent channels,
a shift factor) and Lumina 2's FlowMatchEulerDiscreteScheduler.

A tiny run: ``height=32, width=32, max_sequence_length=32``. Noise: one draw of (batch, 4, 4, 4).
"""
from __future__ import annotations

from pathlib import Path

from .folders import GEMMA_WIDTH, PathLike, gemma2_encoder, new_model_folder, save, seeded_torch
from .tokenizers import write_lm_tokenizer

IMAGE_SIZE = 32
MAX_SEQUENCE_LENGTH = 32
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, max_sequence_length=MAX_SEQUENCE_LENGTH)

TRANSFORMER = dict(
    sample_size=IMAGE_SIZE // 8, patch_size=2, in_channels=4, hidden_size=8, num_layers=2, num_refiner_layers=1,
    num_attention_heads=1, num_kv_heads=1, multiple_of=16, ffn_dim_multiplier=None, norm_eps=1e-5, scaling_factor=1.0,
    axes_dim_rope=(4, 2, 2), cap_feat_dim=GEMMA_WIDTH,
)
# 8x downsampling: Lumina2Pipeline takes its VAE's scale factor to be 8 whatever the VAE
VAE = dict(
    sample_size=IMAGE_SIZE, in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
    block_out_channels=(8, 8, 16, 16), down_block_types=("DownEncoderBlock2D",) * 4,
    up_block_types=("UpDecoderBlock2D",) * 4, norm_num_groups=8, use_quant_conv=False, use_post_quant_conv=False,
    shift_factor=0.0609, scaling_factor=1.5035,  # Lumina-Image-2.0's vae/config.json (FLUX.1's VAE)
)
# Lumina-Image-2.0's scheduler_config.json
SCHEDULER = dict(num_train_timesteps=1000, shift=6.0, use_dynamic_shifting=False)


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``Lumina2Pipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, Lumina2Pipeline, Lumina2Transformer2DModel
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(write_lm_tokenizer(folder / "tokenizer", "gemma")))
    with seeded_torch(seed):
        transformer = Lumina2Transformer2DModel(**TRANSFORMER)
        vae = AutoencoderKL(**VAE)
        text_encoder = gemma2_encoder(folder / "tokenizer")
    return save(Lumina2Pipeline(transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER),
                                vae=vae, text_encoder=text_encoder, tokenizer=tokenizer), folder)
