"""What the prompted pipelines share: their library call runs every scheduler as given, and
takes a prompt and a count of images per prompt."""
from __future__ import annotations

from typing import Any, Mapping

from .base import Recipe


class ConditionalRecipe(Recipe):
    """A pipeline conditioned on a prompt (and images). Its library call sets the scheduler's
    timesteps, scales the model input and calls the scheduler's own ``step``, so it runs any
    scheduler of its kind as given (never the generic loop)."""

    native_schedulers = None
    batch_argument = "num_images_per_prompt"
    required_inputs = ("prompt",)


def vae_scale_factor(folder: Any) -> int:
    """How many pixels one latent holds per side, from the folder's AutoencoderKL config
    (diffusers' pipelines: ``2 ** (len(vae.config.block_out_channels) - 1)``)."""
    return 2 ** (len(folder.config("vae").get("block_out_channels", (0,) * 4)) - 1)


def uses_dynamic_shifting(config: Mapping[str, Any]) -> bool:
    return bool(config.get("use_dynamic_shifting"))
