"""Pipelines as recipes: what differs from one pipeline class to the next, and nothing else.

Loading both sides with the same weights, patching, recording every scheduler step, lockstep,
fingerprints and side files are written once (:mod:`.sides`, :mod:`.compare`). A recipe says:

- ``pipeline``: the class name, the same in diffusers and mindone.diffusers;
- ``components``: the model folder's subfolders it needs (an error names a missing one);
- ``native_schedulers``: schedulers the library's own pipeline runs as given (None: any). With
  another scheduler the side runs :func:`denoising_loop` instead, because both libraries'
  ``DDIMPipeline`` turn any scheduler into DDIM and ``DDPMPipeline`` skips ``init_noise_sigma``
  and ``scale_model_input``;
- ``call_arguments``: the keyword arguments of the library pipeline's call;
- ``conditioning`` / ``unet_inputs`` / ``guide``: the denoiser, for the loop and for lockstep.

Adding a pipeline (img2img, SDXL...) is one subclass here and one entry in ``RECIPES``.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..checks import UsageError


class Recipe:
    """The unconditional UNet2DModel pipelines' recipe; subclasses override what differs."""

    pipeline: str = ""
    components: Tuple[str, ...] = ("unet", "scheduler")
    native_schedulers: Optional[Tuple[str, ...]] = ()
    load_arguments: Dict[str, Any] = {}

    def check(self, settings) -> None:
        """Refuse settings this pipeline cannot run (before any work)."""

    def runs_library_pipeline(self, scheduler: str) -> bool:
        return self.native_schedulers is None or scheduler in self.native_schedulers

    def call_arguments(self, settings, generator) -> Dict[str, Any]:
        """Keyword arguments for the library pipeline's ``__call__`` (``return_dict=False`` is added)."""
        return dict(batch_size=settings.batch_size, generator=generator, num_inference_steps=settings.steps,
                    output_type="np")

    def latent_shape(self, pipe, settings) -> Tuple[int, ...]:
        unet = pipe.unet.config
        size = unet.sample_size if isinstance(unet.sample_size, (tuple, list)) else (unet.sample_size,) * 2
        return (settings.batch_size, unet.in_channels, *size)

    def conditioning(self, fw, pipe, settings) -> Any:
        """What the denoiser needs besides the sample, computed once per run (prompt embeddings)."""
        return None

    def unet_inputs(self, fw, pipe, sample, timestep, cond, settings) -> Tuple[tuple, Dict[str, Any]]:
        """The UNet's arguments for a sample already through ``scale_model_input``."""
        return (sample, timestep), {"return_dict": False}

    def guide(self, fw, output, settings) -> Any:
        """The UNet's output -> the model output the scheduler steps with."""
        return output

    def denoise(self, fw, pipe, sample, timestep, cond, settings) -> Any:
        args, kwargs = self.unet_inputs(fw, pipe, sample, timestep, cond, settings)
        return self.guide(fw, pipe.unet(*args, **kwargs)[0], settings)

    def decode(self, fw, pipe, latents) -> np.ndarray:
        """Final latents -> images in [0, 1], NHWC (as the library pipeline's ``output_type="np"``)."""
        return np.clip(fw.to_numpy(latents) / 2 + 0.5, 0, 1).transpose(0, 2, 3, 1)


class DDIMRecipe(Recipe):
    pipeline = "DDIMPipeline"
    native_schedulers = ("DDIMScheduler",)

    def call_arguments(self, settings, generator):
        return dict(super().call_arguments(settings, generator), eta=settings.eta)


class DDPMRecipe(Recipe):
    pipeline = "DDPMPipeline"
    native_schedulers = ("DDPMScheduler",)


class StableDiffusionRecipe(Recipe):
    """Text to image: CLIP tokenizer and text encoder, UNet2DConditionModel, AutoencoderKL, guidance."""

    pipeline = "StableDiffusionPipeline"
    components = ("unet", "vae", "text_encoder", "tokenizer", "scheduler")
    native_schedulers = None  # the pipeline steps any scheduler with scale_model_input and its own step
    load_arguments = {"safety_checker": None, "feature_extractor": None, "requires_safety_checker": False}

    def check(self, settings):
        if settings.prompt is None:
            raise UsageError(f"{self.pipeline} is text to image: give it a prompt (--prompt TEXT, "
                             "Settings(prompt=...))")

    def call_arguments(self, settings, generator):
        return dict(prompt=settings.prompt, negative_prompt=settings.negative_prompt,
                    guidance_scale=settings.guidance_scale, height=settings.height, width=settings.width,
                    num_images_per_prompt=settings.batch_size, num_inference_steps=settings.steps,
                    generator=generator, eta=settings.eta, output_type="np")

    def latent_shape(self, pipe, settings):
        scale = pipe.vae_scale_factor
        size = pipe.unet.config.sample_size
        height = settings.height or size * scale
        width = settings.width or size * scale
        return (settings.batch_size, pipe.unet.config.in_channels, height // scale, width // scale)

    def _guided(self, settings) -> bool:
        return settings.guidance_scale > 1

    def conditioning(self, fw, pipe, settings):
        args = (settings.prompt,) + (() if fw.name == "mindspore" else (fw.model_device(pipe),))
        positive, negative = pipe.encode_prompt(*args, settings.batch_size, self._guided(settings),
                                                settings.negative_prompt)
        return fw.cat([negative, positive]) if self._guided(settings) else positive

    def unet_inputs(self, fw, pipe, sample, timestep, cond, settings):
        if self._guided(settings):
            sample = fw.cat([sample, sample])
        return (sample, timestep), {"encoder_hidden_states": cond, "return_dict": False}

    def guide(self, fw, output, settings):
        if not self._guided(settings):
            return output
        uncond, text = fw.chunk2(output)
        return uncond + settings.guidance_scale * (text - uncond)


#: pipeline class name -> its recipe.
RECIPES: Dict[str, Recipe] = {r.pipeline: r for r in (DDIMRecipe(), DDPMRecipe(), StableDiffusionRecipe())}
PIPELINES: Tuple[str, ...] = tuple(RECIPES)


def recipe(pipeline: str) -> Recipe:
    found = RECIPES.get(pipeline)
    if found is None:
        raise UsageError(f"unknown pipeline {pipeline!r}; accepted: {', '.join(PIPELINES)}")
    return found


def step_arguments(scheduler, generator, settings, step_options: Dict[str, Any], timesteps, index: int
                   ) -> Dict[str, Any]:
    """``scheduler.step``'s keyword arguments at step ``index``, as the library pipelines pass them:
    the generator and ``eta`` where its signature takes them, UnCLIP's ``prev_timestep`` (as
    UnCLIPPipeline does), then the user's step options."""
    import inspect

    params = inspect.signature(type(scheduler).step).parameters  # the class method: a recorder may wrap it
    kwargs: Dict[str, Any] = {}
    if "generator" in params:
        kwargs["generator"] = generator
    if "eta" in params:
        kwargs["eta"] = settings.eta
    if "prev_timestep" in params:
        kwargs["prev_timestep"] = timesteps[index + 1] if index + 1 < len(timesteps) else None
    kwargs.update(step_options)
    return kwargs


def denoising_loop(fw, pipe, recipe_: Recipe, settings, generator, step_options: Dict[str, Any]) -> np.ndarray:
    """The one generic loop, driven with a framework's own components: initial noise x
    ``init_noise_sigma``, ``scale_model_input``, the denoiser, the scheduler's own ``step``."""
    scheduler = pipe.scheduler
    scheduler.set_timesteps(settings.steps)
    cond = recipe_.conditioning(fw, pipe, settings)
    dtype = fw.dtype(settings.dtype)
    latents = fw.randn(recipe_.latent_shape(pipe, settings), generator, dtype, fw.model_device(pipe))
    latents = latents * scheduler.init_noise_sigma
    timesteps = scheduler.timesteps
    for i, t in enumerate(timesteps):
        model_input = scheduler.scale_model_input(latents, t)
        output = recipe_.denoise(fw, pipe, model_input, t, cond, settings)
        kwargs = step_arguments(scheduler, generator, settings, step_options, timesteps, i)
        latents = scheduler.step(output, t, latents, **kwargs, return_dict=False)[0]
    return recipe_.decode(fw, pipe, latents)
