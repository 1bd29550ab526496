"""What the prompted pipelines share: their library call runs every scheduler as given, and
takes a prompt and a count of images per prompt."""
from __future__ import annotations

from typing import Any, Mapping

from .. import schedulers
from .base import Recipe


class ConditionalRecipe(Recipe):
    """A pipeline conditioned on a prompt (and images). Its library call sets the scheduler's
    timesteps, scales the model input and calls the scheduler's own ``step``, so it runs any
    scheduler of its kind as given (never the generic loop)."""

    native_schedulers = None
    batch_argument = "num_images_per_prompt"
    required_inputs = ("prompt",)


class TextToVideoRecipe(ConditionalRecipe):
    """A prompt to a video: a transformer on flow matching over 5-D latents, ``frames`` as the
    call's ``num_frames``, ``num_videos_per_prompt`` videos; the output is (batch, frames,
    height, width, 3)."""

    denoiser = "transformer"
    components = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")
    scheduler_kind = schedulers.FLOW
    batch_argument = "num_videos_per_prompt"
    inputs = ("prompt", "negative_prompt", "guidance_scale", "height", "width", "frames")


def vae_scale_factor(folder: Any) -> int:
    """How many pixels one latent holds per side, from the folder's AutoencoderKL config
    (diffusers' pipelines: ``2 ** (len(vae.config.block_out_channels) - 1)``)."""
    return 2 ** (len(folder.config("vae").get("block_out_channels", (0,) * 4)) - 1)


def uses_dynamic_shifting(config: Mapping[str, Any]) -> bool:
    return bool(config.get("use_dynamic_shifting"))
