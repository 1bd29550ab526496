"""``xrand.Generator``: a seeded, stateful source of noise that belongs to no framework."""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from .checks import UsageError, UsageTypeError, check_fits_memory, check_seed, check_shape, dtype_name
from .streams import DEFAULT_STREAM, Stream, make_stream

STATE_VERSION = 1


def _fresh_seed() -> int:
    """64 bits of OS entropy, for ``Generator(seed=None)``."""
    return int(np.random.SeedSequence().generate_state(2, np.uint64)[0])


class Generator:
    """A generator of standard normal noise that gives the same numbers on every backend.

    ``stream`` picks how numbers are made, by name or as a stream instance (as
    ``numpy.random.Generator`` takes a bit generator): ``"torch-cpu"`` (the default) reproduces
    ``torch.Generator("cpu").manual_seed(seed)``, ``"torch-cuda"`` torch's CUDA generator,
    ``"pcg64"`` ``numpy.random.Generator(PCG64(seed))`` as mindone.diffusers uses it.
    ``options`` go to a named stream (e.g. ``engine=``, ``kernel=``, ``gpu=``). With an instance
    and no seed, the generator continues from the instance's state.

    Calls are serialised by a lock, so a generator shared between threads stays a single
    well-defined stream (which thread gets which numbers still depends on timing).
    """

    def __init__(self, seed: Optional[int] = None, stream: Union[str, Stream] = DEFAULT_STREAM,
                 **options: Any) -> None:
        self._lock = threading.Lock()
        self._spawn_key: Tuple[int, ...] = ()
        self._spawned = 0
        if isinstance(stream, Stream):
            if options:
                raise UsageTypeError(f"options {sorted(options)!r} go to a stream name, not to a stream instance")
            if seed is None:
                if stream.initial_seed is None:
                    raise UsageError(f"{stream!r} does not record its seed; pass seed= with it")
                self._seed = check_seed(stream.initial_seed)
            else:
                self._seed = check_seed(seed)
                stream.seed(self._seed)
            self._stream = stream
        elif isinstance(stream, str):
            self._seed = _fresh_seed() if seed is None else check_seed(seed)
            self._stream = make_stream(stream, self._seed, **options)
        else:
            raise UsageTypeError(f"stream must be a stream name or an xrand.streams.Stream, got {stream!r}")

    # -- torch.Generator-like seeding --------------------------------------------------------
    def manual_seed(self, seed: int) -> "Generator":
        seed = check_seed(seed)
        with self._lock:
            self._stream.seed(seed)
            self._seed, self._spawn_key, self._spawned = seed, (), 0
        return self

    def initial_seed(self) -> int:
        return self._seed

    @property
    def stream(self) -> str:
        return self._stream.name

    @property
    def stream_options(self) -> Dict[str, Any]:
        return dict(self._stream.options())

    # -- drawing ------------------------------------------------------------------------------
    def normal(self, shape: Tuple[int, ...], dtype: Any = "float32") -> np.ndarray:
        """Standard normal values for a tensor of ``shape`` as a NumPy array (bfloat16 as float32)."""
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
                "stream": self._stream.name,
                "options": self._stream.options(),
                "seed": self._seed,
                "spawn_key": list(self._spawn_key),
                "spawned": self._spawned,
                "stream_state": self._stream.get_state(),
            }

    def set_state(self, state: Dict[str, Any]) -> "Generator":
        """Continue exactly where :meth:`get_state` was taken (the stream may differ from ours)."""
        if not isinstance(state, dict) or state.get("xrand_generator") != STATE_VERSION:
            raise UsageError(
                f"malformed generator state {_short(state)}: expected the dict from Generator.get_state() "
                f"with xrand_generator={STATE_VERSION}"
            )
        missing = [k for k in ("stream", "options", "seed", "spawned", "stream_state") if k not in state]
        if missing:
            raise UsageError(f"malformed generator state: missing keys {missing}")
        if not isinstance(state["options"], dict):
            raise UsageError(f"malformed generator state: options must be a dict, got {state['options']!r}")
        seed = check_seed(state["seed"], "state['seed']")
        spawned = check_seed(state["spawned"], "state['spawned']")
        key = state.get("spawn_key", [])  # states written before spawn keys were recorded have none
        if not isinstance(key, list):
            raise UsageError(f"malformed generator state: spawn_key must be a list, got {key!r}")
        key = tuple(check_seed(k, "state['spawn_key'] entry") for k in key)
        stream = make_stream(state["stream"], seed, **state["options"])
        stream.set_state(state["stream_state"])
        with self._lock:
            self._stream = stream
            self._seed, self._spawn_key, self._spawned = seed, key, spawned
        return self

    def __getstate__(self) -> Dict[str, Any]:
        return self.get_state()

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self.set_state(state)

    # -- children -----------------------------------------------------------------------------
    def spawn(self, n: int) -> List["Generator"]:
        """``n`` independent child generators, the same in every process for the same seed.

        Child ``k`` is seeded from ``numpy.random.SeedSequence(seed, spawn_key=key + (k,))``, as
        NumPy's ``spawn`` does: with the pcg64 stream the children equal
        ``np.random.Generator(np.random.PCG64(seed)).spawn(n)``'s. Later calls continue the count.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise UsageError(f"spawn needs a non-negative integer count, got {n!r}")
        with self._lock:
            first, self._spawned = self._spawned, self._spawned + int(n)
        children = []
        for k in range(first, first + int(n)):
            key = self._spawn_key + (k,)
            child = Generator.__new__(Generator)
            child._lock, child._spawned = threading.Lock(), 0
            child._stream = make_stream(self._stream.name, self._seed, **self._stream.options())
            seed = child._stream.seed_from_sequence(np.random.SeedSequence(self._seed, spawn_key=key))
            # a stream seeded from an integer reports it; one seeded by the sequence keeps its key
            child._seed, child._spawn_key = (self._seed, key) if seed is None else (seed, ())
            children.append(child)
        return children

    def __repr__(self) -> str:
        return f"xrand.Generator(seed={self._seed}, stream={self._stream.name!r})"


def _short(obj: Any) -> str:
    text = repr(obj)
    return text if len(text) <= 80 else text[:77] + "..."
