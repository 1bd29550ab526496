"""torch's CPU generator, bit for bit: ``torch.randn(shape, generator=torch.Generator("cpu")...)``.

torch draws 32-bit words from mt19937 (only the low 32 bits of the seed count) and turns them
into normals in one of two ways (aten/src/ATen/native/cpu/DistributionTemplates.h):

- numel >= 16: uniforms in blocks of 16, slot j paired with slot j + 8 by Box-Muller; a partial
  last block is redrawn from 16 fresh uniforms and overwrites the tail. float32 (and the float
  math of float16/bfloat16) runs the AVX2 kernel on x86-64 builds and a libm kernel elsewhere.
- numel < 16: float64 Box-Muller that caches its second value in the generator
  (core/DistributionsHelper.h), whatever the dtype.

Engines give the same numbers: ``numpy`` (reference, needs only NumPy), ``numba`` (compiled,
fast), ``torch`` (torch itself, state synced in and out). ``kernel`` picks the float kernel:
``avx2`` (x86-64 torch) or ``scalar`` (aarch64 / Apple Silicon torch, or ATEN_CPU_CAPABILITY=default).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import numbers
import struct
import sys
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .base import Stream
from ..checks import UsageError, check_seed, module_installed, module_loaded
from ..numeric import cast_float64, float32_to_bfloat16_values

ENGINES = ("auto", "torch", "numba", "numpy")
KERNELS = ("avx2", "scalar")

N = 624  # mt19937 state words
_CHUNK = 1 << 16  # values made at a time: a multiple of 16; bounds scratch memory, fits caches
_STATE_KEYS = ("stream", "seed", "key", "pos", "cached_normal")


def torch_kernel() -> str:
    """The float kernel the installed torch runs: ``"avx2"`` or ``"scalar"`` (imports torch).

    AVX-512 machines run the AVX2 kernel too (normal_stub has no AVX-512 build; checked with
    ATEN_CPU_CAPABILITY). PowerPC's VSX kernel is not modelled.
    """
    import torch

    return "avx2" if torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") else "scalar"


def seed_key(seed: int) -> np.ndarray:
    """mt19937 init_genrand of the low 32 bits of ``seed`` (core/MT19937RNGEngine.h)."""
    key = [check_seed(seed) & 0xFFFFFFFF]
    for j in range(1, N):
        key.append((1812433253 * (key[-1] ^ (key[-1] >> 30)) + j) & 0xFFFFFFFF)
    return np.array(key, dtype=np.uint32)


# ----------------------------------------------------------------------------- state

def check_state(state: Any) -> Tuple[int, np.ndarray, int, Optional[float]]:
    """``(seed, key, pos, cached_normal)`` of a state dict; ``ValueError`` naming what is wrong."""
    if not isinstance(state, dict):
        raise UsageError(f"torch-cpu state must be a dict with keys {', '.join(_STATE_KEYS)}, "
                         f"got {type(state).__name__}")
    missing = [k for k in _STATE_KEYS if k not in state]
    unknown = sorted(str(k) for k in state if k not in _STATE_KEYS)
    if missing or unknown:
        raise UsageError(f"malformed torch-cpu state: missing keys {missing}, unknown keys {unknown}; "
                         f"expected {', '.join(_STATE_KEYS)}")
    if state["stream"] != "torch-cpu":
        raise UsageError(f"state is of stream {state['stream']!r}, not 'torch-cpu'")
    seed = state["seed"]
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**64:
        raise UsageError(f"state 'seed' must be an integer in [0, 2**64), got {seed!r}")
    try:
        key = np.asarray(state["key"])
    except (TypeError, ValueError, OverflowError):
        key = np.asarray(None)
    if key.shape != (N,) or key.dtype.kind not in "iu":
        raise UsageError(f"state 'key' must be a list of {N} integers in [0, 2**32), "
                         f"got {type(state['key']).__name__} of shape {key.shape} and dtype {key.dtype}")
    if key.min() < 0 or key.max() > 0xFFFFFFFF:
        raise UsageError(f"state 'key' must be a list of {N} integers in [0, 2**32), "
                         f"got values from {key.min()} to {key.max()}")
    pos = state["pos"]
    if isinstance(pos, bool) or not isinstance(pos, numbers.Integral) or not 1 <= pos <= N:
        raise UsageError(f"state 'pos' must be an integer in [1, {N}] (words of 'key' used), got {pos!r}")
    cached = state["cached_normal"]
    if cached is not None:
        if isinstance(cached, bool) or not isinstance(cached, numbers.Real) or not math.isfinite(cached):
            raise UsageError(f"state 'cached_normal' must be None or a finite float, got {cached!r}")
        cached = float(cached)
    return int(seed), key.astype(np.uint32), int(pos), cached


def make_state(seed: int, key: np.ndarray, pos: int, cached: Optional[float]) -> Dict[str, Any]:
    return {"stream": "torch-cpu", "seed": int(seed), "key": [int(k) for k in key],
            "pos": int(pos), "cached_normal": None if cached is None else float(cached)}


# CPUGeneratorImplState (CPUGeneratorImpl.cpp): legacy pod {u64 the_initial_seed; int left;
# int seeded; u64 next; u64 state[624]; double normal_x, normal_y, normal_rho; int
# normal_is_valid} (5048 bytes with padding), then float next_float_normal_sample and bool
# is_next_float_normal_sample_valid: 5056 bytes, little-endian on every torch platform.
TORCH_STATE_SIZE = 5056
_HEAD = struct.Struct("<QiiQ")
_NORMAL = struct.Struct("<dddi")
_KEY_AT, _NORMAL_AT = 24, 24 + 8 * N


def torch_state_bytes(state: Dict[str, Any]) -> bytes:
    """The bytes ``torch.Generator.set_state`` takes for ``state`` (no torch needed).

    torch's float cache is left empty: randn never reads it.
    """
    seed, key, pos, cached = check_state(state)
    buf = bytearray(TORCH_STATE_SIZE)
    # after a twist torch keeps left + next == 625; left == 1 means "twist before the next word"
    _HEAD.pack_into(buf, 0, seed, N + 1 - pos, 1, pos)
    buf[_KEY_AT:_NORMAL_AT] = key.astype("<u8").tobytes()
    _NORMAL.pack_into(buf, _NORMAL_AT, 0.0, 0.0 if cached is None else cached, 0.0, cached is not None)
    return bytes(buf)


def parse_torch_state(data: Any) -> Dict[str, Any]:
    """The state dict of ``torch.Generator.get_state()`` bytes (a uint8 tensor, array or bytes).

    torch's float cache is dropped: randn never reads it.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        data = np.asarray(data.numpy() if hasattr(data, "numpy") else data, dtype=np.uint8).tobytes()
    data = bytes(data)
    if len(data) != TORCH_STATE_SIZE:
        raise UsageError(f"a torch CPU generator state has {TORCH_STATE_SIZE} bytes, got {len(data)}")
    seed, left, seeded, nxt = _HEAD.unpack_from(data, 0)
    if seeded != 1 or not 0 < left <= N or nxt > N:
        raise UsageError(f"invalid mt19937 state (seeded={seeded}, left={left}, next={nxt}); "
                         f"torch needs seeded=1, 0 < left <= {N}, next <= {N}")
    if left > 1 and left + nxt != N + 1:
        raise UsageError(f"mt19937 state with left={left}, next={nxt} was not made by torch "
                         f"(after a twist left + next == {N + 1})")
    key = np.frombuffer(data, dtype="<u8", count=N, offset=_KEY_AT)
    if int(key.max()) > 0xFFFFFFFF:
        raise UsageError("mt19937 state words must be below 2**32")
    _, normal_y, _, valid = _NORMAL.unpack_from(data, _NORMAL_AT)
    return make_state(seed, key, N if left == 1 else nxt, normal_y if valid else None)


# ----------------------------------------------------------------------------- libm

_LIBM: Dict[str, Any] = {}


def libm_function(name: str, ctype: Any = ctypes.c_double) -> Any:
    """A function of the C library's math (torch's scalar kernels call these, not NumPy's)."""
    if name not in _LIBM:
        path = ctypes.util.find_library("m") or ("ucrtbase" if sys.platform == "win32" else None)
        try:
            fn = getattr(ctypes.CDLL(path), name)
        except (OSError, AttributeError) as exc:
            raise RuntimeError(f"cannot load {name} from the C math library ({path!r})") from exc
        fn.restype, fn.argtypes = ctype, [ctype]
        _LIBM[name] = fn
    return _LIBM[name]


def _apply(fn: Any, x: np.ndarray, dtype: Any = np.float64) -> np.ndarray:
    """``fn`` (a C math library function) on every element of ``x``."""
    return np.fromiter(map(fn, x.ravel().tolist()), dtype=dtype, count=x.size).reshape(x.shape)


# ----------------------------------------------------------------------------- float kernels (NumPy)

_f32 = np.float32
_ONE, _ZERO, _HALF, _MINUS_TWO = _f32(1.0), _f32(0.0), _f32(0.5), _f32(-2.0)
_TWO_PI_F = _f32(2.0 * math.pi)  # _mm256_set1_ps(2.0f * c10::pi<double>)
_TWO_PI_D = 2.0 * math.pi  # 2.0f * c10::pi<double>, in double
# avx_mathfun.h (Cephes) constants
_SQRTHF = _f32(0.707106781186547524)
_LOG_P = [_f32(v) for v in (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
                            1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
                            3.3333331174e-1)]
_LOG_Q1, _LOG_Q2 = _f32(-2.12194440e-4), _f32(0.693359375)
_DP = [_f32(-0.78515625), _f32(-2.4187564849853515625e-4), _f32(-3.77489497744594108e-8)]
_SIN_P = [_f32(-1.9515295891e-4), _f32(8.3321608736e-3), _f32(-1.6666654611e-1)]
_COS_P = [_f32(2.443315711809948e-005), _f32(-1.388731625493765e-003), _f32(4.166664568298827e-002)]
_FOPI = _f32(1.27323954473516)


def fma32(a: Any, b: Any, c: Any) -> np.ndarray:
    """float32 ``a*b + c`` rounded once, as an FMA instruction does (one of a, b is an array).

    The product of two float32 is exact in float64, so only the float64 sum is rounded before
    the cast to float32. That double rounding can only go wrong where the sum lands exactly
    halfway between two float32 values (or in the subnormal range); those few are redone with
    the sum rounded to odd (TwoSum error term), which makes the cast correct.
    """
    p = np.multiply(a, b, dtype=np.float64)
    s = p + np.asarray(c, dtype=np.float64)
    out = s.astype(np.float32)
    suspect = ((s.view(np.int64) & 0x1FFFFFFF) == 0x10000000) | (np.abs(s) < 2.0**-125)
    if suspect.any():
        i = np.nonzero(suspect)
        p, c, s = p[i], np.broadcast_to(np.asarray(c, dtype=np.float64), suspect.shape)[i], s[i]
        t = s - p
        err = (p - (s - t)) + (c - t)
        bits = s.view(np.int64)
        sticky = (err != 0) & ((bits & 1) == 0)
        bits += np.where(sticky, np.where((err > 0) == (s > 0), 1, -1), 0)
        out[i] = s.astype(np.float32)
    return out


def log_avx2(x: np.ndarray) -> np.ndarray:
    """log256_ps (native/cpu/avx_mathfun.h) of positive normal float32, with GCC's FMAs."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    e = ((bits >> 23).astype(np.int32) - 127).astype(np.float32) + _ONE
    x = ((bits & np.uint32(0x807FFFFF)) | np.uint32(0x3F000000)).view(np.float32)
    small = x < _SQRTHF
    tmp = np.where(small, x, _ZERO)
    x = x - _ONE
    e = e - np.where(small, _ONE, _ZERO)
    x = x + tmp
    z = x * x
    y = fma32(_LOG_P[0], x, _LOG_P[1])
    for p in _LOG_P[2:]:
        y = fma32(y, x, p)
    y = y * x
    y = fma32(y, z, e * _LOG_Q1)  # GCC fuses y*z, not e*q1
    y = y - z * _HALF
    x = x + y
    return x + e * _LOG_Q2


def sincos_avx2(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """sincos256_ps of non-negative float32 (the sign handling of negative x is left out)."""
    j = (x * _FOPI).astype(np.int32)
    j = (j + 1) & ~1
    y = j.astype(np.float32)
    sin_flip = (j & 4) != 0
    cos_flip = ((j - 2) & 4) == 0
    poly = (j & 2) == 0
    for dp in _DP:
        x = fma32(y, dp, x)
    z = x * x
    yc = fma32(_COS_P[0], z, _COS_P[1])
    yc = fma32(yc, z, _COS_P[2])
    yc = yc * z
    yc = fma32(yc, z, -(z * _HALF))
    yc = yc + _ONE
    ys = fma32(_SIN_P[0], z, _SIN_P[1])
    ys = fma32(ys, z, _SIN_P[2])
    ys = ys * z
    ys = fma32(ys, x, x)
    ysin2 = np.where(poly, ys, _ZERO)
    ysin1 = np.where(poly, _ZERO, yc)
    s = ysin1 + ysin2
    c = (yc - ysin1) + (ys - ysin2)
    return np.where(sin_flip, -s, s), np.where(cos_flip, -c, c)


def _pairs(uniform: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Blocks of 16 uniforms as (out, u, v) views: slot j pairs with slot j + 8."""
    blocks = uniform.reshape(-1, 2, 8)
    return np.empty_like(blocks), blocks[:, 0], blocks[:, 1]


def box_muller_float(uniform: np.ndarray, kernel: str) -> np.ndarray:
    """NormalFill16<float> on float32 uniforms (length a multiple of 16)."""
    out, u, v = _pairs(uniform)
    u1 = _ONE - u  # [0, 1) -> (0, 1] for log
    if kernel == "avx2":
        radius = np.sqrt(_MINUS_TWO * log_avx2(u1))
        sin, cos = sincos_avx2(_TWO_PI_F * v)
    else:  # theta is computed in double, then stored as float
        logf, cosf, sinf = (libm_function(name, ctypes.c_float) for name in ("logf", "cosf", "sinf"))
        radius = np.sqrt(_MINUS_TWO * _apply(logf, u1, np.float32))
        theta = (_TWO_PI_D * v.astype(np.float64)).astype(np.float32)
        sin, cos = _apply(sinf, theta, np.float32), _apply(cosf, theta, np.float32)
    out[:, 0] = radius * cos + _ZERO  # fmadd(n, std=1, mean=0): -0 becomes +0
    out[:, 1] = radius * sin + _ZERO
    return out.reshape(-1)


def box_muller_double(uniform: np.ndarray) -> np.ndarray:
    """NormalFill16<double> on float64 uniforms, with libm log/cos/sin (NumPy's log differs)."""
    out, u, v = _pairs(uniform)
    # CPython's math module calls the C library
    radius = np.sqrt(-2.0 * _apply(math.log, 1.0 - u))
    theta = _TWO_PI_D * v
    out[:, 0] = radius * _apply(math.cos, theta) + 0.0
    out[:, 1] = radius * _apply(math.sin, theta) + 0.0
    return out.reshape(-1)


def uniform_float(words: np.ndarray) -> np.ndarray:
    """uniform_real_distribution<float>: low 24 bits (core/TransformationHelper.h)."""
    return (words & 0xFFFFFF).astype(np.float32) * _f32(2.0**-24)


def uniform_double(words: np.ndarray) -> np.ndarray:
    """uniform_real_distribution<double>: low 53 bits of (w0 << 32 | w1)."""
    w = words.astype(np.uint64).reshape(-1, 2)
    return (((w[:, 0] & 0x1FFFFF) << np.uint64(32)) | w[:, 1]).astype(np.float64) * 2.0**-53


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
        out = np.empty(n, dtype=np.float32 if dtype == "bfloat16" else dtype)
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
        """normal_fill (native/cpu/DistributionTemplates.h) into ``out``, a chunk at a time."""
        n = out.size
        full = n - n % 16
        wide = dtype == "float64"
        blocks = self.double_blocks if wide else self.float_blocks
        scratch = np.empty(min(_CHUNK, full), np.float32) if dtype == "float16" else None
        for start in range(0, full, _CHUNK):
            stop = min(start + _CHUNK, full)
            target = out[start:stop] if scratch is None else scratch[: stop - start]
            blocks(target)
            if dtype == "bfloat16":
                target[:] = float32_to_bfloat16_values(target)
            elif dtype == "float16":
                out[start:stop] = target
        if n % 16:
            # float/double first fill every slot with a uniform, then redraw the last 16;
            # half/bfloat16 draw block by block, so their tail follows the last full block
            if dtype in ("float32", "float64"):
                self.words((n - full) * (2 if wide else 1))
            tail = np.empty(16, np.float64 if wide else np.float32)
            blocks(tail)
            out[n - 16:] = float32_to_bfloat16_values(tail) if dtype == "bfloat16" else tail

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
    """Compiled kernels from ``_torch_cpu_numba`` working on a key array in place."""

    def __init__(self, kernel: str) -> None:
        super().__init__(kernel)
        from . import _torch_cpu_numba

        self.kernels = _torch_cpu_numba
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
        if self.kernel == "avx2":
            self.kernels.float_blocks_avx2(self.key, self.pos, out)
        else:
            self.kernels.float_blocks_scalar(self.key, self.pos, out)

    def double_blocks(self, out: np.ndarray) -> None:
        self.kernels.double_blocks(self.key, self.pos, out)


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
    """The engine ``"auto"`` stands for: torch if imported, else numba, else torch, else numpy."""
    if engine not in ENGINES:
        raise UsageError(f"unknown torch-cpu engine {engine!r}; accepted: {', '.join(ENGINES)}")
    if kernel not in KERNELS:
        raise UsageError(f"unknown torch-cpu kernel {kernel!r}; accepted: {', '.join(KERNELS)}")
    if engine == "torch":
        if not module_installed("torch"):
            raise ImportError("torch-cpu engine 'torch' needs torch; use engine 'numba' or 'numpy'")
        if torch_kernel() != kernel:
            raise UsageError(f"engine 'torch' runs the local torch's {torch_kernel()!r} kernel, "
                             f"not {kernel!r}; use engine 'numba' or 'numpy' for it")
    if engine != "auto":
        return engine
    # torch only when already imported: numba is as fast and importing torch takes seconds.
    if module_loaded("torch") and torch_kernel() == kernel:
        return "torch"
    if module_installed("numba"):
        return "numba"
    if module_installed("torch") and torch_kernel() == kernel:
        return "torch"
    return "numpy"


_ENGINE_CLASSES = {"torch": _TorchEngine, "numba": _NumbaEngine, "numpy": _NumpyEngine}


class TorchCPUStream(Stream):
    """``torch.randn`` on a CPU generator seeded with ``seed``, for every dtype and shape.

    Consecutive calls continue one generator, including the cached second value of the
    small-tensor path. ``engine`` and ``kernel`` as in the module docstring; ``self.engine``
    is the engine actually used.
    """

    name = "torch-cpu"

    def __init__(self, seed: int = 0, engine: str = "auto", kernel: str = "avx2") -> None:
        self.kernel = kernel
        self.engine = resolve_engine(engine, kernel)
        self._requested = engine
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
        return {"engine": self._requested, "kernel": self.kernel}

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
    def from_torch_generator(cls, generator: Any, engine: str = "auto", kernel: str = "avx2") -> "TorchCPUStream":
        """A stream that continues where the torch CPU ``generator`` stands (state copied)."""
        stream = cls(0, engine=engine, kernel=kernel)
        stream.set_torch_state(generator.get_state())
        return stream

    def __repr__(self) -> str:
        return f"<xrand stream 'torch-cpu' engine={self.engine!r} kernel={self.kernel!r}>"
