"""How much torch differs from itself: the noise floor a torch-vs-MindSpore difference is judged by.

A difference between frameworks means little without a scale. The floor is measured in the same
run under a perturbation that is numerically legitimate: the same torch computation in a wider
dtype (float64) against the dtype being compared (float32). :func:`noise_floor` takes a callable
"run the torch side in this dtype", so any pipeline, scheduler or single denoiser call fits;
:func:`pipeline_floor` is a loaded torch side's.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

import numpy as np

from ..cache import cache_dir, installed_version, key_of, source_digest
from ..checks import UsageError
from ..files import write_json
from ..frameworks.torch import widened
from .metrics import flat, rel_l2
from .plan import Plan
from .sides import CountingGenerator, Loaded, run

FLOOR_DTYPES = ("float16", "bfloat16", "float32", "float64")


def noise_floor(run_in: Callable[[str], Any], dtype: str = "float32", reference: str = "float64",
                baseline: Optional[Any] = None, what: str = "the output") -> Dict[str, Any]:
    """``{"rel_l2", "max_abs", "how"}``: ``run_in(dtype)`` against ``run_in(reference)``.

    ``run_in`` returns an array (or a list of arrays) for a dtype name; ``baseline`` is the result
    of ``run_in(dtype)`` when the caller already has it (then ``run_in`` is called once).
    """
    for name, value in (("dtype", dtype), ("reference", reference)):
        if value not in FLOOR_DTYPES:
            raise UsageError(f"noise floor {name} {value!r} is not a floating dtype; accepted: {', '.join(FLOOR_DTYPES)}")
    if dtype == reference:
        raise UsageError(f"noise floor needs two different dtypes, got {dtype!r} twice")
    low = run_in(dtype) if baseline is None else baseline
    high = run_in(reference)
    wide, narrow = _flat(high), _flat(low)
    if wide.shape != narrow.shape:  # a bug in ``run_in``, not the user's input
        raise RuntimeError(f"the {dtype} and {reference} runs differ in size: {narrow.size} vs {wide.size} values")
    return {"rel_l2": rel_l2(wide, narrow), "max_abs": float(np.max(np.abs(wide - narrow))) if wide.size else 0.0,
            "how": f"torch {dtype} vs torch {reference} on {what}, same inputs and noise"}


def _flat(value: Any) -> np.ndarray:
    return flat(value if isinstance(value, (list, tuple)) else [value])


class DrawsIn(CountingGenerator):
    """The run's generator for a float64 run: what the pipeline asks in float64 is drawn in
    ``dtype`` (the compared run's dtype), then cast; every other request is drawn as asked.

    A float64 run of a pipeline must see the float32 run's noise (cast up), not a float64 draw:
    torch-cpu's float64 normals are other numbers, not wider copies of the float32 ones. Draws
    that are float32 in both runs (the Brownian tree's, xrand.brownian) stay as they are, and
    every draw is made outside :func:`xrand.frameworks.torch.widened_torch`.
    """

    def __init__(self, seed: int, stream: str, dtype: str) -> None:
        super().__init__(seed, stream=stream)
        self._draw_dtype = dtype

    def _draw(self, shape, dtype):
        import torch

        # Outside widened_torch: a stream drawing with torch (torch-cpu) asks for its dtype,
        # which the mode would widen into other numbers.
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.float32)
        try:
            with torch._C.DisableTorchFunction():
                if str(dtype) != "float64":
                    return super()._draw(shape, dtype)
                return super()._draw(shape, self._draw_dtype).astype(np.float64)
        finally:
            torch.set_default_dtype(previous)


def pipeline_floor(loaded: Loaded, plan: Plan, images: np.ndarray, keep: bool = True) -> Dict[str, Any]:
    """:func:`noise_floor` of a loaded torch side: its ``images`` (the plan's dtype) against the
    same run (:func:`.sides.run`, any recipe and scheduler) in float64, the noise drawn as in the
    plan's dtype and cast up. Each submodule is float64 only while it runs (:func:`widened`): the
    stage holds the weights once, not a float64 copy of them.

    ``keep``: the floor is kept in xrand's cache (:func:`kept_floor`) and read from there by a later
    run of the same plan whose ``images`` are the same bits; its ``kept`` names the file."""
    settings = plan.settings

    def run64(dtype: str) -> np.ndarray:
        generator = DrawsIn(settings.seed, settings.stream, settings.dtype)
        with widened(loaded.pipe.components.values()):
            return run(loaded, plan, generator=generator).images

    def measure() -> Dict[str, Any]:
        return noise_floor(run64, settings.dtype, "float64", baseline=images,
                           what=f"the final images of {plan.pipeline} with {plan.scheduler.cls} (--steps {settings.steps})")

    return kept_floor(plan, images, measure) if keep else measure()


FLOORS = "torch-floors"  # the cache's subfolder (xrand.cache)


def kept_floor(plan: Plan, images: np.ndarray, measure: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
    """``measure()``, kept in ``$XRAND_CACHE_DIR/torch-floors/PLAN-IMAGES.json`` and read from there
    by later runs of the same key: the plan's identity (configs, weights, settings, seed, noise),
    torch's device, the versions of xrand (and its source), torch, diffusers and transformers
    (PLAN, :func:`floor_kept`), and the compared run's ``images`` bit for bit (IMAGES: the float64
    run starts from the same inputs and noise). The floor says where it is kept (``kept``); where
    the cache cannot be written it is measured and not kept."""
    import hashlib
    import json

    plan_parts = _plan_parts(plan)
    parts = {**plan_parts, "images": hashlib.sha256(np.ascontiguousarray(images).tobytes()).hexdigest()}
    path = os.path.join(cache_dir(FLOORS), f"{key_of(plan_parts)}-{key_of(parts)}.json")
    try:
        with open(path) as f:
            saved = json.load(f)
        if saved["key"] == json.loads(json.dumps(parts)):
            return saved["floor"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not kept yet, or unreadable: measured again
    floor = measure()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_json(path, {"key": parts, "floor": {**floor, "kept": path}})
    except OSError:
        return floor
    return {**floor, "kept": path}


def floor_kept(plan: Plan) -> bool:
    """Whether a floor of ``plan`` is kept (:func:`kept_floor`), asked before torch's run: the
    images, the rest of its key, come out the same bits each time the plan runs on one machine (a
    run whose images differ measures its floor anyway)."""
    start = key_of(_plan_parts(plan)) + "-"
    try:
        return any(name.startswith(start) for name in os.listdir(cache_dir(FLOORS)))
    except OSError:
        return False


def _plan_parts(plan: Plan) -> Dict[str, Any]:
    return {"plan": plan.identity(), "torch_device": plan.devices.get("torch"), **_versions()}


def _versions() -> Dict[str, Optional[str]]:
    from .._version import __version__

    return {"xrand": __version__, "xrand_source": source_digest(),
            **{name: installed_version(name) for name in ("torch", "diffusers", "transformers")}}
