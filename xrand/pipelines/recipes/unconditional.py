"""Unconditional UNet2DModel pipelines: DDIM and DDPM."""
from __future__ import annotations

from .base import Recipe


class DDIMRecipe(Recipe):
    pipeline = "DDIMPipeline"
    native_schedulers = ("DDIMScheduler",)
    takes_eta = True


class DDPMRecipe(Recipe):
    pipeline = "DDPMPipeline"
    native_schedulers = ("DDPMScheduler",)
