"""Unconditional UNet2DModel pipelines: DDIM and DDPM."""
from __future__ import annotations

from .base import Recipe

# Both libraries' DDIMPipeline and DDPMPipeline end with ``image.numpy()`` on the model's dtype,
# which bfloat16 cannot do (diffusers pipelines/ddim/pipeline_ddim.py; mindone's the same): in
# bfloat16 the generic loop runs them (the same calls: randn, the UNet, step; decode in float32).
_NUMPY_DTYPES = ("float32", "float16")


class DDIMRecipe(Recipe):
    pipeline = "DDIMPipeline"
    native_schedulers = ("DDIMScheduler",)
    takes_eta = True
    library_dtypes = _NUMPY_DTYPES


class DDPMRecipe(Recipe):
    pipeline = "DDPMPipeline"
    native_schedulers = ("DDPMScheduler",)
    library_dtypes = _NUMPY_DTYPES
