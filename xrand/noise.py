"""``randn_tensor`` and ``manual_seed``: the one entry point for noise on every backend.

``randn_tensor`` only dispatches: an ``xrand.Generator`` draws its stream and the active
backend makes the tensor; any other generator goes to the backend that draws it natively (the
active one first, then every loaded one, as einops finds a tensor's backend); ``None`` goes to
the active backend's global random state.
"""
from __future__ import annotations

import random
from typing import Any, Dict, Sequence, Tuple

import numpy as np

from .checks import (UsageError, UsageTypeError, check_fits_memory, check_generator_list, check_seed,
                     check_shape, dtype_name)
from . import registry
from .backends import Backend
from .generator import Generator
from .registry import backend, get_backend, loaded_backends, usable_backend

# (active backend, generator type) -> the backend that draws it, valid for one registry generation
_owners: Dict[Tuple[str, type], Backend] = {}
_owners_generation = -1


def manual_seed(seed: int) -> None:
    """Seed Python's global RNG and that of every backend whose framework is already imported.

    NumPy's legacy global RNG and xrand's global NumPy generator (``generator=None`` on the
    numpy and mindspore backends) are always seeded; frameworks that are not imported yet are
    left alone and not imported, like ``accelerate.utils.set_seed`` without the import.
    """
    seed = check_seed(seed)
    random.seed(seed)
    for b in loaded_backends():
        b.manual_seed(seed)


def randn_tensor(
    shape: Sequence[int],
    generator: Any = None,
    device: Any = None,
    dtype: Any = None,
    layout: Any = None,
) -> Any:
    """Standard normal noise of ``shape`` as a tensor, like diffusers' ``randn_tensor``.

    - ``xrand.Generator`` (or a list): the generator's stream, on the active backend;
      ``dtype=None`` means float32.
    - ``torch.Generator`` (or a list): exactly ``diffusers.utils.torch_utils.randn_tensor``,
      a torch tensor whatever the active backend.
    - ``numpy.random.Generator`` (or a list): exactly mindone.diffusers' ``randn_tensor``
      (a float64 draw, then cast; ``dtype=None`` stays float64), on the active backend.
    - ``None``: the active backend's global random state.

    A list holds one generator per batch item (``shape[0]``); each draws a ``(1, ...)`` tensor.
    """
    shape = check_shape(shape)
    if isinstance(generator, (list, tuple)):
        generator = check_generator_list(generator, shape)
        if len(generator) == 1:
            generator = generator[0]
    first = generator[0] if isinstance(generator, list) else generator

    if isinstance(first, Generator):
        target = usable_backend()
        _check_layout(target, layout)
        name = dtype_name(dtype)
        check_fits_memory(shape, name)
        if isinstance(generator, list):
            item = (1,) + shape[1:]
            array = np.concatenate([g._draw(item, name) for g in generator], axis=0)
        else:
            array = generator._draw(shape, name)
        return target.from_numpy(array, name, device)

    if first is None:
        target = usable_backend()
        name = None if dtype is None else dtype_name(dtype)
        if layout is None:
            return target.randn(shape, name, device)
        _check_layout(target, layout)
        return target.randn(shape, name, device, layout)

    target = _native_backend(first)
    if layout is None:
        return target.randn_native(shape, generator, device, dtype)
    _check_layout(target, layout)
    return target.randn_native(shape, generator, device, dtype, layout)


def _native_backend(generator: Any) -> Backend:
    """The backend that draws ``generator`` natively: the active one if it can, else a loaded one."""
    global _owners_generation
    key = (get_backend(), type(generator))
    if _owners_generation != registry.generation:
        _owners.clear()
        _owners_generation = registry.generation
    owner = _owners.get(key)
    if owner is None:
        owner = _owners[key] = _find_native_backend(generator)
    return owner


def _find_native_backend(generator: Any) -> Backend:
    active = backend()
    if active.is_native_generator(generator) and (active.loaded() or usable_backend(active.name)):
        return active
    for b in loaded_backends():
        if b.is_native_generator(generator):
            return b
    raise UsageTypeError(
        f"generator must be an xrand.Generator, a numpy.random.Generator, a torch.Generator, "
        f"a list of one of those, or None; got {generator!r} ({type(generator).__name__})"
    )


def _check_layout(target, layout: Any) -> None:
    if layout is not None and not target.layouts:
        raise UsageError(f"layout={layout!r} is only accepted by the torch backend, not {target.name!r}; pass None")
