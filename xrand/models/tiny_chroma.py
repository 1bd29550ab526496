"""A tiny random-weight Chroma folder (``ChromaPipeline``, ``ChromaImg2ImgPipeline``), built offline.

Chroma is FLUX.1-schnell without its CLIP encoder and its guidance embedding: a T5 encoder (64
wide) and its tokenizer, a ChromaTransformer2DModel (1 double-stream and 1 single-stream block,
2 heads of 16, rotary axes 4/6/6, a 1-layer modulation approximator), the tiny Flux VAE (16
latent channels packed 2x2 into tokens: ``in_channels`` 64) and a FlowMatchEulerDiscreteScheduler.

A tiny run: ``height=32, width=32, max_sequence_length=32``; guidance is true classifier-free
guidance (a second pass with the negative prompt when ``guidance_scale`` > 1). Noise: one draw of
(batch, 16, 16, 16), packed into (batch, 64 tokens, 64).
"""
from __future__ import annotations

from pathlib import Path

from . import tiny_flux
from .folders import T5_WIDTH, PathLike, new_model_folder, save, seeded_torch, t5_encoder
from .tokenizers import write_t5_tokenizer

IMAGE_SIZE = 32
MAX_SEQUENCE_LENGTH = 32
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, max_sequence_length=MAX_SEQUENCE_LENGTH)

TRANSFORMER = dict(
    patch_size=1, in_channels=4 * tiny_flux.LATENT_CHANNELS, num_layers=1, num_single_layers=1, attention_head_dim=16,
    num_attention_heads=2, joint_attention_dim=T5_WIDTH, axes_dims_rope=(4, 6, 6), approximator_num_channels=16,
    approximator_hidden_dim=32, approximator_layers=1,
)
# Chroma1-HD's scheduler_config.json
SCHEDULER = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                 base_image_seq_len=256, max_image_seq_len=4096)


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``ChromaPipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import AutoencoderKL, ChromaPipeline, ChromaTransformer2DModel, FlowMatchEulerDiscreteScheduler
    from transformers import T5TokenizerFast

    tokenizer = T5TokenizerFast.from_pretrained(str(write_t5_tokenizer(folder / "tokenizer")))
    with seeded_torch(seed):
        transformer = ChromaTransformer2DModel(**TRANSFORMER)
        vae = AutoencoderKL(**tiny_flux.VAE)
        text_encoder = t5_encoder(folder / "tokenizer")
    return save(ChromaPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=vae,
                               text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer), folder)
