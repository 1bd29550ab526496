"""Stable Diffusion XL pipelines: two CLIP text encoders, a UNet2DConditionModel with added
conditioning (the pooled text embedding and time ids), AutoencoderKL; text to image, image to
image, inpainting, ControlNet."""
from __future__ import annotations

from typing import Any, Optional

from .base import Recipe
from .conditional import ConditionalRecipe
from .stable_diffusion import UNET_PREFIX, VAE_PREFIX, check_ldm_file

#: Where SDXL's text encoders are in its single file (the original SGM layout, e.g.
#: sd_xl_base_1.0.safetensors): CLIP-L in transformers' names, OpenCLIP bigG in OpenCLIP's; the
#: UNet and VAE where Stable Diffusion 1.x has them.
SDXL_TEXT_ENCODER_PREFIX = "conditioner.embedders.0.transformer."
SDXL_TEXT_ENCODER_2_PREFIX = "conditioner.embedders.1.model."

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

    loads_single_file = True

    def check_single_file(self, folder: Any) -> Optional[str]:
        """A single file of every component in the original SDXL layout that fits the configs
        (as Stable Diffusion's), whose two text encoders are as wide as the configs' and of two
        widths: both libraries' ``from_single_file`` tell CLIP-L from OpenCLIP bigG by the width
        of its position embedding alone, so text encoders of one width would load the first
        one's weights into the second (refused here)."""
        refusal = check_ldm_file(folder, ((UNET_PREFIX, "UNet"), (VAE_PREFIX, "VAE"),
                                          (SDXL_TEXT_ENCODER_PREFIX, "CLIP-L text encoder"),
                                          (SDXL_TEXT_ENCODER_2_PREFIX, "OpenCLIP text encoder")), "SDXL",
                                 "sd_xl_base_1.0.safetensors")
        if refusal:
            return refusal
        shapes, widths = folder.file_shapes, []
        position = "text_model.embeddings.position_embedding.weight"
        for part, key in (("text_encoder", SDXL_TEXT_ENCODER_PREFIX + position),
                          ("text_encoder_2", SDXL_TEXT_ENCODER_2_PREFIX + "positional_embedding")):
            width = (shapes.get(key) or (None,))[-1]
            want = folder.config(part).get("hidden_size") if part in folder.components() else None
            if width != want:
                return f"its {part} is {width} wide ({key}), the config's {want}"
            widths.append(width)
        if widths[0] == widths[1]:
            return (f"its two text encoders are both {widths[0]} wide: from_single_file tells them apart by width "
                    "alone (CLIP-L's 768, OpenCLIP bigG's 1280) and would load the first into both")
        return None


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
    check_single_file = Recipe.check_single_file  # an SDXL file holds no ControlNet
    loads_single_file = False
