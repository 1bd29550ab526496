"""The stream protocol: how a framework-free generator makes standard normal numbers.

A stream is to ``xrand.Generator`` what a bit generator is to ``numpy.random.Generator``:
it holds the state and makes the numbers; the generator and the backends decide where the
tensor lives. Every stream returns NumPy arrays, so any backend can take them.
"""
from __future__ import annotations

from typing import Any, ClassVar, Dict, Optional, Tuple

import numpy as np

from ..checks import DTYPE_NAMES as DTYPES
from ..checks import UsageTypeError


class Stream:
    """Base class of all streams.

    Subclasses set :attr:`name` and implement ``seed``, ``normal``, ``get_state`` and
    ``set_state``. ``seed(seed)`` gets an integer in [0, 2**64) and ``normal(shape, dtype)``
    a tuple of non-negative ints and a name from :data:`DTYPES`, both already checked (and the
    tensor known to fit in memory), and returns an ndarray of ``shape`` with:

    - ``float16``, ``float32``, ``float64``: that NumPy dtype;
    - ``bfloat16``: a ``float32`` array whose every value is exactly a bfloat16 value, so a
      backend's cast to its bfloat16 type is exact.

    What a stream draws may depend on the whole shape and the dtype (torch's does), so
    callers ask for the whole tensor at once rather than flattening it themselves.
    """

    name: ClassVar[str] = ""
    #: the seed of the last ``seed()`` call (``xrand.Generator(stream_instance)`` reports it)
    initial_seed: Optional[int] = None

    def __init__(self, seed: int = 0, **options: Any) -> None:
        if options:
            raise UsageTypeError(f"stream {self.name!r} takes no options, got {sorted(options)!r}")
        self.seed(seed)
        self.initial_seed = seed

    def seed(self, seed: int) -> None:
        raise NotImplementedError

    def seed_from_sequence(self, sequence: np.random.SeedSequence) -> Optional[int]:
        """Seed from a ``SeedSequence`` (children of ``Generator.spawn``); the integer seed used, if any.

        The default seeds with the sequence's first 64 bits and returns them; a stream built on
        NumPy bit generators seeds them with the sequence itself, as NumPy's ``spawn`` does,
        and returns None.
        """
        words = sequence.generate_state(2, np.uint32)
        seed = int(words[0]) | (int(words[1]) << 32)
        self.seed(seed)
        self.initial_seed = seed
        return seed

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
