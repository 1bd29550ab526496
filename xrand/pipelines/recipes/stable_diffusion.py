"""Stable Diffusion 1.x/2.x pipelines: CLIP text encoder, UNet2DConditionModel, AutoencoderKL,
guidance; text to image, image to image, inpainting."""
from __future__ import annotations

from .conditional import ConditionalRecipe


class StableDiffusionRecipe(ConditionalRecipe):
    """Text to image. The library pipeline runs every scheduler as given (``scale_model_input``
    and the scheduler's own ``step``), so it always runs."""

    pipeline = "StableDiffusionPipeline"
    denoiser_classes = ("UNet2DConditionModel",)
    components = ("unet", "vae", "text_encoder", "tokenizer", "scheduler")
    optional_components = ("safety_checker", "feature_extractor", "image_encoder")
    inputs = ("prompt", "negative_prompt", "guidance_scale", "height", "width")
    takes_eta = True
    load_arguments = {"safety_checker": None, "feature_extractor": None, "requires_safety_checker": False}


class StableDiffusionImg2ImgRecipe(StableDiffusionRecipe):
    """Image to image: the input image's VAE sample, noised to ``strength`` by ``add_noise``, is
    where the steps start (two draws before the steps). Its size is the image's."""

    pipeline = "StableDiffusionImg2ImgPipeline"
    inputs = ("prompt", "negative_prompt", "guidance_scale", "image", "strength")
    required_inputs = ("prompt", "image")


class StableDiffusionInpaintRecipe(StableDiffusionRecipe):
    """Inpainting: repaint where the mask is white. A 9-channel UNet (an inpainting model) also
    takes the mask and the masked image's VAE sample; a 4-channel one has the unmasked part
    put back after every step."""

    pipeline = "StableDiffusionInpaintPipeline"
    inputs = ("prompt", "negative_prompt", "guidance_scale", "height", "width", "image", "mask", "strength")
    required_inputs = ("prompt", "image", "mask")
