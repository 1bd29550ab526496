"""A tiny random-weight Sana folder (``SanaPipeline``), built offline.

Components: a SanaTransformer2DModel (linear-attention DiT: 1 block, 2 heads of 4, patch 1), a
Gemma-2 text encoder (1 layer, 8 wide, its hidden states the caption) with a Gemma tokenizer
(:func:`.tokenizers.write_lm_tokenizer`), a deep-compression autoencoder (AutoencoderDC: 2
stages, 4 latent channels, 2x downsampling) and Sana 1600M's DPMSolverMultistepScheduler on flow
sigmas (flow_shift 3).

A tiny run: ``height=32, width=32, max_sequence_length=16, complex_human_instruction=None,
use_resolution_binning=False, clean_caption=False`` (its check_inputs wants multiples of 32; the
default instruction prefixes every prompt with a long chat template; binning snaps sizes to
Sana's aspect-ratio bins, 256 pixels and up). Noise: one draw of (batch, 4, 16, 16).
"""
from __future__ import annotations

from pathlib import Path

from .folders import GEMMA_WIDTH, PathLike, gemma2_encoder, new_model_folder, save, seeded_torch
from .tokenizers import write_lm_tokenizer

IMAGE_SIZE = 32
MAX_SEQUENCE_LENGTH = 16
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, max_sequence_length=MAX_SEQUENCE_LENGTH,
            complex_human_instruction=None, use_resolution_binning=False, clean_caption=False)

TRANSFORMER = dict(
    patch_size=1, in_channels=4, out_channels=4, num_layers=1, num_attention_heads=2, attention_head_dim=4,
    num_cross_attention_heads=2, cross_attention_head_dim=4, cross_attention_dim=8, caption_channels=GEMMA_WIDTH,
    sample_size=IMAGE_SIZE // 2,
)
VAE = dict(
    in_channels=3, latent_channels=4, attention_head_dim=2, encoder_block_types=("ResBlock", "EfficientViTBlock"),
    decoder_block_types=("ResBlock", "EfficientViTBlock"), encoder_block_out_channels=(8, 8),
    decoder_block_out_channels=(8, 8), encoder_qkv_multiscales=((), (5,)), decoder_qkv_multiscales=((), (5,)),
    encoder_layers_per_block=(1, 1), decoder_layers_per_block=(1, 1), downsample_block_type="conv",
    upsample_block_type="interpolate", decoder_norm_types="rms_norm", decoder_act_fns="silu", scaling_factor=0.41407,
)
# Sana_1600M_1024px_diffusers's scheduler_config.json
SCHEDULER = dict(num_train_timesteps=1000, beta_schedule="linear", prediction_type="flow_prediction",
                 use_flow_sigmas=True, flow_shift=3.0, solver_order=2, algorithm_type="dpmsolver++")


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``SanaPipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import AutoencoderDC, DPMSolverMultistepScheduler, SanaPipeline, SanaTransformer2DModel
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(write_lm_tokenizer(folder / "tokenizer", "gemma")))
    with seeded_torch(seed):
        transformer = SanaTransformer2DModel(**TRANSFORMER)
        vae = AutoencoderDC(**VAE)
        text_encoder = gemma2_encoder(folder / "tokenizer")
    return save(SanaPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer,
                             scheduler=DPMSolverMultistepScheduler(**SCHEDULER)), folder)
