"""FLUX.1 pipelines: CLIP and T5 text encoders, a FluxTransformer2DModel on flow matching over
latents packed 2x2 into tokens, with the guidance scale embedded; text to image, image to
image, Kontext (editing from an image), ControlNet."""
from __future__ import annotations

from .. import schedulers
from .conditional import ConditionalRecipe, vae_scale_factor
from .stable_diffusion_3 import CHUNK_ON_CPU

_PROMPTS = ("prompt", "prompt_2", "negative_prompt", "negative_prompt_2", "guidance_scale", "height", "width")


class FluxRecipe(ConditionalRecipe):
    """Text to image. ``guidance_scale`` goes into the transformer (no second pass); a negative
    prompt takes effect with the call option ``true_cfg_scale`` above 1."""

    pipeline = "FluxPipeline"
    denoiser = "transformer"
    denoiser_classes = ("FluxTransformer2DModel",)
    components = ("transformer", "vae", "text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "scheduler")
    optional_components = ("image_encoder", "feature_extractor")
    scheduler_kind = schedulers.FLOW
    inputs = _PROMPTS
    pynative_only = CHUNK_ON_CPU

    def check_single_file(self, folder):
        # diffusers 0.35.2 and mindone 0.5.0 both have FluxPipeline.from_single_file, but their
        # convert_flux_transformer_checkpoint_to_diffusers splits each single block's fused linear1
        # at inner_dim = 3072 (FLUX.1's width, hard-coded): no narrower Flux file converts, so no tiny
        # one can test the path offline, and xrand does not load what it has not checked
        return ("both libraries' single-file conversion of a Flux transformer (convert_flux_transformer_checkpoint_"
                "to_diffusers; Chroma's too) splits single blocks at FLUX.1's width 3072, hard-coded, so no tiny Flux "
                "file tests the path offline and xrand does not load one; give the model as a diffusers folder")

    def size_multiple_of(self, folder):
        # pipeline_flux.py: latents are packed 2x2, so a side is a multiple of vae_scale_factor * 2
        return vae_scale_factor(folder) * 2

    def timestep_arguments(self, config):
        # pipeline_flux.py passes its own sigmas (unless the scheduler makes flow sigmas) and mu
        return ("mu",) if config.get("use_flow_sigmas") else ("sigmas", "mu")


class FluxImg2ImgRecipe(FluxRecipe):
    """Image to image: the input image's VAE sample, packed, noised to ``strength``."""

    pipeline = "FluxImg2ImgPipeline"
    inputs = _PROMPTS + ("image", "strength")
    required_inputs = ("prompt", "image")


class FluxKontextRecipe(FluxRecipe):
    """FLUX.1 Kontext: the input image's VAE latents ride along as extra tokens (``image``
    optional: without it, text to image). It resizes the image to a preferred resolution
    unless the call option ``_auto_resize`` is false."""

    pipeline = "FluxKontextPipeline"
    inputs = _PROMPTS + ("image",)


class FluxControlNetRecipe(FluxRecipe):
    """Text to image guided by a FluxControlNetModel: the control image's VAE sample, packed (one
    more draw before the steps), goes into the ControlNet, whose block samples go into the
    transformer's call (``controlnet_block_samples``, ``controlnet_single_block_samples``)."""

    pipeline = "FluxControlNetPipeline"
    components = FluxRecipe.components + ("controlnet",)
    inputs = _PROMPTS + ("control_image",)
    required_inputs = ("prompt", "control_image")
