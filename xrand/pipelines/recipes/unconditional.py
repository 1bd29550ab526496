"""Unconditional UNet2DModel pipelines: DDIM and DDPM."""
from __future__ import annotations

from .base import Recipe


class DDIMRecipe(Recipe):
    pipeline = "DDIMPipeline"
    native_schedulers = ("DDIMScheduler",)

    def call_arguments(self, settings, generator):
        return dict(super().call_arguments(settings, generator), eta=settings.eta)


class DDPMRecipe(Recipe):
    pipeline = "DDPMPipeline"
    native_schedulers = ("DDPMScheduler",)
