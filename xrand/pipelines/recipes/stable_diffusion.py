"""Stable Diffusion 1.x/2.x pipelines: CLIP text encoder, UNet2DConditionModel, AutoencoderKL,
guidance; text to image, image to image, inpainting, ControlNet."""
from __future__ import annotations

from typing import Any, Optional

from .base import Recipe
from .conditional import ConditionalRecipe

#: Where each component's weights are in a Stable Diffusion 1.x single file (the original layout,
#: e.g. v1-5-pruned-emaonly.safetensors), as both libraries' ``from_single_file`` read it.
UNET_PREFIX = "model.diffusion_model."
VAE_PREFIX = "first_stage_model."
TEXT_ENCODER_PREFIX = "cond_stage_model.transformer."


class StableDiffusionRecipe(ConditionalRecipe):
    """Text to image. The library pipeline runs every scheduler as given (``scale_model_input``
    and the scheduler's own ``step``), so it always runs. Loads from a Stable Diffusion 1.x
    single file too."""

    pipeline = "StableDiffusionPipeline"
    denoiser_classes = ("UNet2DConditionModel",)
    components = ("unet", "vae", "text_encoder", "tokenizer", "scheduler")
    optional_components = ("safety_checker", "feature_extractor", "image_encoder")
    inputs = ("prompt", "negative_prompt", "guidance_scale", "height", "width")
    takes_eta = True
    load_arguments = {"safety_checker": None, "feature_extractor": None, "requires_safety_checker": False}

    loads_single_file = True

    def check_single_file(self, folder: Any) -> Optional[str]:
        """A single file of every component in the original layout, whose UNet takes the
        config's input channels at its width and cross-attends at its width (an SD 2 or SDXL
        file, or another config, is refused here rather than half-loaded)."""
        return check_ldm_file(folder, ((UNET_PREFIX, "UNet"), (VAE_PREFIX, "VAE"),
                                       (TEXT_ENCODER_PREFIX, "CLIP text encoder")), "Stable Diffusion 1.x",
                              "v1-5-pruned-emaonly.safetensors")


def check_ldm_file(folder: Any, parts: Any, family: str, example: str) -> Optional[str]:
    """Why a single file in the original layout does not fit the config folder: a part's tensors
    missing (``parts``: (prefix, what) pairs), a UNet of other input channels or width, or of
    another cross-attention width than the config's (None: it fits)."""
    shapes = folder.file_shapes
    for prefix, part in parts:
        if not any(name.startswith(prefix) for name in shapes):
            return (f"it holds no {prefix}* tensors (a {part} in the original {family} layout, "
                    f"as {example} holds them)")
    unet = folder.config("unet")
    conv_in = shapes.get(UNET_PREFIX + "input_blocks.0.0.weight", ())[:2]
    want = (unet.get("block_out_channels", [None])[0], unet.get("in_channels"))
    if conv_in != want:
        return f"its UNet's first convolution is {conv_in} (out, in channels), the config's unet {want}"
    keys = sorted(n for n in shapes if n.startswith(UNET_PREFIX) and n.endswith("attn2.to_k.weight"))
    width = unet.get("cross_attention_dim")
    if keys and shapes[keys[0]][1:] != (width,):
        return f"its UNet cross-attends at width {shapes[keys[0]][1]}, the config's unet at {width}"
    return None


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


class StableDiffusionControlNetRecipe(StableDiffusionRecipe):
    """Text to image guided by a ControlNet (``controlnet``): its call on the sample and the
    control image gives the UNet residuals (``down_block_additional_residuals``,
    ``mid_block_additional_residual``), so lockstep and layers see them at the UNet's call. The
    control image is the call's ``image``; ``controlnet_conditioning_scale``, ``guess_mode`` and
    ``control_guidance_start``/``end`` are call options."""

    pipeline = "StableDiffusionControlNetPipeline"
    components = StableDiffusionRecipe.components + ("controlnet",)
    inputs = StableDiffusionRecipe.inputs + ("control_image",)
    required_inputs = ("prompt", "control_image")
    call_names = {**Recipe.call_names, "control_image": "image"}
    check_single_file = Recipe.check_single_file  # a Stable Diffusion file holds no ControlNet
    loads_single_file = False
