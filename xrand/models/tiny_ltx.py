"""A tiny random-weight LTX-Video folder (``LTXPipeline``), built offline.

Components: an LTXVideoTransformer3DModel (1 block, 4 heads of 8, patch 1x1x1), a T5 encoder
(64 wide) with a T5 tokenizer, an AutoencoderKLLTXVideo (8 latent channels, 4x spatial and 4x
temporal compression) and LTX-Video's FlowMatchEulerDiscreteScheduler (dynamic shifting, a
terminal shift). Latents are drawn 5-D, (batch, 8, (num_frames - 1) / 4 + 1, height / 4,
width / 4), then packed into tokens.

A tiny run: ``height=32, width=32, num_frames=9, max_sequence_length=32`` (height and width
multiples of 32: the pipeline's check_inputs).
Noise: one float32 draw of the latents, (batch, 8, 3, 8, 8) for 9 frames of 32x32; decoding
draws once more only for a VAE with timestep conditioning (this one has none).
"""
from __future__ import annotations

from pathlib import Path

from .folders import T5_WIDTH, PathLike, new_model_folder, save, seeded_torch, t5_encoder
from .tokenizers import write_t5_tokenizer

IMAGE_SIZE = 32
NUM_FRAMES = 9
MAX_SEQUENCE_LENGTH = 32
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, num_frames=NUM_FRAMES, max_sequence_length=MAX_SEQUENCE_LENGTH)

TRANSFORMER = dict(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1, num_attention_heads=4,
                   attention_head_dim=8, cross_attention_dim=32, num_layers=1, caption_channels=T5_WIDTH)
VAE = dict(
    in_channels=3, out_channels=3, latent_channels=8, block_out_channels=(8, 8, 8, 8),
    decoder_block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1), decoder_layers_per_block=(1, 1, 1, 1, 1),
    spatio_temporal_scaling=(True, True, False, False), decoder_spatio_temporal_scaling=(True, True, False, False),
    decoder_inject_noise=(False,) * 5, upsample_residual=(False,) * 4, upsample_factor=(1,) * 4,
    timestep_conditioning=False, patch_size=1, patch_size_t=1, encoder_causal=True, decoder_causal=False,
)
# LTX-Video's scheduler_config.json
SCHEDULER = dict(num_train_timesteps=1000, shift=1.0, use_dynamic_shifting=True, base_shift=0.95, max_shift=2.05,
                 base_image_seq_len=1024, max_image_seq_len=4096, shift_terminal=0.1)


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``LTXPipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import (AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXPipeline,
                           LTXVideoTransformer3DModel)
    from transformers import T5TokenizerFast

    tokenizer = T5TokenizerFast.from_pretrained(str(write_t5_tokenizer(folder / "tokenizer")))
    with seeded_torch(seed):
        transformer = LTXVideoTransformer3DModel(**TRANSFORMER)
        vae = AutoencoderKLLTXVideo(**VAE)
        text_encoder = t5_encoder(folder / "tokenizer")
    return save(LTXPipeline(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=vae, text_encoder=text_encoder,
                            tokenizer=tokenizer, transformer=transformer), folder)
