"""Stable Diffusion 3: two CLIP text encoders and a T5, an SD3Transformer2DModel (MMDiT) on
flow matching, AutoencoderKL with a shift factor."""
from __future__ import annotations

from .. import schedulers
from .conditional import ConditionalRecipe, uses_dynamic_shifting, vae_scale_factor

#: Why MindSpore cannot compile the flow transformers here (SD3, Flux, Wan): mindone's blocks
#: split tensors with Tensor.chunk, which graph mode compiles to the Chunk primitive, and
#: MindSpore 2.10 has no CPU kernel for it (xrand.mindspore_cpu: Tensor-method stand-ins act in
#: PyNative only).
CHUNK_ON_CPU = ("MindSpore 2.10 compiles Tensor.chunk in mindone's transformer blocks to the Chunk primitive, "
                "which has no CPU kernel")


class StableDiffusion3Recipe(ConditionalRecipe):
    """Text to image. ``prompt_2`` / ``prompt_3`` go to the second CLIP and to T5 (the first prompt
    when not given); a folder without T5 (``text_encoder_3`` null) runs with zeros in its place."""

    pipeline = "StableDiffusion3Pipeline"
    denoiser = "transformer"
    denoiser_classes = ("SD3Transformer2DModel",)
    components = ("transformer", "vae", "text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "scheduler")
    optional_components = ("text_encoder_3", "tokenizer_3", "image_encoder", "feature_extractor")
    scheduler_kind = schedulers.FLOW
    inputs = ("prompt", "prompt_2", "prompt_3", "negative_prompt", "negative_prompt_2", "negative_prompt_3",
              "guidance_scale", "height", "width")
    pynative_only = CHUNK_ON_CPU

    def size_multiple_of(self, folder):
        # the pipeline's check_inputs: height and width divisible by vae_scale_factor * patch_size
        return vae_scale_factor(folder) * folder.config("transformer").get("patch_size", 2)

    def timestep_arguments(self, config):
        # pipeline_stable_diffusion_3.py: mu goes to set_timesteps with dynamic shifting
        return ("mu",) if uses_dynamic_shifting(config) else ()
