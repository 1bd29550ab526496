"""Wan 2.1 text to video: a UMT5 text encoder, a WanTransformer3DModel on flow matching over 5-D
latents (batch, channels, frames, height, width), and the causal 3-D AutoencoderKLWan."""
from __future__ import annotations

from ...checks import UsageError
from .conditional import TextToVideoRecipe
from .stable_diffusion_3 import CHUNK_ON_CPU


class WanRecipe(TextToVideoRecipe):
    """Text to video: ``frames`` must be 4k + 1 for a VAE that compresses time 4x. Wan 2.2's
    two-transformer folders (``transformer_2``) are not taken: lockstep feeds one denoiser."""

    pipeline = "WanPipeline"
    denoiser_classes = ("WanTransformer3DModel",)
    size_multiple = 16  # pipeline_wan.py check_inputs
    pynative_only = CHUNK_ON_CPU

    def check(self, settings, folder):
        super().check(settings, folder)
        # AutoencoderKLWan compresses time 2x per True in temperal_downsample (its config's spelling)
        factor = 2 ** sum(bool(d) for d in folder.config("vae").get("temperal_downsample", (False, True, True)))
        if settings.frames is not None and (settings.frames - 1) % factor:
            nearest = factor * ((settings.frames - 1) // factor) + 1
            raise UsageError(f"--frames must be {factor}k + 1 for this {self.pipeline} (its VAE compresses time "
                             f"{factor}x), got {settings.frames}; e.g. {nearest}")
