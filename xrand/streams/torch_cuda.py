"""torch's CUDA generator in NumPy: Philox4x32-10 with torch's launch geometry.

Reproduces ``torch.randn(shape, device="cuda", dtype=...,
generator=torch.Generator("cuda").manual_seed(seed))``. The Philox words, the element ->
(thread, counter) mapping and the generator offset are exact. The normals use float64
log/sin/cos where the GPU uses ``logf`` and the hardware ``__sincosf``, so float32 values
agree with a GPU to about 1e-6, not bit for bit (docs/torch-cuda.md).

Which element a thread writes depends on the number of threads launched, which depends on
the GPU's SM count once a tensor has more elements than one wave of threads: pick the GPU
with ``gpu=`` (see ``GPUS``) or give ``sm_count`` and ``max_threads_per_sm``.

Engines give the same values: ``numpy`` (vectorised, needs only NumPy) and ``numba``
(compiled, every core; ``torch_cuda_compiled.py``); ``auto`` picks numba when it is installed.
"""
from __future__ import annotations

import math
import numbers
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._curand import (
    BLOCK_SIZE, COS_COEF, INV32, MASK32, PHILOX_M, PHILOX_W, PIO2_PARTS, SIN_COEF, TWO_OVER_PI, V_SCALE, V_SHIFT,
)
from .base import Stream
from ..checks import UsageError, check_choice, check_seed, dtype_name, module_installed
from ..numeric import float32_to_bfloat16_values

#: GPU name -> (SM count, max resident threads per SM), as torch reads them from
#: cudaDeviceProp.multiProcessorCount / maxThreadsPerMultiProcessor.
GPUS: Dict[str, Tuple[int, int]] = {
    "H100-SXM": (132, 2048),
    "H100-PCIe": (114, 2048),
    "H200": (132, 2048),
    "A100": (108, 2048),
    "A10": (72, 1536),
    "A10G": (80, 1536),
    "L4": (58, 1536),
    "L40": (142, 1536),
    "L40S": (142, 1536),
    "T4": (40, 1024),
    "V100": (80, 2048),
    "RTX4090": (128, 1536),
    "RTX3090": (82, 1536),
}
#: Other spellings accepted for ``gpu=``.
GPU_ALIASES = {"H100": "H100-SXM"}
DEFAULT_GPU = "H100-SXM"

ENGINES = ("auto", "numba", "numpy")
_INT32_MAX = 2**31 - 1
_CHUNK_COUNTERS = 2**18  # Philox counters per vectorised chunk (bounds memory)

_32 = np.uint64(32)


def _norm(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


_GPU_LOOKUP = {_norm(n): n for n in GPUS}
_GPU_LOOKUP.update({_norm(alias): target for alias, target in GPU_ALIASES.items()})


def gpu_names() -> List[str]:
    """The names ``gpu=`` accepts (case, spaces and dashes are ignored)."""
    return sorted(GPUS) + sorted(GPU_ALIASES)


def _gpu_name(gpu: Any) -> str:
    name = _GPU_LOOKUP.get(_norm(gpu)) if isinstance(gpu, str) else None
    if name is None:
        raise UsageError(
            f"unknown gpu {gpu!r}; known: {', '.join(gpu_names())} "
            "(or give sm_count= and max_threads_per_sm=)"
        )
    return name


def _positive_int(value: Any, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise UsageError(f"{what} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _geometry(gpu: Any, sm_count: Any, max_threads_per_sm: Any) -> Tuple[Optional[str], int, int]:
    """(gpu name or None, SM count, threads per SM) from the constructor's options."""
    if gpu is not None and (sm_count is not None or max_threads_per_sm is not None):
        raise UsageError("give either gpu= or sm_count= and max_threads_per_sm=, not both")
    if sm_count is None and max_threads_per_sm is None:
        name = _gpu_name(DEFAULT_GPU if gpu is None else gpu)
        return (name,) + GPUS[name]
    if sm_count is None or max_threads_per_sm is None:
        raise UsageError(
            "give both sm_count= and max_threads_per_sm= (torch.cuda.get_device_properties(i)."
            f"multi_processor_count and .max_threads_per_multi_processor), got {sm_count!r} and "
            f"{max_threads_per_sm!r}"
        )
    return (
        None,
        _positive_int(sm_count, "sm_count"),
        _positive_int(max_threads_per_sm, "max_threads_per_sm", BLOCK_SIZE),
    )


# -- Philox4x32-10 ---------------------------------------------------------------------------

def _philox(x0, x1, x2, x3, k0, k1):
    """Philox4x32-10 on uint64 arrays holding 32-bit words (broadcast together)."""
    for rnd in range(10):
        if rnd:
            k0 = (k0 + PHILOX_W[0]) & MASK32
            k1 = (k1 + PHILOX_W[1]) & MASK32
        p0 = PHILOX_M[0] * x0
        p1 = PHILOX_M[1] * x2
        x0, x1, x2, x3 = (p1 >> _32) ^ x1 ^ k0, p1 & MASK32, (p0 >> _32) ^ x3 ^ k1, p0 & MASK32
    return x0, x1, x2, x3


def philox4x32_10(counter: Any, key: Any) -> np.ndarray:
    """Philox4x32-10 (Random123; cuRAND's ``curand_Philox4x32_10``), vectorised.

    ``counter``: words (x, y, z, w), shape ``(4, ...)``; ``key``: words (x, y), shape
    ``(2, ...)``. Returns the four output words as uint32, shape ``(4, ...)`` broadcast.
    """
    c = np.asarray(counter)
    k = np.asarray(key)
    if c.shape[:1] != (4,) or k.shape[:1] != (2,):
        raise UsageError(f"counter must have shape (4, ...) and key (2, ...), got {c.shape} and {k.shape}")
    if any(a.size and (a.min() < 0 or a.max() > 0xFFFFFFFF) for a in (c, k)):
        raise UsageError("counter and key words must be 32-bit unsigned integers")
    c = c.astype(np.uint64)
    k = k.astype(np.uint64)
    words = _philox(c[0], c[1], c[2], c[3], k[0], k[1])
    return np.stack(np.broadcast_arrays(*words)).astype(np.uint32)


# -- Box-Muller as in curand_normal.h ------------------------------------------------------------

def _sincos_reduced(r: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """sin r, cos r for |r| <= pi/4 (Cephes polynomials, see _curand.py)."""
    z = r * r
    ps, pc = SIN_COEF[0], COS_COEF[0]
    for cs, cc in zip(SIN_COEF[1:], COS_COEF[1:]):
        ps = ps * z + cs
        pc = pc * z + cc
    return r + r * z * ps, 1.0 - 0.5 * z + z * z * pc


def _quadrant(q: np.ndarray, s: np.ndarray, c: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """sin, cos of x = q pi/2 + r from s = sin r and c = cos r."""
    q = q & 3
    odd = (q & 1) == 1
    sin_x = np.where(odd, c, s)
    cos_x = np.where(odd, s, c)
    return np.where(q >= 2, -sin_x, sin_x), np.where((q == 1) | (q == 2), -cos_x, cos_x)


def _sincos(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """sin x, cos x for float64 0 <= x < 8: x reduced by multiples of pi/2, then the polynomials."""
    j = np.rint(x * TWO_OVER_PI)
    r = ((x - j * PIO2_PARTS[0]) - j * PIO2_PARTS[1]) - j * PIO2_PARTS[2]
    return _quadrant(j.astype(np.int64), *_sincos_reduced(r))

def _normal4_rows(x, nrows: int) -> List[np.ndarray]:
    """curand_normal4: (s1 sin v1, s1 cos v1, s2 sin v2, s2 cos v2) from words (x0,x1), (x2,x3).

    ``_curand_box_muller``: u and v in float exactly as the GPU (v by a fused multiply-add);
    ``sqrtf(-2 logf(u))`` with NumPy's log; sin/cos in float64 (``_sincos``), one rounding.
    """
    rows: List[np.ndarray] = []
    for pair in range(min(2, (nrows + 1) // 2)):
        a, b = x[2 * pair], x[2 * pair + 1]
        u = a.astype(np.float32) * INV32 + INV32 / np.float32(2)  # exact product, one rounding
        # fmaf(b, C, C/2): the float64 product is exact, so one rounding of the float64 sum
        # equals the fused result except in double-rounding ties (about 2**-29 of values).
        v = (b.astype(np.float64) * V_SCALE + V_SHIFT).astype(np.float32).astype(np.float64)
        log_u = np.log(u.astype(np.float64)).astype(np.float32)  # logf
        s = np.sqrt(np.float32(-2.0) * log_u).astype(np.float64)  # sqrtf
        sin_v, cos_v = _sincos(v)
        rows.append((s * sin_v).astype(np.float32))
        if len(rows) < nrows:
            rows.append((s * cos_v).astype(np.float32))
    return rows


def _sincospi(v: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """sin(pi v), cos(pi v) for v in [0, 2], reduced to |f| <= 1/4 first (like CUDA sincospi)."""
    n = np.rint(2.0 * v)
    a = np.pi * (v - 0.5 * n)  # v - n/2 is exact
    return _quadrant(n.astype(np.int64), *_sincos_reduced(a))


def _normal2_double_rows(x, nrows: int) -> List[np.ndarray]:
    """curand_normal2_double: one Philox output -> (s sinpi v, s cospi v), 53-bit u and v."""
    zx = x[0] ^ (x[1] << np.uint64(21))  # (x0, x1) -> 53-bit integer, as curand does
    zy = x[2] ^ (x[3] << np.uint64(21))
    u = zx.astype(np.float64) * 2.0**-53 + 2.0**-54
    v = zy.astype(np.float64) * 2.0**-52 + 2.0**-53
    s = np.sqrt(-2.0 * np.log(u))
    sin_v, cos_v = _sincospi(v)
    return [s * sin_v, s * cos_v][:nrows]


# -- torch CUDA generator state bytes (CUDAGeneratorImpl::get_state) ----------------------------

def _check_offset(offset: Any) -> int:
    if isinstance(offset, bool) or not isinstance(offset, numbers.Integral):
        raise UsageError(f"offset must be an integer, got {offset!r}")
    offset = int(offset)
    if offset < 0 or offset >= 2**63 or offset % 4:
        raise UsageError(f"offset must be a multiple of 4 in [0, 2**63) as torch requires, got {offset}")
    return offset


def torch_state_bytes(seed: int, offset: int) -> bytes:
    """The 16 bytes of ``torch.Generator("cuda").get_state()``: seed uint64, offset int64."""
    try:
        seed = check_seed(seed)
    except TypeError as exc:
        raise UsageError(str(exc)) from None
    return struct.pack("<Qq", seed, _check_offset(offset))


def parse_torch_state(data: Any) -> Tuple[int, int]:
    """(seed, offset) from a torch CUDA generator state: bytes or a uint8 array/CPU tensor.

    Like ``CUDAGeneratorImpl::set_state`` it takes 16 bytes, or 8 (seed only, offset 0).
    """
    if isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
    else:
        array = np.asarray(data)
        if array.dtype != np.uint8 or array.ndim != 1:
            raise UsageError(
                f"a torch CUDA generator state is a 1-d uint8 tensor, got {array.dtype} shape {array.shape}"
            )
        raw = array.tobytes()
    if len(raw) == 8:
        return struct.unpack("<Q", raw)[0], 0
    if len(raw) != 16:
        raise UsageError(f"a torch CUDA generator state has 16 bytes (or 8), got {len(raw)}")
    seed, offset = struct.unpack("<Qq", raw)
    return seed, _check_offset(offset)


def device_geometry(device: Any = "cuda") -> Dict[str, int]:
    """``sm_count`` and ``max_threads_per_sm`` of a real CUDA device, read through torch."""
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    threads = getattr(props, "max_threads_per_multi_processor", None)
    if threads is None:
        raise RuntimeError("this torch does not report max_threads_per_multi_processor; pass gpu= instead")
    return {"sm_count": int(props.multi_processor_count), "max_threads_per_sm": int(threads)}


# -- the stream --------------------------------------------------------------------------------

class TorchCUDAStream(Stream):
    """torch's CUDA generator: ``TorchCUDAStream(seed, gpu="H100")`` or with explicit geometry.

    The state is the seed and torch's Philox offset, which grows after every draw by
    ``((n - 1) // (T * unroll) + 1) * 4`` for T launched threads (unroll 4, or 2 for float64).
    """

    name = "torch-cuda"
    _STATE_KEYS = ("stream", "seed", "offset", "gpu", "sm_count", "max_threads_per_sm", "engine")

    def __init__(self, seed: int = 0, gpu: Optional[str] = None, sm_count: Optional[int] = None,
                 max_threads_per_sm: Optional[int] = None, engine: str = "auto") -> None:
        self.gpu, self.sm_count, self.max_threads_per_sm = _geometry(gpu, sm_count, max_threads_per_sm)
        self._set_engine(engine)
        self.seed(seed)
        self.initial_seed = seed

    def _set_engine(self, engine: Any) -> None:
        """``self.engine``: the engine used for ``engine`` (numba for "auto" when installed)."""
        check_choice(engine, ENGINES, "torch-cuda engine")
        if engine == "numba" and not module_installed("numba"):
            raise ImportError("torch-cuda engine 'numba' needs numba (pip install xrand[fast]); use engine 'numpy'")
        self._requested = engine
        if engine == "auto":
            engine = "numba" if module_installed("numba") else "numpy"
        self.engine = engine

    def seed(self, seed: int) -> None:
        """Like ``manual_seed``: the whole 64-bit seed is the Philox key, the offset restarts."""
        self._seed = check_seed(seed)
        self._offset = 0

    @property
    def offset(self) -> int:
        """torch's ``philox_offset_per_thread`` (``Generator.get_offset()``)."""
        return self._offset

    # -- launch geometry (DistributionTemplates.h, calc_execution_policy) ------------------
    def launch_threads(self, numel: int) -> int:
        """Threads T launched for ``numel`` elements: 256 * min(ceil(numel/256), SMs * blocks/SM)."""
        blocks_per_sm = self.max_threads_per_sm // BLOCK_SIZE
        grid = min(-(-numel // BLOCK_SIZE), self.sm_count * blocks_per_sm)
        return grid * BLOCK_SIZE

    def offset_increment(self, numel: int, dtype: str = "float32") -> int:
        """How much a draw of ``numel`` values grows the offset (0 for an empty tensor)."""
        if numel == 0:
            return 0
        unroll = 2 if dtype_name(dtype) == "float64" else 4
        return ((numel - 1) // (self.launch_threads(numel) * unroll) + 1) * 4

    # -- drawing ---------------------------------------------------------------------------
    def normal(self, shape: Tuple[int, ...], dtype: str) -> np.ndarray:
        n = math.prod(shape)
        itemsize = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}[dtype]
        if n and 1 + (n - 1) * itemsize > _INT32_MAX:
            # TensorIterator::can_use_32bit_indexing fails: torch splits the launch (not modelled)
            raise UsageError(
                f"shape {shape} {dtype} spans more than 2**31 bytes; torch splits such draws into "
                "several launches, which this stream does not model"
            )
        values = self._draw(n, unroll=2 if dtype == "float64" else 4)
        if dtype == "float16":
            values = values.astype(np.float16)
        elif dtype == "bfloat16":
            values = float32_to_bfloat16_values(values)
        return values.reshape(shape)

    def _draw(self, n: int, unroll: int) -> np.ndarray:
        """distribution_elementwise_grid_stride_kernel, all threads and iterations at once.

        Thread ``idx`` runs ``curand_init(seed, idx, offset)``; its k-th ``curand_normal4``
        (or ``curand_normal2_double``) uses Philox counter ``(offset/4 + k, idx)`` and its
        component c goes to element ``idx + T * (unroll * k + c)`` when that is below n.
        """
        out = np.empty(n, dtype=np.float64 if unroll == 2 else np.float32)
        if n == 0:
            return out
        threads = self.launch_threads(n)
        per_iteration = threads * unroll
        iterations = (n - 1) // per_iteration + 1
        if self.engine == "numba":
            from . import torch_cuda_compiled

            torch_cuda_compiled.draw(out, threads, unroll, self._offset // 4, self._seed)
            self._offset += iterations * 4
            return out
        key0, key1 = np.uint64(self._seed & 0xFFFFFFFF), np.uint64(self._seed >> 32)
        base = self._offset // 4
        transform = _normal2_double_rows if unroll == 2 else _normal4_rows

        def fill(k0: int, k1: int, active: int, nrows: int) -> None:
            # iterations k0..k1-1 of threads 0..active-1, components 0..nrows-1
            counter = np.arange(base + k0, base + k1, dtype=np.uint64)[:, None]
            idx = np.arange(active, dtype=np.uint64)[None, :]
            words = _philox(counter & MASK32, counter >> _32, idx, np.uint64(0), key0, key1)
            block = np.stack(transform(words, nrows), axis=1)  # (iterations, components, threads)
            start = k0 * per_iteration
            take = min(n - start, block.size)
            out[start:start + take] = block.reshape(-1)[:take]

        full = n // per_iteration
        step = max(1, _CHUNK_COUNTERS // threads)
        for k0 in range(0, full, step):
            fill(k0, min(full, k0 + step), threads, unroll)
        rest = n - full * per_iteration
        if rest:  # last iteration: some components (and, if rest < T, some threads) unused
            fill(full, full + 1, min(threads, rest), -(-rest // threads))
        self._offset += iterations * 4
        return out

    def normal_torch(self, shape: Sequence[int], dtype: str = "float32", device: Any = "cuda"):
        """Draw with torch's own CUDA generator set to this stream's state, then advance it.

        The native engine for a CUDA torch backend: same numbers as ``normal`` up to the
        GPU's float rounding. The device must have this stream's launch geometry.
        """
        import torch

        dev = torch.device(device)
        if dev.type != "cuda" or not torch.cuda.is_available():
            raise RuntimeError(f"normal_torch needs torch with CUDA and a cuda device, got {device!r}")
        geometry = device_geometry(dev)
        if (geometry["sm_count"], geometry["max_threads_per_sm"]) != (self.sm_count, self.max_threads_per_sm):
            raise UsageError(
                f"{dev} has {geometry['sm_count']} SMs x {geometry['max_threads_per_sm']} threads but this "
                f"stream models {self.sm_count} x {self.max_threads_per_sm}; use "
                "TorchCUDAStream(seed, **device_geometry(device))"
            )
        gen = self.to_torch_generator(dev)
        out = torch.randn(tuple(shape), generator=gen, device=dev, dtype=getattr(torch, dtype_name(dtype)))
        self.set_torch_state(gen.get_state())
        return out

    # -- torch generator state -------------------------------------------------------------
    def torch_state(self) -> bytes:
        """This stream's seed and offset as ``torch.Generator("cuda").get_state()`` bytes."""
        return torch_state_bytes(self._seed, self._offset)

    def set_torch_state(self, data: Any) -> None:
        """Take seed and offset from a torch CUDA generator state (bytes or uint8 tensor)."""
        self._seed, self._offset = parse_torch_state(data)

    def to_torch_generator(self, device: Any = "cuda"):
        """A ``torch.Generator`` on ``device`` in this stream's state."""
        import torch

        gen = torch.Generator(device=device)
        gen.set_state(torch.tensor(list(self.torch_state()), dtype=torch.uint8))
        return gen

    @classmethod
    def from_torch_generator(cls, generator: Any, **geometry: Any) -> "TorchCUDAStream":
        """A stream in a torch CUDA generator's state; geometry from its device unless given."""
        stream = cls(0, **(geometry or device_geometry(generator.device)))
        stream.set_torch_state(generator.get_state())
        return stream

    # -- plain-data state ------------------------------------------------------------------
    def get_state(self) -> Dict[str, Any]:
        return {
            "stream": self.name,
            "seed": self._seed,
            "offset": self._offset,
            "gpu": self.gpu,
            "sm_count": self.sm_count,
            "max_threads_per_sm": self.max_threads_per_sm,
            "engine": self._requested,
        }

    def set_state(self, state: Dict[str, Any]) -> None:
        if not isinstance(state, dict):
            raise UsageError(f"a torch-cuda state is a dict, got {type(state).__name__}")
        # states written before engines existed have no "engine": they keep this stream's
        missing = [key for key in self._STATE_KEYS if key not in state and key != "engine"]
        extra = sorted(set(state) - set(self._STATE_KEYS))
        if missing or extra:
            raise UsageError(
                f"malformed torch-cuda state: missing {missing}, unexpected {extra}; expected keys "
                f"{', '.join(self._STATE_KEYS)}"
            )
        if state["stream"] != self.name:
            raise UsageError(f"state is of stream {state['stream']!r}, not {self.name!r}")
        try:
            seed = check_seed(state["seed"])
        except TypeError as exc:
            raise UsageError(str(exc)) from None
        offset = _check_offset(state["offset"])
        sm_count = _positive_int(state["sm_count"], "sm_count")
        max_threads = _positive_int(state["max_threads_per_sm"], "max_threads_per_sm", BLOCK_SIZE)
        gpu = state["gpu"]
        if gpu is not None:
            gpu = _gpu_name(gpu)
            if GPUS[gpu] != (sm_count, max_threads):
                raise UsageError(
                    f"state names gpu {gpu!r} ({GPUS[gpu][0]} SMs x {GPUS[gpu][1]} threads) but has "
                    f"sm_count {sm_count} and max_threads_per_sm {max_threads}"
                )
        self._set_engine(state.get("engine", self._requested))
        self.gpu, self.sm_count, self.max_threads_per_sm = gpu, sm_count, max_threads
        self._seed, self._offset = seed, offset

    def options(self) -> Dict[str, Any]:
        if self.gpu is not None:
            return {"gpu": self.gpu, "engine": self._requested}
        return {"sm_count": self.sm_count, "max_threads_per_sm": self.max_threads_per_sm, "engine": self._requested}

    def __repr__(self) -> str:
        where = f"gpu={self.gpu!r}, " if self.gpu else ""
        return (f"<xrand stream 'torch-cuda' {where}{self.sm_count} SMs x {self.max_threads_per_sm} "
                f"threads, offset {self._offset}, engine {self.engine!r}>")
