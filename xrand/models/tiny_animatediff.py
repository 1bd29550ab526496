"""A tiny random-weight AnimateDiff folder (``AnimateDiffPipeline``), built offline.

The tiny Stable Diffusion folder's components (:mod:`.tiny_sd`: a UNet2DConditionModel 32/64
wide, its VAE, CLIP text encoder and tokenizer) with a MotionAdapter of the same widths (1
motion layer of 1 temporal attention per block, 8 groups), which the pipeline merges into a
UNetMotionModel, and AnimateDiff's DDIMScheduler (linear betas, clip_sample off).

A tiny run: ``height=32, width=32, num_frames=4``. Noise: one draw of (batch, 4, frames, 16, 16);
DDIM at eta 0 draws none.
"""
from __future__ import annotations

from pathlib import Path

from .folders import PathLike, new_model_folder, save, seeded_torch
from .tiny_sd import IMAGE_SIZE, UNET, components

NUM_FRAMES = 4
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, num_frames=NUM_FRAMES)

MOTION_ADAPTER = dict(block_out_channels=UNET["block_out_channels"], motion_layers_per_block=UNET["layers_per_block"],
                      motion_norm_num_groups=8, motion_num_attention_heads=2, motion_max_seq_length=8)
# guoyww/animatediff's DDIMScheduler settings (its scheduler_config.json)
SCHEDULER = dict(beta_start=0.00085, beta_end=0.012, beta_schedule="linear", clip_sample=False,
                 timestep_spacing="linspace", steps_offset=1)


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``AnimateDiffPipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import AnimateDiffPipeline, DDIMScheduler, MotionAdapter

    parts = components(folder, seed)
    with seeded_torch(seed + 1):
        motion_adapter = MotionAdapter(**MOTION_ADAPTER)
    return save(AnimateDiffPipeline(vae=parts["vae"], text_encoder=parts["text_encoder"], tokenizer=parts["tokenizer"],
                                    unet=parts["unet"], motion_adapter=motion_adapter,
                                    scheduler=DDIMScheduler(**SCHEDULER)), folder)
