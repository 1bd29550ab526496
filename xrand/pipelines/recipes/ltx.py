"""LTX-Video text to video: a T5 text encoder, an LTXVideoTransformer3DModel on flow matching over
latents drawn 5-D and packed into tokens, and the AutoencoderKLLTXVideo."""
from __future__ import annotations

from .conditional import TextToVideoRecipe


class LTXRecipe(TextToVideoRecipe):
    """Text to video: the VAE keeps (frames - 1) / its temporal compression + 1 latent frames."""

    pipeline = "LTXPipeline"
    denoiser_classes = ("LTXVideoTransformer3DModel",)
    size_multiple = 32  # pipeline_ltx.py check_inputs
    # measured with mindone 0.5.0 (models/transformers/transformer_ltx.py, LTXVideoRotaryPosEmbed)
    pynative_only = ("MindSpore 2.10's graph mode refuses mindone's LTX rotary embedding (PowScalarTensor with an "
                     "int64 exponent in theta ** linspace), which then calls Tensor.repeat_interleave, compiled to the "
                     "RepeatInterleaveInt primitive that has no CPU kernel")

    def timestep_arguments(self, config):
        # pipeline_ltx.py passes its own sigmas and mu
        return ("sigmas", "mu")
