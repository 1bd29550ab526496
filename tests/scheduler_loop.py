"""Helpers for tests: the digits UNet in both libraries and one generic denoising loop."""
import inspect
import json
import os

import numpy as np
import pytest

import xrand

DIGITS = os.path.join(os.path.dirname(xrand.__file__), "models", "digits")


def library(framework):
    """diffusers, or mindone.diffusers' schedulers module (mindone 0.5.0's top-level package
    misses TCDScheduler: it is in its TYPE_CHECKING imports but not in _import_structure)."""
    if framework == "torch":
        return pytest.importorskip("diffusers")
    pytest.importorskip("mindspore")
    return pytest.importorskip("mindone.diffusers.schedulers")


def digits_unets():
    """The digits UNet2DModel in diffusers and in mindone (the CPU fallbacks must be installed)."""
    import diffusers
    import mindone.diffusers

    return {"torch": diffusers.UNet2DModel.from_pretrained(DIGITS, subfolder="unet").eval(),
            "mindspore": mindone.diffusers.UNet2DModel.from_pretrained(DIGITS, subfolder="unet")}


def scheduler(framework, name, **options):
    with open(os.path.join(DIGITS, "scheduler", "scheduler_config.json")) as f:
        return getattr(library(framework), name).from_config(json.load(f), **options)


def generic_loop(framework, unet, scheduler, seed, steps=6, **step_options):
    """Initial noise x init_noise_sigma, scale_model_input, the UNet, the scheduler's own step
    (with the generator where it takes one); the final sample as a NumPy array."""
    import torch

    generator = xrand.Generator(seed)
    scheduler.set_timesteps(steps)
    with xrand.use_backend(framework):
        x = xrand.randn_tensor((1, 1, 16, 16), generator=generator) * scheduler.init_noise_sigma
    if "generator" in inspect.signature(scheduler.step).parameters:
        step_options["generator"] = generator
    for t in scheduler.timesteps:
        model_input = scheduler.scale_model_input(x, t)
        if framework == "torch":
            with torch.no_grad():
                out = unet(model_input, t).sample
        else:
            out = unet(model_input, t)[0]
        x = scheduler.step(out, t, x, return_dict=False, **step_options)[0]
    return x.numpy() if framework == "torch" else x.asnumpy()


def rel_l2(expected, actual):
    return float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))
