"""Tiny random-weight CogVideoX folders (``CogVideoXPipeline`` and ``CogVideoXImageToVideoPipeline``),
built offline.

Components: a CogVideoXTransformer3DModel (1 block, 2 heads of 16 (the rotary embedding splits a head 4:6:6 over time, height, width), patch 2, 3-D rotary position
embedding as CogVideoX-5b has), the tiny folders' T5 encoder (64 wide) with a T5 tokenizer, an
AutoencoderKLCogVideoX (4 blocks 8 wide, 4 latent channels, 8x spatial and 4x temporal
downsampling) and CogVideoX-2b's CogVideoXDDIMScheduler (v-prediction, zero terminal SNR,
``snr_shift_scale`` 3, trailing timesteps). The image-to-video transformer takes 8 channels
(the noise and the image's VAE latents, followed by zeros) and learned position embeddings, as
CogVideoX-5b-I2V does.

A tiny run: ``height=32, width=32, num_frames=5, max_sequence_length=16`` (5 frames are 2 latent
frames). Noise: one draw of (batch, 2, 4, 4, 4) (CogVideoX's latents are (batch, frames,
channels, height, width)); image to video draws the image's VAE sample too; CogVideoXDPMScheduler
draws one or two more per step, CogVideoXDDIMScheduler none.
"""
from __future__ import annotations

from pathlib import Path

from .folders import T5_WIDTH, PathLike, new_model_folder, save, seeded_torch, t5_encoder
from .tokenizers import write_t5_tokenizer

IMAGE_SIZE = 32
NUM_FRAMES = 5
MAX_SEQUENCE_LENGTH = 16
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, num_frames=NUM_FRAMES, max_sequence_length=MAX_SEQUENCE_LENGTH)

TRANSFORMER = dict(
    num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=4, time_embed_dim=8,
    text_embed_dim=T5_WIDTH, num_layers=1, sample_width=IMAGE_SIZE // 8, sample_height=IMAGE_SIZE // 8,
    sample_frames=NUM_FRAMES, patch_size=2, temporal_compression_ratio=4, max_text_seq_length=MAX_SEQUENCE_LENGTH,
    use_rotary_positional_embeddings=True,
)
I2V_TRANSFORMER = dict(TRANSFORMER, in_channels=8, use_learned_positional_embeddings=True)
VAE = dict(
    in_channels=3, out_channels=3, down_block_types=("CogVideoXDownBlock3D",) * 4,
    up_block_types=("CogVideoXUpBlock3D",) * 4, block_out_channels=(8, 8, 8, 8), latent_channels=4,
    layers_per_block=1, norm_num_groups=2, temporal_compression_ratio=4,
)
# CogVideoX-2b's scheduler_config.json
SCHEDULER = dict(beta_end=0.012, beta_schedule="scaled_linear", beta_start=0.00085, clip_sample=False,
                 clip_sample_range=1.0, num_train_timesteps=1000, prediction_type="v_prediction",
                 rescale_betas_zero_snr=True, sample_max_value=1.0, set_alpha_to_one=True, snr_shift_scale=3.0,
                 steps_offset=0, timestep_spacing="trailing")


def _build(folder: PathLike, seed: int, pipeline: str, transformer_config: dict) -> Path:
    folder, seed = new_model_folder(folder, seed)
    import diffusers
    from diffusers import AutoencoderKLCogVideoX, CogVideoXDDIMScheduler, CogVideoXTransformer3DModel
    from transformers import T5TokenizerFast

    tokenizer = T5TokenizerFast.from_pretrained(str(write_t5_tokenizer(folder / "tokenizer")))
    with seeded_torch(seed):
        transformer = CogVideoXTransformer3DModel(**transformer_config)
        vae = AutoencoderKLCogVideoX(**VAE)
        text_encoder = t5_encoder(folder / "tokenizer")
    return save(getattr(diffusers, pipeline)(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae,
                                             transformer=transformer,
                                             scheduler=CogVideoXDDIMScheduler(**SCHEDULER)), folder)


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``CogVideoXPipeline`` folder (safetensors) and return its path."""
    return _build(folder, seed, "CogVideoXPipeline", TRANSFORMER)


def build_i2v(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``CogVideoXImageToVideoPipeline`` folder (safetensors) and return its path."""
    return _build(folder, seed, "CogVideoXImageToVideoPipeline", I2V_TRANSFORMER)
