"""The one generic denoising loop, for a recipe whose library pipeline cannot run the scheduler as given."""
from __future__ import annotations

import inspect
from typing import Any, Dict

import numpy as np


def step_arguments(scheduler: Any, generator: Any, eta: float, timesteps: Any, index: int) -> Dict[str, Any]:
    """``scheduler.step``'s keyword arguments at step ``index``, as the library pipelines pass them:
    the generator and ``eta`` where its signature takes them, and UnCLIP's ``prev_timestep`` (as
    UnCLIPPipeline does)."""
    params = inspect.signature(type(scheduler).step).parameters  # the class method: a recorder may wrap it
    kwargs: Dict[str, Any] = {}
    if "generator" in params:
        kwargs["generator"] = generator
    if "eta" in params:
        kwargs["eta"] = eta
    if "prev_timestep" in params:
        kwargs["prev_timestep"] = timesteps[index + 1] if index + 1 < len(timesteps) else None
    return kwargs


def denoising_loop(fw: Any, pipe: Any, recipe: Any, settings: Any, folder: Any, generator: Any) -> np.ndarray:
    """Initial noise x ``init_noise_sigma``, ``scale_model_input``, the denoiser, the scheduler's
    own ``step``, driven with framework ``fw``'s own components; returns the decoded images.
    (Flow-matching schedulers have neither ``init_noise_sigma`` nor ``scale_model_input``: their
    noise starts at sigma 1 and the denoiser takes the sample as it is.)"""
    scheduler = pipe.scheduler
    scheduler.set_timesteps(settings.steps)
    cond = recipe.conditioning(fw, pipe, settings)
    denoiser = recipe.denoiser_of(pipe)
    latents = fw.randn(recipe.latent_shape(settings, folder), generator, fw.dtype(settings.dtype),
                       fw.pipeline_device(pipe))
    latents = latents * getattr(scheduler, "init_noise_sigma", 1.0)
    scale = getattr(scheduler, "scale_model_input", lambda sample, t: sample)
    timesteps = scheduler.timesteps
    for i, t in enumerate(timesteps):
        model_input = scale(latents, t)
        args, kwargs = recipe.denoiser_call(model_input, t, cond, settings)
        output = denoiser(*args, **kwargs)[0]
        latents = scheduler.step(output, t, latents, **step_arguments(scheduler, generator, settings.eta,
                                                                      timesteps, i), return_dict=False)[0]
    return recipe.decode(fw, pipe, latents)
