"""``xrand.Generator``: a seeded, stateful source of noise that belongs to no framework."""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .checks import check_seed, dtype_name
from .streams import DEFAULT_STREAM, make_stream, stream_names

STATE_VERSION = 1


def _fresh_seed() -> int:
    """64 bits of OS entropy, for ``Generator(seed=None)``."""
    return int(np.random.SeedSequence().generate_state(2, np.uint64)[0])


class Generator:
    """A generator of standard normal noise that gives the same numbers on every backend.

    ``stream`` picks how numbers are made: ``"torch-cpu"`` (the default) reproduces
    ``torch.Generator("cpu").manual_seed(seed)``, ``"torch-cuda"`` torch's CUDA generator,
    ``"pcg64"`` ``numpy.random.Generator(PCG64(seed))`` as mindone.diffusers uses it.
    ``options`` go to the stream (e.g. ``engine=``, ``kernel=``, ``gpu=``).

    Calls are serialised by a lock, so a generator shared between threads stays a single
    well-defined stream (which thread gets which numbers still depends on timing).
    """

    def __init__(self, seed: Optional[int] = None, stream: str = DEFAULT_STREAM, **options: Any) -> None:
        if not isinstance(stream, str):
            raise TypeError(f"stream must be a name such as {stream_names()!r}, got {stream!r}")
        self._seed = _fresh_seed() if seed is None else check_seed(seed)
        self._stream = make_stream(stream, self._seed, **options)
        self._stream_name = stream
        self._spawned = 0
        self._lock = threading.Lock()

    # -- torch.Generator-like seeding --------------------------------------------------------
    def manual_seed(self, seed: int) -> "Generator":
        seed = check_seed(seed)
        with self._lock:
            self._stream.seed(seed)
            self._seed = seed
            self._spawned = 0
        return self

    def initial_seed(self) -> int:
        return self._seed

    @property
    def stream(self) -> str:
        return self._stream_name

    @property
    def stream_options(self) -> Dict[str, Any]:
        return dict(self._stream.options())

    # -- drawing ------------------------------------------------------------------------------
    def normal(self, shape: Tuple[int, ...], dtype: Any = "float32") -> np.ndarray:
        """Standard normal values for a tensor of ``shape`` as a NumPy array (bfloat16 as float32)."""
        from .checks import check_fits_memory, check_shape

        shape, dtype = check_shape(shape), dtype_name(dtype)
        check_fits_memory(shape, dtype)
        return self._draw(shape, dtype)

    def _draw(self, shape: Tuple[int, ...], dtype: str) -> np.ndarray:
        """:meth:`normal` for a shape and dtype name already checked (randn_tensor checks them once)."""
        with self._lock:
            return self._stream.normal(shape, dtype)

    # -- state --------------------------------------------------------------------------------
    def get_state(self) -> Dict[str, Any]:
        """The whole state as plain, picklable and JSON-serialisable data."""
        with self._lock:
            return {
                "xrand_generator": STATE_VERSION,
                "stream": self._stream_name,
                "options": self._stream.options(),
                "seed": self._seed,
                "spawned": self._spawned,
                "stream_state": self._stream.get_state(),
            }

    def set_state(self, state: Dict[str, Any]) -> "Generator":
        """Continue exactly where :meth:`get_state` was taken (the stream may differ from ours)."""
        if not isinstance(state, dict) or state.get("xrand_generator") != STATE_VERSION:
            raise ValueError(
                f"malformed generator state {_short(state)}: expected the dict from Generator.get_state() "
                f"with xrand_generator={STATE_VERSION}"
            )
        missing = [k for k in ("stream", "options", "seed", "spawned", "stream_state") if k not in state]
        if missing:
            raise ValueError(f"malformed generator state: missing keys {missing}")
        if not isinstance(state["options"], dict):
            raise ValueError(f"malformed generator state: options must be a dict, got {state['options']!r}")
        seed = check_seed(state["seed"], "state['seed']")
        spawned = check_seed(state["spawned"], "state['spawned']")
        stream = make_stream(state["stream"], seed, **state["options"])
        stream.set_state(state["stream_state"])
        with self._lock:
            self._stream, self._stream_name = stream, state["stream"]
            self._seed, self._spawned = seed, spawned
        return self

    def __getstate__(self) -> Dict[str, Any]:
        return self.get_state()

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self._stream = None
        self.set_state(state)

    # -- children -----------------------------------------------------------------------------
    def spawn(self, n: int) -> List["Generator"]:
        """``n`` independent child generators, the same in every process for the same seed.

        Children come from ``numpy.random.SeedSequence(seed, spawn_key=(k,))``; later calls
        continue the count, like NumPy's ``spawn``.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"spawn needs a non-negative integer count, got {n!r}")
        with self._lock:
            first, self._spawned = self._spawned, self._spawned + int(n)
        children = []
        for k in range(first, first + int(n)):
            words = np.random.SeedSequence(self._seed, spawn_key=(k,)).generate_state(2, np.uint32)
            child_seed = int(words[0]) | (int(words[1]) << 32)
            children.append(Generator(child_seed, self._stream_name, **self._stream.options()))
        return children

    def __repr__(self) -> str:
        return f"xrand.Generator(seed={self._seed}, stream={self._stream_name!r})"


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 80 else text[:77] + "..."
