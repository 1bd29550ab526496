"""How much torch differs from itself: the noise floor a torch-vs-MindSpore difference is judged by.

A difference between frameworks means little without a scale. The floor is measured in the same
run under a perturbation that is numerically legitimate: the same torch computation in a wider
dtype (float64) against the dtype being compared (float32). The functions take a callable
"run the torch side in this dtype", so any pipeline, scheduler or single denoiser call fits.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, Iterable, Iterator, Optional

import numpy as np

from ..checks import UsageError
from .sides import CountingGenerator

FLOOR_DTYPES = ("float16", "bfloat16", "float32", "float64")


def noise_floor(run: Callable[[str], Any], dtype: str = "float32", reference: str = "float64",
                baseline: Optional[Any] = None, what: str = "the output") -> Dict[str, Any]:
    """``{"rel_l2", "max_abs", "how"}``: ``run(dtype)`` against ``run(reference)``.

    ``run`` returns an array (or a list of arrays) for a dtype name; ``baseline`` is the result of
    ``run(dtype)`` when the caller already has it (then ``run`` is called once).
    """
    for name, value in (("dtype", dtype), ("reference", reference)):
        if value not in FLOOR_DTYPES:
            raise UsageError(f"noise floor {name} {value!r} is not a floating dtype; accepted: {', '.join(FLOOR_DTYPES)}")
    if dtype == reference:
        raise UsageError(f"noise floor needs two different dtypes, got {dtype!r} twice")
    low = run(dtype) if baseline is None else baseline
    high = run(reference)
    wide, narrow = _flat(high), _flat(low)
    if wide.shape != narrow.shape:  # a bug in ``run``, not the user's input
        raise RuntimeError(f"the {dtype} and {reference} runs differ in size: {narrow.size} vs {wide.size} values")
    diff = wide - narrow
    norm = float(np.linalg.norm(wide))
    rel_l2 = float(np.linalg.norm(diff)) / norm if norm > 0 else float(np.linalg.norm(diff))
    return {"rel_l2": rel_l2, "max_abs": float(np.max(np.abs(diff))) if diff.size else 0.0,
            "how": f"torch {dtype} vs torch {reference} on {what}, same inputs and noise"}


def _flat(value: Any) -> np.ndarray:
    if isinstance(value, (list, tuple)):
        return np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in value])
    return np.asarray(value, dtype=np.float64).ravel()


class DrawsIn(CountingGenerator):
    """The run's generator for a float64 run: what the pipeline asks in float64 is drawn in
    ``dtype`` (the compared run's dtype), then cast; every other request is drawn as asked.

    A float64 run of a pipeline must see the float32 run's noise (cast up), not a float64 draw:
    torch-cpu's float64 normals are other numbers, not wider copies of the float32 ones. Draws
    that are float32 in both runs (the Brownian tree's, xrand.brownian) stay as they are, and
    every draw is made outside :func:`widened_torch`.
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


@contextlib.contextmanager
def widened(modules: Iterable[Any]) -> Iterator[None]:
    """The torch modules among ``modules`` in float64, and :func:`widened_torch`, inside the block.

    Every floating parameter and buffer is cast in place and back to its own dtype afterwards
    (float32 or float16 -> float64 -> back is exact), so a loaded pipeline is measured without
    loading it again. Anything that is not a ``torch.nn.Module`` (a scheduler, a tokenizer) is
    left alone.
    """
    import torch

    tensors = [t for m in modules if isinstance(m, torch.nn.Module)
               for t in list(m.parameters()) + list(m.buffers()) if t.is_floating_point()]
    dtypes = [t.dtype for t in tensors]
    try:
        with torch.no_grad():
            for t in tensors:
                t.data = t.data.to(torch.float64)
        with widened_torch():
            yield
    finally:
        with torch.no_grad():
            for t, dtype in zip(tensors, dtypes):
                t.data = t.data.to(dtype)


@contextlib.contextmanager
def widened_torch() -> Iterator[None]:
    """Inside the block, torch's default dtype is float64 and a torch function mode turns every
    narrow float dtype requested into float64.

    The float64 reference must be float64 throughout: diffusers pins some computations to
    float32 whatever the weights (get_timestep_embedding in models/embeddings.py builds its
    frequencies with ``dtype=torch.float32`` and calls ``.float()``), so a float64 copy of the
    model alone would leave them, and their rounding, out of the floor. The default dtype
    covers tensors made without one (transformers' CLIP builds its causal mask with
    ``torch.full(..., torch.finfo(dtype).min)``, which overflows a float32 default).
    """
    import torch
    from torch.overrides import TorchFunctionMode

    narrow = (torch.float32, torch.float16, torch.bfloat16)
    to_double = {torch.Tensor.float: torch.Tensor.double, torch.Tensor.half: torch.Tensor.double,
                 torch.Tensor.bfloat16: torch.Tensor.double}

    def widen(value):
        if isinstance(value, torch.dtype) and value in narrow:
            return torch.float64
        if isinstance(value, (list, tuple)) and any(isinstance(v, torch.dtype) for v in value):
            return type(value)(widen(v) for v in value)
        return value

    class Widened(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            func = to_double.get(func, func)
            args = tuple(widen(a) for a in args)
            kwargs = {k: widen(v) for k, v in (kwargs or {}).items()}
            return func(*args, **kwargs)

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with Widened():
            yield
    finally:
        torch.set_default_dtype(previous)
