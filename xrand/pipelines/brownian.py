"""Give a scheduler's Brownian-tree noise to an ``xrand.Generator``, in diffusers and mindone alike.

``DPMSolverSDEScheduler`` and ``CosineDPMSolverMultistepScheduler`` (both libraries) build a
``BrownianTreeNoiseSampler`` inside ``step`` whenever their ``noise_sampler`` is None (after every
``set_timesteps``), seeded from torch's or NumPy's global RNG (diffusers' Cosine: from
``generator.initial_seed()``; mindone's Cosine ignores the generator; DPMSolverSDE's ``step`` takes
no generator at all). :func:`use_xrand_brownian` wraps the instance's ``step`` so that such a
sampler is, instead, an :class:`xrand.brownian.BrownianNoiseSampler` drawing from the given
generator, returning the framework's tensors. Both sides then get bit-identical Brownian noise
and no global random state is read or changed.

    scheduler = DPMSolverSDEScheduler.from_config(config)
    use_xrand_brownian(scheduler, xrand.Generator(seed))        # once; survives set_timesteps
    ... scheduler.step(model_output, t, sample) ...

Schedulers without a ``noise_sampler`` are left alone (the function returns False), so a run
can call it on whatever scheduler it holds.
"""
from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Optional, Sequence, Union

from ..brownian import DEFAULT_TOL, BrownianNoiseSampler
from ..checks import UsageError, UsageTypeError, dtype_name
from ..generator import Generator
from ..registry import backend

_ORIGINAL_STEP = "_xrand_original_step"


def uses_brownian_noise(scheduler: Any) -> bool:
    """Whether ``scheduler`` draws its noise through a Brownian-tree ``noise_sampler``.

    Cosine's ``noise_sampler`` attribute appears only with ``set_timesteps``; its module (like
    DPMSolverSDE's) imports ``BrownianTreeNoiseSampler``.
    """
    module = sys.modules.get(type(scheduler).__module__)
    return hasattr(scheduler, "step") and (
        hasattr(scheduler, "noise_sampler") or hasattr(module, "BrownianTreeNoiseSampler"))


def framework_of(scheduler: Any) -> str:
    """"mindspore" for a mindone.diffusers scheduler, "torch" for a diffusers one."""
    module = type(scheduler).__module__
    if module.startswith("mindone."):
        return "mindspore"
    if module.startswith("diffusers."):
        return "torch"
    raise UsageError(f"cannot tell the framework of {type(scheduler).__name__} (module {module}); "
                     "pass framework='torch' or 'mindspore'")


class XrandNoiseSampler:
    """A ``BrownianTreeNoiseSampler`` stand-in: ``sampler(sigma, sigma_next)`` as a framework tensor."""

    def __init__(self, sampler: BrownianNoiseSampler, framework: str, dtype: str, device: Any = None) -> None:
        self.sampler = sampler
        self.framework = framework
        self.dtype = dtype
        self.device = device

    def __call__(self, sigma: Any, sigma_next: Any) -> Any:
        noise = self.sampler(sigma, sigma_next)
        return backend(self.framework).from_numpy(noise, self.dtype, self.device)


def use_xrand_brownian(scheduler: Any, generator: Union[Generator, Sequence[Generator], None] = None,
                       framework: Optional[str] = None, tol: float = DEFAULT_TOL) -> bool:
    """Make ``scheduler``'s Brownian noise come from ``generator``; returns whether it has such noise.

    ``generator``: an ``xrand.Generator``, a list of them (one per batch item), or None for a
    fresh ``xrand.Generator()`` seeded from OS entropy (never from a global RNG).
    ``framework``: "torch" or "mindspore"; by default taken from the scheduler's library.
    Calling it again replaces the generator; the sampler is rebuilt after each ``set_timesteps``,
    continuing the generator's stream.
    """
    if not uses_brownian_noise(scheduler):
        return False
    if generator is None:
        generator = Generator()
    items = generator if isinstance(generator, (list, tuple)) else [generator]
    if not items or not all(isinstance(g, Generator) for g in items):
        raise UsageTypeError(f"use_xrand_brownian needs an xrand.Generator or a list of them, got {generator!r}")
    framework = framework_of(scheduler) if framework is None else framework
    if framework not in ("torch", "mindspore"):
        raise UsageError(f"framework must be 'torch' or 'mindspore', got {framework!r}")

    step = scheduler.__dict__.get(_ORIGINAL_STEP) or scheduler.step
    signature = inspect.signature(step)

    @functools.wraps(step)
    def step_with_xrand_noise(*args, **kwargs):
        if getattr(scheduler, "noise_sampler", None) is None:
            sample = signature.bind(*args, **kwargs).arguments["sample"]
            device = getattr(sample, "device", None) if framework == "torch" else None
            dtype = dtype_name(sample.dtype)
            array_dtype = "float32" if dtype == "bfloat16" else dtype  # NumPy has no bfloat16
            sampler = BrownianNoiseSampler(tuple(sample.shape), generator, array_dtype, tol)
            scheduler.noise_sampler = XrandNoiseSampler(sampler, framework, dtype, device)
        return step(*args, **kwargs)

    setattr(scheduler, _ORIGINAL_STEP, step)
    scheduler.step = step_with_xrand_noise
    scheduler.noise_sampler = None  # a sampler built before this call is not ours
    return True
