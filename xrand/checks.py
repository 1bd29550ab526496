"""Validation of user input shared by the public functions: every error names the value.

Every check raises :class:`UsageError` (a ``ValueError``), or :class:`UsageTypeError` (also a
``TypeError``) for a value of the wrong type, so callers and the command line can tell a
mistake in the input from a bug.
"""
from __future__ import annotations

import importlib.util
import math
import numbers
import operator
import os
import sys
from typing import Any, List, Mapping, Optional, Sequence, Tuple


class UsageError(ValueError):
    """Bad input: the message names the value and what is accepted."""


class UsageTypeError(UsageError, TypeError):
    """Bad input of the wrong type."""


def module_loaded(name: str) -> bool:
    """Whether module ``name`` is imported (``sys.modules[name] = None`` hides one, as tests do)."""
    return sys.modules.get(name) is not None


def loaded_modules(prefixes: Tuple[str, ...]) -> list:
    """The loaded modules whose names start with one of ``prefixes``, as (name, module) pairs.

    Walks the names only: a (name, module) tuple for each of the thousands of modules torch,
    MindSpore and transformers load would wake the garbage collector over their whole heaps
    (about 8 ms a call once both are loaded, against 0.7 ms)."""
    modules = sys.modules
    found = [(name, modules.get(name)) for name in list(modules) if name.startswith(prefixes)]
    return [(name, module) for name, module in found if module is not None]


_installed: dict = {}


def module_installed(name: str) -> bool:
    """Whether module ``name`` can be imported here, asked once per process (find_spec costs ~30 us)."""
    if module_loaded(name):
        return True
    if name in sys.modules:  # hidden
        return False
    if name not in _installed:
        _installed[name] = importlib.util.find_spec(name) is not None
    return _installed[name]

#: Largest number of elements one call may ask for (2**40 float32 values is 4 TiB).
MAX_NUMEL = 2**40

DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64")
_DTYPE_ALIASES = {
    "float16": "float16", "half": "float16", "fp16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "float": "float32", "fp32": "float32",
    "float64": "float64", "double": "float64", "fp64": "float64",
}


def check_choice(value: Any, accepted: Sequence[str], what: str) -> str:
    """``value`` if it is one of ``accepted``; else ``unknown WHAT 'value'; accepted: a, b``."""
    if value not in accepted:
        raise UsageError(f"unknown {what} {value!r}; accepted: {', '.join(accepted)}")
    return value


def check_seed(seed: Any, what: str = "seed") -> int:
    """An integer in [0, 2**64); bools and floats are refused rather than truncated."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise UsageTypeError(f"{what} must be an integer in [0, 2**64), got {seed!r} ({type(seed).__name__})")
    seed = int(seed)
    if seed < 0 or seed >= 2**64:
        raise UsageError(f"{what} must be an integer in [0, 2**64), got {seed}")
    return seed


def check_shape(shape: Any) -> Tuple[int, ...]:
    """A tuple of non-negative integers whose product stays below MAX_NUMEL."""
    if type(shape) is tuple:  # the usual call, kept cheap: randn_tensor runs this on every draw
        for dim in shape:
            if type(dim) is not int or dim < 0:
                break
        else:
            if math.prod(shape) <= MAX_NUMEL:
                return shape
    if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
        shape = (shape,)
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise UsageTypeError(f"shape must be a tuple or list of non-negative integers, got {shape!r}")
    dims = []
    for dim in shape:
        try:
            if isinstance(dim, bool):
                raise TypeError  # caught below
            dim = operator.index(dim)
        except TypeError:
            raise UsageTypeError(
                f"shape must be a tuple or list of non-negative integers, got {tuple(shape)!r} "
                f"(entry {dim!r} is a {type(dim).__name__})"
            ) from None
        if dim < 0:
            raise UsageError(f"shape must hold non-negative integers, got {tuple(shape)!r}")
        dims.append(dim)
    numel = 1
    for dim in dims:
        numel *= dim
    if numel > MAX_NUMEL:
        raise UsageError(f"shape {tuple(dims)!r} has {numel} elements, more than the limit of {MAX_NUMEL}")
    return tuple(dims)


def physical_memory() -> Optional[int]:
    """Bytes of RAM on this machine, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def check_fits_memory(shape: Tuple[int, ...], dtype: str) -> None:
    """Refuse, before allocating, a tensor larger than the machine's whole memory."""
    numel = 1
    for dim in shape:
        numel *= dim
    nbytes = numel * (8 if dtype == "float64" else 4)  # float16/bfloat16 are made in float32
    limit = physical_memory()
    if limit is not None and nbytes > limit:
        raise UsageError(
            f"shape {shape!r} of {dtype} needs {nbytes / 2**30:.1f} GiB, more than this machine's "
            f"{limit / 2**30:.1f} GiB of memory"
        )


def dtype_name(dtype: Any, default: str = "float32") -> str:
    """Normalise a dtype given as a name, a NumPy dtype or a framework dtype to its name."""
    if dtype is None:
        return default
    if isinstance(dtype, str):
        key = dtype.lower()
    else:
        # torch.float32 -> "torch.float32"; mindspore.float32 -> "Float32"; np.float32 -> "float32"
        try:
            import numpy as np
            if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
                key = np.dtype(dtype).name
            else:
                key = str(dtype).lower()
        except TypeError:
            key = str(dtype).lower()
        key = key.rsplit(".", 1)[-1]
    name = _DTYPE_ALIASES.get(key)
    if name is None:
        raise UsageError(f"unknown dtype {dtype!r}; accepted: {', '.join(DTYPE_NAMES)} (names or framework dtypes)")
    return name


def check_generator_list(generators: Any, shape: Tuple[int, ...]) -> list:
    """One generator per batch item (``shape[0]``), all of one kind."""
    if not generators:
        raise UsageError("generator list is empty; pass one generator or one per batch item")
    kinds = sorted({"xrand" if type(g).__module__.startswith("xrand.") else type(g).__module__.split(".")[0]
                    for g in generators})
    if len(kinds) > 1:
        raise UsageTypeError(f"generator list mixes kinds {kinds}; use generators of one kind")
    if len(generators) > 1 and (not shape or len(generators) != shape[0]):
        batch = shape[0] if shape else "no batch dimension"
        raise UsageError(
            f"got {len(generators)} generators for a batch of {batch} (shape {shape}); "
            "pass one generator or exactly one per batch item"
        )
    return list(generators)


def differing(a: Mapping[str, Any], b: Mapping[str, Any], depth: Optional[int] = None,
              prefix: str = "") -> List[Tuple[str, Any, Any]]:
    """``(dotted key, a's value, b's value)`` for every key whose values differ, sorted; nested
    mappings are followed ``depth`` levels deep (None: all the way), deeper ones compared whole."""
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, Mapping) and isinstance(y, Mapping) and depth != 0:
            out += differing(x, y, None if depth is None else depth - 1, f"{prefix}{key}.")
        elif x != y:
            out.append((prefix + key, x, y))
    return out
