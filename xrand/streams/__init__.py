"""Noise streams: framework-free generators of standard normal numbers, by name.

``pcg64``      NumPy PCG64, float64 draw then cast (mindone.diffusers' noise).
``torch-cpu``  torch's CPU generator (mt19937 + torch's normal kernels), bit for bit.
``torch-cuda`` torch's CUDA generator (Philox4x32-10 with torch's launch geometry).
"""
from __future__ import annotations

import importlib
from typing import Callable, Dict, List, Type, Union

from ..checks import UsageError, UsageTypeError
from .base import DTYPES, Stream

# name -> "module:Class" (imported on first use) or a Stream subclass registered at run time
_STREAMS: Dict[str, Union[str, Type[Stream], Callable[..., Stream]]] = {
    "torch-cpu": "xrand.streams.torch_cpu:TorchCPUStream",
    "torch-cuda": "xrand.streams.torch_cuda:TorchCUDAStream",
    "pcg64": "xrand.streams.pcg64:PCG64Stream",
}

DEFAULT_STREAM = "torch-cpu"


def register_stream(name: str, factory: Union[Type[Stream], Callable[..., Stream]]) -> None:
    """Add a stream: ``factory(seed, **options)`` must return a :class:`Stream`."""
    if not isinstance(name, str) or not name:
        raise UsageTypeError(f"stream name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise UsageTypeError(f"stream factory for {name!r} must be callable, got {factory!r}")
    _STREAMS[name] = factory


def stream_names() -> List[str]:
    return sorted(_STREAMS)


def stream_factory(name: str) -> Callable[..., Stream]:
    """The class (or factory) of stream ``name``; ``UsageError`` naming the known ones."""
    try:
        entry = _STREAMS[name]
    except (KeyError, TypeError):
        raise UsageError(f"unknown stream {name!r}; known streams: {', '.join(stream_names())}") from None
    if isinstance(entry, str):
        module, _, attr = entry.partition(":")
        entry = getattr(importlib.import_module(module), attr)
        _STREAMS[name] = entry
    return entry


def make_stream(name: str, seed: int, **options) -> Stream:
    return stream_factory(name)(seed, **options)


__all__ = ["DTYPES", "DEFAULT_STREAM", "Stream", "make_stream", "register_stream", "stream_factory", "stream_names"]
