"""A tiny random-weight Wan 2.1 text-to-video folder (``WanPipeline``), built offline.

Components: a WanTransformer3DModel (2 blocks, 2 heads of 12, patch 1x2x2, RMS q/k norm), a
UMT5 encoder (64 wide) with a T5 tokenizer, an AutoencoderKLWan (causal 3-D VAE, base width 3,
16 latent channels, 8x spatial and 4x temporal downsampling) and Wan 2.1's
UniPCMultistepScheduler with flow sigmas (flow_shift 3). Latents are 5-D:
(batch, 16, (num_frames - 1) / 4 + 1, height / 8, width / 8).

A tiny run: ``height=32, width=32, num_frames=5, max_sequence_length=32`` (num_frames must be
4k + 1; height and width multiples of 16: VAE factor 8 x patch 2). diffusers' WanPipeline needs
``ftfy`` (its prompt cleaning) and its ``from_pretrained`` needs ``accelerate``.
Noise: one float32 draw of the latents, (batch, 16, 2, 4, 4) for 5 frames of 32x32; UniPC
draws none.
"""
from __future__ import annotations

from pathlib import Path

from .folders import T5_WIDTH, PathLike, new_model_folder, save, seeded_torch, t5_encoder
from .tokenizers import write_t5_tokenizer

IMAGE_SIZE = 32
NUM_FRAMES = 5
MAX_SEQUENCE_LENGTH = 32
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, num_frames=NUM_FRAMES, max_sequence_length=MAX_SEQUENCE_LENGTH)

TRANSFORMER = dict(
    patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=16, out_channels=16,
    text_dim=T5_WIDTH, freq_dim=256, ffn_dim=32, num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
    rope_max_seq_len=32,
)
VAE = dict(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True])
# Wan2.1-T2V-1.3B-Diffusers's scheduler_config.json
SCHEDULER = dict(num_train_timesteps=1000, beta_start=0.0001, beta_end=0.02, beta_schedule="linear",
                 prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=3.0, solver_order=2,
                 predict_x0=True, solver_type="bh2", lower_order_final=True, final_sigmas_type="zero",
                 timestep_spacing="linspace")


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``WanPipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanPipeline, WanTransformer3DModel
    from transformers import T5TokenizerFast

    tokenizer = T5TokenizerFast.from_pretrained(str(write_t5_tokenizer(folder / "tokenizer")))
    with seeded_torch(seed):
        transformer = WanTransformer3DModel(**TRANSFORMER)
        vae = AutoencoderKLWan(**VAE)
        text_encoder = t5_encoder(folder / "tokenizer", umt5=True)
    return save(WanPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae,
                            scheduler=UniPCMultistepScheduler(**SCHEDULER), transformer=transformer), folder)
