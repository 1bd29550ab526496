"""torch's CPU generator, bit for bit: ``torch.randn(shape, generator=torch.Generator("cpu")...)``.

torch draws 32-bit words from mt19937 (only the low 32 bits of the seed count) and turns them
into normals in one of two ways (aten/src/ATen/native/cpu/DistributionTemplates.h):

- numel >= 16: uniforms in blocks of 16, slot j paired with slot j + 8 by Box-Muller; a partial
  last block is redrawn from 16 fresh uniforms and overwrites the tail. float32 (and the float
  math of float16/bfloat16) runs the AVX2 kernel on x86-64 builds and a libm kernel elsewhere.
- numel < 16: float64 Box-Muller that caches its second value in the generator
  (core/DistributionsHelper.h), whatever the dtype.

Engines give the same numbers: ``numpy`` (reference, needs only NumPy), ``numba`` (compiled,
one thread), ``numba-parallel`` (compiled, blocks transformed on ``threads`` threads), ``torch``
(torch itself, state synced in and out). ``kernel`` picks the float kernel:
``avx2`` (x86-64 torch) or ``scalar`` (aarch64 / Apple Silicon torch, or ATEN_CPU_CAPABILITY=default).
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..base import Stream
from ...checks import UsageError, check_choice, module_installed, module_loaded
from ...numeric import cast_float64, float32_to_bfloat16_values
from .. import pages
from .._parallel import Tasks
from .reference import (
    _TWO_PI_D, box_muller_double, box_muller_float, uniform_double, uniform_float,
)
from .state import N, check_state, make_state, parse_torch_state, seed_key, torch_state_bytes

ENGINES = ("auto", "torch", "numba-parallel", "numba", "numpy")
KERNELS = ("avx2", "scalar")

_CHUNK = 1 << 16  # values made at a time: a multiple of 16; bounds scratch memory, fits caches
_PARALLEL_MIN = 1 << 20  # smaller draws run on one thread: handing out tasks costs more


def torch_kernel() -> str:
    """The float kernel the installed torch runs: ``"avx2"`` or ``"scalar"`` (imports torch).

    AVX-512 machines run the AVX2 kernel too (normal_stub has no AVX-512 build; checked with
    ATEN_CPU_CAPABILITY). PowerPC's VSX kernel is not modelled.
    """
    import torch

    return "avx2" if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") else "scalar"


# ----------------------------------------------------------------------------- engines

class _MTEngine:
    """mt19937 words plus torch's two normal paths; subclasses make the words and the blocks."""

    def __init__(self, kernel: str) -> None:
        self.kernel = kernel
        self.seed_value = 0
        self.cached: Optional[float] = None

    def set(self, seed: int, key: np.ndarray, pos: int, cached: Optional[float]) -> None:
        self.seed_value, self.cached = seed, cached
        self.set_mt(key, pos)

    def get(self) -> Dict[str, Any]:
        return make_state(self.seed_value, *self.get_mt(), self.cached)

    def normal(self, shape: Tuple[int, ...], dtype: str) -> np.ndarray:
        n = math.prod(shape)
        if n < 16:
            return self._small(n, dtype).reshape(shape)
        out = pages.empty(n, np.float32 if dtype == "bfloat16" else dtype)  # torch's pages, not NumPy's huge ones
        self._large(out, dtype)
        return out.reshape(shape)

    def _small(self, n: int, dtype: str) -> np.ndarray:
        """at::normal_distribution<double> (core/DistributionsHelper.h), one value at a time."""
        values = []
        for _ in range(n):
            if self.cached is None:
                u1, u2 = uniform_double(self.words(4)).tolist()
                r = math.sqrt(-2.0 * math.log1p(-u2))
                theta = _TWO_PI_D * u1
                self.cached = r * math.sin(theta)
                value = r * math.cos(theta)
            else:
                value, self.cached = self.cached, None
            values.append(value + 0.0)  # val * std + mean
        return cast_float64(np.array(values, dtype=np.float64), dtype)

    def _large(self, out: np.ndarray, dtype: str) -> None:
        """normal_fill (native/cpu/DistributionTemplates.h) into ``out``."""
        n = out.size
        full = n - n % 16
        self.fill(out[:full], dtype)
        if n % 16:
            # float/double first fill every slot with a uniform, then redraw the last 16;
            # half/bfloat16 draw block by block, so their tail follows the last full block
            if dtype in ("float32", "float64"):
                self.words((n - full) * (2 if dtype == "float64" else 1))
            tail = np.empty(16, out.dtype)
            self.fill(tail, dtype)
            out[n - 16:] = tail

    def fill(self, out: np.ndarray, dtype: str) -> None:
        """Full blocks of 16 into ``out`` (bfloat16 as float32), a chunk at a time."""
        blocks = self.double_blocks if dtype == "float64" else self.float_blocks
        scratch = np.empty(min(_CHUNK, out.size), np.float32) if dtype == "float16" else None
        for start in range(0, out.size, _CHUNK):
            stop = min(start + _CHUNK, out.size)
            target = out[start:stop] if scratch is None else scratch[: stop - start]
            blocks(target)
            if dtype == "bfloat16":
                target[:] = float32_to_bfloat16_values(target)
            elif dtype == "float16":
                out[start:stop] = target

    # subclass interface
    def set_mt(self, key: np.ndarray, pos: int) -> None:
        raise NotImplementedError

    def get_mt(self) -> Tuple[np.ndarray, int]:
        raise NotImplementedError

    def words(self, count: int) -> np.ndarray:
        raise NotImplementedError

    def float_blocks(self, out: np.ndarray) -> None:
        raise NotImplementedError

    def double_blocks(self, out: np.ndarray) -> None:
        raise NotImplementedError


class _NumpyEngine(_MTEngine):
    """Pure NumPy: ``np.random.MT19937`` makes the same words; the kernels above do the rest."""

    def __init__(self, kernel: str) -> None:
        super().__init__(kernel)
        self.bitgen = np.random.MT19937()

    def set_mt(self, key: np.ndarray, pos: int) -> None:
        self.bitgen.state = {"bit_generator": "MT19937", "state": {"key": key.copy(), "pos": pos}}

    def get_mt(self) -> Tuple[np.ndarray, int]:
        state = self.bitgen.state["state"]
        return state["key"], state["pos"]

    def words(self, count: int) -> np.ndarray:
        return self.bitgen.random_raw(count).astype(np.uint32)

    def float_blocks(self, out: np.ndarray) -> None:
        out[:] = box_muller_float(uniform_float(self.words(out.size)), self.kernel)

    def double_blocks(self, out: np.ndarray) -> None:
        out[:] = box_muller_double(uniform_double(self.words(2 * out.size)))


class _NumbaEngine(_MTEngine):
    """Compiled kernels from ``compiled.py`` working on a key array in place."""

    def __init__(self, kernel: str) -> None:
        super().__init__(kernel)
        from . import compiled

        self.kernels = compiled
        self.key = np.zeros(N, np.uint32)
        self.pos = np.full(1, N, np.int64)

    def set_mt(self, key: np.ndarray, pos: int) -> None:
        self.key[:] = key
        self.pos[0] = pos

    def get_mt(self) -> Tuple[np.ndarray, int]:
        return self.key.copy(), int(self.pos[0])

    def words(self, count: int) -> np.ndarray:
        out = np.empty(count, np.uint32)
        self.kernels.words(self.key, self.pos, out, count)
        return out

    def float_blocks(self, out: np.ndarray) -> None:
        words = out.view(np.uint32)  # drawn into the output, then transformed in place
        self.kernels.raw_words(self.key, self.pos, words)
        transform = self.kernels.float_avx2_range if self.kernel == "avx2" else self.kernels.float_scalar_range
        transform(words, out, 0, out.size, False)

    def double_blocks(self, out: np.ndarray) -> None:
        words = out.view(np.uint32)
        self.kernels.raw_words(self.key, self.pos, words)
        self.kernels.double_range(words, out, 0, out.size, False)


class _ParallelEngine(_NumbaEngine):
    """The numba engine with the blocks of 16 transformed on ``threads`` threads (same bits).

    The calling thread draws a chunk's words into the output itself (as the numba engine does,
    so the output's fresh pages are touched once, in order), then a pool thread transforms the
    chunk in place while the next chunk's words are drawn. float16 goes through a float32
    scratch a chunk at a time, on one thread.
    """

    def __init__(self, kernel: str, threads: Optional[int] = None) -> None:
        super().__init__(kernel)
        self.threads = threads

    def fill(self, out: np.ndarray, dtype: str) -> None:
        if dtype == "float16" or out.size < _PARALLEL_MIN:
            super().fill(out, dtype)
            return
        if dtype == "float64":
            transform = self.kernels.double_range
        else:
            transform = self.kernels.float_avx2_range if self.kernel == "avx2" else self.kernels.float_scalar_range
        tasks = Tasks(self.threads)
        try:
            for lo in range(0, out.size, self.kernels.PAR_CHUNK):
                chunk = out[lo:lo + self.kernels.PAR_CHUNK]
                words = chunk.view(np.uint32)  # one word a value, two for float64: each value's own memory
                self.kernels.raw_words(self.key, self.pos, words)
                tasks.submit(transform, words, chunk, 0, chunk.size, dtype == "bfloat16")
        finally:
            tasks.wait()


class _TorchEngine:
    """torch's own generator; the state goes in and out through torch's state bytes."""

    def __init__(self, kernel: str) -> None:
        import torch

        self.torch = torch
        self.generator = torch.Generator("cpu")

    def set(self, seed: int, key: np.ndarray, pos: int, cached: Optional[float]) -> None:
        data = torch_state_bytes(make_state(seed, key, pos, cached))
        self.generator.set_state(self.torch.frombuffer(bytearray(data), dtype=self.torch.uint8))

    def get(self) -> Dict[str, Any]:
        return parse_torch_state(self.generator.get_state())

    def normal(self, shape: Tuple[int, ...], dtype: str) -> np.ndarray:
        x = self.torch.randn(shape, generator=self.generator, dtype=getattr(self.torch, dtype))
        if dtype != "bfloat16":
            return x.numpy()
        x, out = x.reshape(-1), np.empty(x.numel(), np.float32)
        for start in range(0, out.size, _CHUNK):  # in chunks: no second full-size float copy
            out[start:start + _CHUNK] = x[start:start + _CHUNK].float().numpy()
        return out.reshape(shape)


def resolve_engine(engine: str, kernel: str) -> str:
    """The engine ``"auto"`` stands for: torch if imported, else numba-parallel, else torch, else numpy."""
    check_choice(engine, ENGINES, "torch-cpu engine")
    check_choice(kernel, KERNELS, "torch-cpu kernel")
    if engine == "torch":
        if not module_installed("torch"):
            raise ImportError("torch-cpu engine 'torch' needs torch; use engine 'numba' or 'numpy'")
        if torch_kernel() != kernel:
            raise UsageError(f"engine 'torch' runs the local torch's {torch_kernel()!r} kernel, "
                             f"not {kernel!r}; use engine 'numba' or 'numpy' for it")
    if engine != "auto":
        return engine
    # torch only when already imported: numba-parallel is faster and importing torch takes seconds.
    if module_loaded("torch") and torch_kernel() == kernel:
        return "torch"
    if module_installed("numba"):
        return "numba-parallel"
    if module_installed("torch") and torch_kernel() == kernel:
        return "torch"
    return "numpy"


_ENGINE_CLASSES = {"torch": _TorchEngine, "numba": _NumbaEngine, "numpy": _NumpyEngine}


class TorchCPUStream(Stream):
    """``torch.randn`` on a CPU generator seeded with ``seed``, for every dtype and shape.

    Consecutive calls continue one generator, including the cached second value of the
    small-tensor path. ``engine`` and ``kernel`` as in the module docstring; ``self.engine``
    is the engine actually used. ``threads``: how many the numba-parallel engine uses (None:
    numba's current number; at most NUMBA_NUM_THREADS); the values do not depend on it.
    """

    name = "torch-cpu"

    def __init__(self, seed: int = 0, engine: str = "auto", kernel: str = "avx2",
                 threads: Optional[int] = None) -> None:
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, numbers.Integral)
                                    or threads < 1):
            raise UsageError(f"torch-cpu threads must be None or an integer >= 1, got {threads!r}")
        self.kernel = kernel
        self.engine = resolve_engine(engine, kernel)
        self._requested = engine
        self.threads = None if threads is None else int(threads)
        if self.engine == "numba-parallel":
            self._impl = _ParallelEngine(kernel, self.threads)
        else:
            self._impl = _ENGINE_CLASSES[self.engine](kernel)
        self.seed(seed)
        self.initial_seed = seed

    def seed(self, seed: int) -> None:
        self._impl.set(seed, seed_key(seed), N, None)

    def normal(self, shape: Tuple[int, ...], dtype: str) -> np.ndarray:
        return self._impl.normal(shape, dtype)

    def get_state(self) -> Dict[str, Any]:
        return self._impl.get()

    def set_state(self, state: Dict[str, Any]) -> None:
        self._impl.set(*check_state(state))

    def options(self) -> Dict[str, Any]:
        options = {"engine": self._requested, "kernel": self.kernel}
        if self.threads is not None:
            options["threads"] = self.threads
        return options

    # -- torch generator state -------------------------------------------------------------
    def torch_state(self) -> bytes:
        """This stream's state as ``torch.Generator("cpu").get_state()`` bytes."""
        return torch_state_bytes(self.get_state())

    def set_torch_state(self, data: Any) -> None:
        """Take the state of a torch CPU generator (its ``get_state()`` tensor, or bytes)."""
        self.set_state(parse_torch_state(data))

    def to_torch_generator(self) -> Any:
        """A new ``torch.Generator("cpu")`` in this stream's state."""
        import torch

        generator = torch.Generator("cpu")
        generator.set_state(torch.frombuffer(bytearray(self.torch_state()), dtype=torch.uint8))
        return generator

    @classmethod
    def from_torch_generator(cls, generator: Any, engine: str = "auto", kernel: str = "avx2",
                             threads: Optional[int] = None) -> "TorchCPUStream":
        """A stream that continues where the torch CPU ``generator`` stands (state copied)."""
        stream = cls(0, engine=engine, kernel=kernel, threads=threads)
        stream.set_torch_state(generator.get_state())
        return stream

    def __repr__(self) -> str:
        return f"<xrand stream 'torch-cpu' engine={self.engine!r} kernel={self.kernel!r}>"
