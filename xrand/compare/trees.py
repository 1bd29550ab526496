"""One walker over nested values: a denoiser call's inputs and outputs as captured, converted and fed.

A denoiser takes tensors nested in tuples, lists and dicts (SDXL's ``added_cond_kwargs``) and
returns tuples or diffusers' ``BaseOutput`` (an ordered dict). Recording, lockstep, layers and
dumps read and rebuild such values through :func:`map_leaves` and :func:`leaves` alone.
A tensor is captured as a :class:`Captured` (its exact values and dtype name), so the other
framework gets the very tensor the reference pipeline built (:func:`restore`).
"""
from __future__ import annotations

import weakref
from collections import namedtuple
from typing import Any, Callable, Dict, List, Mapping, Tuple

import numpy as np

#: A captured tensor: its values (bfloat16 held as float32) and its dtype's name.
Captured = namedtuple("Captured", "array dtype")

PLAIN = (type(None), bool, int, float, str)


def map_leaves(fn: Callable[[Any], Any], value: Any) -> Any:
    """``value`` rebuilt with every leaf ``x`` replaced by ``fn(x)``: tuples, lists, dicts,
    namedtuples and mappings (diffusers' ``BaseOutput``) are walked, everything else is a leaf."""
    if isinstance(value, Captured):
        return fn(value)
    if isinstance(value, Mapping):
        items = {k: map_leaves(fn, v) for k, v in value.items()}
        return items if type(value) is dict else type(value)(**items)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(map_leaves(fn, v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(map_leaves(fn, v) for v in value)
    return fn(value)


def leaves(value: Any) -> List[Any]:
    """The leaves of ``value`` in the order :func:`map_leaves` visits them."""
    found: List[Any] = []

    def keep(leaf: Any) -> Any:
        found.append(leaf)
        return leaf  # the value rebuilt as it was: a torch.Size takes only ints

    map_leaves(keep, value)
    return found


def named_leaves(value: Any, prefix: str = "") -> List[Tuple[str, Any]]:
    """``(path, leaf)`` pairs: ``"0"``, ``"encoder_hidden_states"``, ``"added_cond_kwargs.text_embeds"``."""
    if isinstance(value, Captured) or not isinstance(value, (Mapping, list, tuple)):
        return [(prefix, value)]
    items = value.items() if isinstance(value, Mapping) else enumerate(value)
    out: List[Tuple[str, Any]] = []
    for key, item in items:
        out += named_leaves(item, f"{prefix}.{key}" if prefix else str(key))
    return out


def arrays(value: Any) -> List[np.ndarray]:
    """The captured tensors' values in ``value``, in order."""
    return [leaf.array for leaf in leaves(value) if isinstance(leaf, Captured)]


def convertible(value: Any) -> bool:
    """Whether every leaf can go to another framework: captured tensors and plain values."""
    return all(isinstance(leaf, (Captured, np.ndarray, np.generic) + PLAIN) for leaf in leaves(value))


class Capture:
    """Framework tensors -> :class:`Captured` copies, made once per tensor version (a tensor passed
    on to the next call, or to ten calls, is copied and kept once)."""

    def __init__(self, fw: Any) -> None:
        self.fw = fw
        self._seen: Dict[int, Tuple[Any, Any, Any, str]] = {}

    def tensor(self, t: Any) -> Captured:
        version = getattr(t, "_version", None)  # torch counts in-place changes; MindSpore has no such count
        hit = self._seen.get(id(t))
        if hit is not None and hit[0]() is t and hit[1] == version:
            array = hit[2]()
            if array is not None:
                return Captured(array, hit[3])
        captured = Captured(*self.fw.capture(t))
        # weakly: neither the tensor nor its copy is kept alive here (a record written to files lets
        # them go); the tensor's own reference check keeps a reused id from matching
        self._seen[id(t)] = (_weak(t), version, _weak(captured.array), captured.dtype)
        return captured

    def __call__(self, value: Any) -> Any:
        return map_leaves(lambda v: self.tensor(v) if self.fw.is_tensor(v) else v, value)

    def forget(self) -> None:
        self._seen.clear()


def _weak(value: Any) -> Callable[[], Any]:
    """A weak reference to ``value``, or a strong one where it cannot be weakly referred to."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


def restore(value: Any, fw: Any, device: Any = None, float_dtype: Any = None) -> Any:
    """``value`` with every captured tensor made a tensor of framework ``fw`` in its own dtype, and
    every NumPy array one in its dtype, or in ``float_dtype`` (a name) for floating ones when given."""
    def leaf(v: Any) -> Any:
        if isinstance(v, Captured):
            return fw.tensor(v.array, v.dtype, device)
        if isinstance(v, (np.ndarray, np.generic)):
            a = np.asarray(v)
            floating = np.issubdtype(a.dtype, np.floating)
            return fw.tensor(a, float_dtype if floating and float_dtype else None, device)
        return v

    return map_leaves(leaf, value)
