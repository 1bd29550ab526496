"""PixArt-Sigma: a T5 text encoder and a PixArtTransformer2DModel (DiT with adaLN-single) that
predicts noise and its variance, AutoencoderKL."""
from __future__ import annotations

from .conditional import ConditionalRecipe

#: Why MindSpore cannot compile PixArt's transformer here: mindone calls Tensor.repeat_interleave
#: (its attention mask), which graph mode compiles to the RepeatInterleaveInt primitive
#: (xrand.mindspore_cpu: Tensor-method stand-ins act in PyNative only).
REPEAT_INTERLEAVE_ON_CPU = ("MindSpore 2.10 compiles Tensor.repeat_interleave in mindone's transformer to the "
                            "RepeatInterleaveInt primitive, which has no CPU kernel")


class PixArtSigmaRecipe(ConditionalRecipe):
    """Text to image. Resolution binning (on by default) snaps the size to PixArt's aspect-ratio
    bins, which exist for transformers of sample size 32 to 256 only: a smaller model runs with
    the call option ``use_resolution_binning=false``."""

    pipeline = "PixArtSigmaPipeline"
    denoiser = "transformer"
    denoiser_classes = ("PixArtTransformer2DModel",)
    components = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")
    inputs = ("prompt", "negative_prompt", "guidance_scale", "height", "width")
    takes_eta = True
    pynative_only = REPEAT_INTERLEAVE_ON_CPU
