"""The torch-cpu stream's reference kernels in NumPy: torch's uniforms and Box-Muller, bit for bit.

float32 follows the AVX2 kernel (avx_mathfun.h with GCC's fused multiply-adds) or the scalar
libm kernel; float64 follows NormalFill16<double> with libm log/cos/sin.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import sys
from typing import Any, Dict, Tuple

import numpy as np


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
