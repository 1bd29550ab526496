"""The stream protocol: how a framework-free generator makes standard normal numbers.

A stream is to ``xrand.Generator`` what a bit generator is to ``numpy.random.Generator``:
it holds the state and makes the numbers; the generator and the backends decide where the
tensor lives. Every stream returns NumPy arrays, so any backend can take them.
"""
from __future__ import annotations

from typing import Any, ClassVar, Dict, Tuple

import numpy as np

#: dtype names a stream must accept in :meth:`Stream.normal`.
DTYPES = ("float16", "bfloat16", "float32", "float64")

#: Largest seed any stream accepts (seeds are unsigned 64-bit integers).
MAX_SEED = 2**64 - 1


class Stream:
    """Base class of all streams.

    Subclasses set :attr:`name` and implement ``seed``, ``normal``, ``get_state`` and
    ``set_state``. ``normal(shape, dtype)`` returns an ndarray of ``shape`` with:

    - ``float16``, ``float32``, ``float64``: that NumPy dtype;
    - ``bfloat16``: a ``float32`` array whose every value is exactly a bfloat16 value, so a
      backend's cast to its bfloat16 type is exact.

    What a stream draws may depend on the whole shape and the dtype (torch's does), so
    callers ask for the whole tensor at once rather than flattening it themselves.
    """

    name: ClassVar[str] = ""

    def __init__(self, seed: int = 0, **options: Any) -> None:
        if options:
            raise TypeError(
                f"stream {self.name!r} takes no options, got {sorted(options)!r}"
            )
        self.seed(seed)

    def seed(self, seed: int) -> None:
        raise NotImplementedError

    def normal(self, shape: Tuple[int, ...], dtype: str) -> np.ndarray:
        raise NotImplementedError

    def get_state(self) -> Dict[str, Any]:
        """The full state as plain data (dicts, lists, ints, floats, strings)."""
        raise NotImplementedError

    def set_state(self, state: Dict[str, Any]) -> None:
        """Restore a state from :meth:`get_state`; ``ValueError`` if it is malformed."""
        raise NotImplementedError

    def options(self) -> Dict[str, Any]:
        """The constructor options that make another stream behave like this one."""
        return {}

    def __repr__(self) -> str:
        return f"<xrand stream {self.name!r}>"
