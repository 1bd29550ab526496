"""Stable Diffusion pipelines: CLIP text encoder, UNet2DConditionModel, AutoencoderKL, guidance."""
from __future__ import annotations

from .base import Recipe


class StableDiffusionRecipe(Recipe):
    """Text to image. The library pipeline runs every scheduler as given (``scale_model_input``
    and the scheduler's own ``step``), so it always runs."""

    pipeline = "StableDiffusionPipeline"
    denoiser_classes = ("UNet2DConditionModel",)
    components = ("unet", "vae", "text_encoder", "tokenizer", "scheduler")
    optional_components = ("safety_checker", "feature_extractor", "image_encoder")
    native_schedulers = None
    inputs = ("prompt", "negative_prompt", "guidance_scale", "height", "width")
    required_inputs = ("prompt",)
    load_arguments = {"safety_checker": None, "feature_extractor": None, "requires_safety_checker": False}

    def call_arguments(self, settings, generator):
        given = settings.given_inputs()
        return dict(given, num_images_per_prompt=settings.batch_size, num_inference_steps=settings.steps,
                    generator=generator, eta=settings.eta, output_type="np")
