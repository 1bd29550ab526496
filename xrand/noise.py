"""``randn_tensor`` and ``manual_seed``: the one entry point for noise on every backend."""
from __future__ import annotations

import random
import sys
import threading
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from .checks import check_fits_memory, check_seed, check_shape, dtype_name
from .generator import Generator
from .registry import backend, backend_names, usable_backend

_global_lock = threading.Lock()
_global_generator: Optional[np.random.Generator] = None

AnyGenerator = Union[None, Generator, np.random.Generator, Any]


def global_numpy_generator() -> np.random.Generator:
    """The generator behind ``generator=None`` on the numpy and mindspore backends.

    Unseeded it draws fresh entropy, like mindone's ``np.random.default_rng()``;
    :func:`manual_seed` makes it reproducible (mindone's ``ms.set_seed`` does not).
    """
    global _global_generator
    with _global_lock:
        if _global_generator is None:
            _global_generator = np.random.default_rng()
        return _global_generator


def manual_seed(seed: int) -> None:
    """Seed Python's and NumPy's global RNGs and those of every framework already imported.

    Frameworks that are not imported yet are left alone (and not imported), like
    ``accelerate.utils.set_seed`` without the import.
    """
    global _global_generator
    seed = check_seed(seed)
    random.seed(seed)
    # np.random.seed takes 32-bit seeds; larger ones go in as two 32-bit words.
    np.random.seed(seed if seed < 2**32 else [seed & 0xFFFFFFFF, seed >> 32])
    with _global_lock:
        _global_generator = np.random.Generator(np.random.PCG64(seed))
    for name in backend_names():
        b = backend(name)
        if b.module and b.loaded():
            b.manual_seed(seed)


def _kind(generator: Any) -> str:
    if isinstance(generator, Generator):
        return "xrand"
    if isinstance(generator, np.random.Generator):
        return "numpy"
    if backend("torch").is_native_generator(generator):
        return "torch"
    raise TypeError(
        f"generator must be an xrand.Generator, a numpy.random.Generator, a torch.Generator, "
        f"a list of one of those, or None; got {generator!r} ({type(generator).__name__})"
    )


def randn_tensor(
    shape: Sequence[int],
    generator: Union[AnyGenerator, Sequence[AnyGenerator]] = None,
    device: Any = None,
    dtype: Any = None,
    layout: Any = None,
) -> Any:
    """Standard normal noise of ``shape`` as a tensor, like diffusers' ``randn_tensor``.

    - ``torch.Generator`` (or a list): exactly ``diffusers.utils.torch_utils.randn_tensor``,
      a torch tensor whatever the active backend.
    - ``numpy.random.Generator`` (or a list): exactly mindone.diffusers' ``randn_tensor``
      (a float64 draw, then cast; ``dtype=None`` stays float64), on the active backend.
    - ``xrand.Generator`` (or a list): the generator's stream, on the active backend;
      ``dtype=None`` means float32.
    - ``None``: the active backend's global random state.

    A list holds one generator per batch item (``shape[0]``); each draws a ``(1, ...)`` tensor.
    """
    shape = check_shape(shape)
    torch = sys.modules.get("torch")  # a torch.Generator implies torch is imported
    if torch is not None and isinstance(generator, torch.Generator):  # the call diffusers pipelines make
        return _torch_randn(shape, generator, device, dtype, layout)
    generators = None
    if isinstance(generator, (list, tuple)):
        if not generator:
            raise ValueError("generator list is empty; pass one generator or one per batch item")
        kinds = {_kind(g) for g in generator}
        if len(kinds) > 1:
            raise TypeError(f"generator list mixes kinds {sorted(kinds)}; use generators of one kind")
        if len(generator) == 1:
            generator = generator[0]
        else:
            if not shape or len(generator) != shape[0]:
                batch = shape[0] if shape else "no batch dimension"
                raise ValueError(
                    f"got {len(generator)} generators for a batch of {batch} (shape {shape}); "
                    "pass one generator or exactly one per batch item"
                )
            generators = list(generator)
    first = generators[0] if generators else generator
    kind = None if first is None else _kind(first)

    if kind == "torch":
        return _torch_randn(shape, generators or generator, device, dtype, layout)

    target = usable_backend()
    if layout is not None and target.name != "torch":
        raise ValueError(f"layout={layout!r} is only accepted by the torch backend, not {target.name!r}; pass None")
    if kind is None:
        return target.randn(shape, None if dtype is None else dtype_name(dtype), device, layout)

    name = dtype_name(dtype, default="float64" if kind == "numpy" else "float32")
    check_fits_memory(shape, name)
    if generators is None:
        array = generator.standard_normal(shape) if kind == "numpy" else generator._draw(shape, name)
    else:
        item_shape = (1,) + shape[1:]
        if kind == "numpy":
            draws = [g.standard_normal(item_shape) for g in generators]
        else:
            draws = [g._draw(item_shape, name) for g in generators]
        array = np.concatenate(draws, axis=0)
    return target.from_numpy(array, name, device)


def _torch_randn(shape: Tuple[int, ...], generator: Any, device: Any, dtype: Any, layout: Any) -> Any:
    """torch.Generator(s): diffusers' randn_tensor, on the torch backend whatever the active one."""
    torch_backend = backend("torch")  # usable: a torch.Generator means torch is imported
    if dtype is not None and not _is_torch_dtype(dtype):
        dtype = torch_backend.dtype(dtype_name(dtype))
    return torch_backend.randn_native(shape, generator, device=device, dtype=dtype, layout=layout)


def _is_torch_dtype(dtype: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(dtype, torch.dtype)
