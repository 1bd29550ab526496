"""How much torch differs from itself: the noise floor a torch-vs-MindSpore difference is judged by.

A difference between frameworks means little without a scale. The floor is measured in the same
run under a perturbation that is numerically legitimate: the same torch computation in a wider
dtype (float64) against the dtype being compared (float32). The functions take a callable
"run the torch side in this dtype", so any pipeline, scheduler or single denoiser call fits.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import numpy as np

from ..checks import UsageError
from ..generator import Generator

FLOOR_DTYPES = ("float16", "bfloat16", "float32", "float64")


def noise_floor(run: Callable[[str], Any], dtype: str = "float32", reference: str = "float64",
                baseline: Optional[Any] = None, what: str = "the output") -> Dict[str, Any]:
    """``{"rel_l2", "max_abs", "how"}``: ``run(dtype)`` against ``run(reference)``.

    ``run`` returns an array (or a list of arrays) for a dtype name; ``baseline`` is the result of
    ``run(dtype)`` when the caller already has it (then ``run`` is called once).
    """
    from .compare import metrics

    for name, value in (("dtype", dtype), ("reference", reference)):
        if value not in FLOOR_DTYPES:
            raise UsageError(f"noise floor {name} {value!r} is not a floating dtype; accepted: {', '.join(FLOOR_DTYPES)}")
    if dtype == reference:
        raise UsageError(f"noise floor needs two different dtypes, got {dtype!r} twice")
    low = run(dtype) if baseline is None else baseline
    high = run(reference)
    m = metrics(_flat(high), _flat(low))
    return {"rel_l2": m["rel_l2"], "max_abs": m["max_abs"],
            "how": f"torch {dtype} vs torch {reference} on {what}, same inputs and noise"}


def _flat(value: Any) -> np.ndarray:
    if isinstance(value, (list, tuple)):
        return np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in value])
    return np.asarray(value, dtype=np.float64).ravel()


class DrawsIn(Generator):
    """An xrand Generator that draws in ``dtype`` whatever dtype is asked, then casts.

    A float64 run of a pipeline must see the float32 run's noise (cast up), not a float64 draw:
    torch-cpu's float64 normals are other numbers, not wider copies of the float32 ones.
    """

    def __init__(self, seed: int, stream: str, dtype: str) -> None:
        super().__init__(seed, stream=stream)
        self._draw_dtype = dtype

    def _draw(self, shape, dtype):
        return super()._draw(shape, self._draw_dtype).astype(dtype)


def widened_torch():
    """A torch function mode turning every narrow float dtype requested into float64.

    The float64 reference must be float64 throughout: diffusers pins some computations to
    float32 whatever the weights (get_timestep_embedding in models/embeddings.py builds its
    frequencies with ``dtype=torch.float32`` and calls ``.float()``), so a float64 copy of the
    model alone would leave them, and their rounding, out of the floor.
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

    return Widened()
