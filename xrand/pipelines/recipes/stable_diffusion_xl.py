"""Stable Diffusion XL pipelines: two CLIP text encoders, a UNet2DConditionModel with added
conditioning (the pooled text embedding and time ids), AutoencoderKL; text to image, image to
image, inpainting, ControlNet."""
from __future__ import annotations

from .base import Recipe
from .conditional import ConditionalRecipe

_PROMPTS = ("prompt", "prompt_2", "negative_prompt", "negative_prompt_2", "guidance_scale")


class StableDiffusionXLRecipe(ConditionalRecipe):
    """Text to image. ``prompt_2`` goes to the second text encoder (the first prompt when not given)."""

    pipeline = "StableDiffusionXLPipeline"
    denoiser_classes = ("UNet2DConditionModel",)
    components = ("unet", "vae", "text_encoder_2", "tokenizer_2", "scheduler")
    # a refiner folder has no first text encoder
    optional_components = ("text_encoder", "tokenizer", "image_encoder", "feature_extractor")
    inputs = _PROMPTS + ("height", "width")
    takes_eta = True
    # the invisible watermark is applied only where its package is installed: off on both sides
    load_arguments = {"add_watermarker": False}


class StableDiffusionXLImg2ImgRecipe(StableDiffusionXLRecipe):
    """Image to image (and the refiner): the input image's VAE sample noised to ``strength``."""

    pipeline = "StableDiffusionXLImg2ImgPipeline"
    inputs = _PROMPTS + ("image", "strength")
    required_inputs = ("prompt", "image")


class StableDiffusionXLInpaintRecipe(StableDiffusionXLRecipe):
    """Inpainting where the mask is white, with a 9- or a 4-channel UNet."""

    pipeline = "StableDiffusionXLInpaintPipeline"
    inputs = _PROMPTS + ("height", "width", "image", "mask", "strength")
    required_inputs = ("prompt", "image", "mask")


class StableDiffusionXLControlNetRecipe(StableDiffusionXLRecipe):
    """Text to image guided by a ControlNet (its residuals go into the UNet's call, as in
    Stable Diffusion's); the control image is the call's ``image``."""

    pipeline = "StableDiffusionXLControlNetPipeline"
    components = StableDiffusionXLRecipe.components + ("controlnet",)
    inputs = _PROMPTS + ("height", "width", "control_image")
    required_inputs = ("prompt", "control_image")
    call_names = {**Recipe.call_names, "control_image": "image"}
