"""Compiled kernels of the ``torch-cpu`` stream (numba engine); imported only when it is used.

The state is a ``uint32[624]`` key and an ``int64[1]`` position, changed in place. A draw of
blocks of 16 puts the untempered words into the output itself (``raw_words``), then a ``*_range``
function turns them into torch's Box-Muller output in place, exactly as the matching code in
``reference.py``; the numba-parallel engine runs the ``*_range`` calls on several threads.
"""
from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from . import reference as ref
from .reference import libm_function
from .state import N

M = 397
_MATRIX_A = np.uint64(0x9908B0DF)
_UPPER = np.uint64(0x80000000)
_LOWER = np.uint64(0x7FFFFFFF)
_U1, _MASK21, _U32 = np.uint64(1), np.uint64(0x1FFFFF), np.uint64(32)
# tempering and 24-bit uniforms in uint32 (twice as many lanes to a vector register as uint64)
_S7, _S11, _S15, _S18 = (np.uint32(k) for k in (7, 11, 15, 18))
_TEMPER_B, _TEMPER_C, _MASK24 = np.uint32(0x9D2C5680), np.uint32(0xEFC60000), np.uint32(0xFFFFFF)

_SUB = 1024  # values transformed at a time (the scratch stays in L1)

# the float32 constants of avx_mathfun.h, shared with the NumPy reference
f32 = np.float32
_ONE, _ZERO, _HALF, _MINUS_TWO = f32(1.0), f32(0.0), f32(0.5), f32(-2.0)
_TWO_PI_F, _TWO_PI_D, _SQRTHF, _FOPI = ref._TWO_PI_F, ref._TWO_PI_D, ref._SQRTHF, ref._FOPI
_INV_2_24, _INV_2_53 = f32(2.0**-24), 2.0**-53
_LP0, _LP1, _LP2, _LP3, _LP4, _LP5, _LP6, _LP7, _LP8 = ref._LOG_P
_LQ1, _LQ2 = ref._LOG_Q1, ref._LOG_Q2
_DP1, _DP2, _DP3 = ref._DP
_SP0, _SP1, _SP2 = ref._SIN_P
_CP0, _CP1, _CP2 = ref._COS_P
_EXP_MASK, _HALF_BITS = np.uint32(0x807FFFFF), np.uint32(0x3F000000)

# the C library's math, as torch's scalar kernels call it (NumPy's own float64 log differs)
_logf, _cosf, _sinf = (libm_function(n, ctypes.c_float) for n in ("logf", "cosf", "sinf"))
_log, _cos, _sin = (libm_function(n, ctypes.c_double) for n in ("log", "cos", "sin"))


@intrinsic
def fma32(typingctx, a, b, c):
    """Single-rounding float32 a*b+c (llvm.fma.f32, a vfmadd on FMA machines)."""
    if not all(t == types.float32 for t in (a, b, c)):
        return None

    def codegen(context, builder, sig, args):
        flt = ir.FloatType()
        fn = builder.module.declare_intrinsic("llvm.fma", [flt], ir.FunctionType(flt, [flt] * 3))
        return builder.call(fn, args)

    return types.float32(types.float32, types.float32, types.float32), codegen


@intrinsic
def f32_bits(typingctx, x):
    """The bits of a float32 as uint32."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.uint32(types.float32), codegen


@intrinsic
def bits_f32(typingctx, x):
    """The float32 whose bits are the low 32 bits of the integer ``x``."""
    if not isinstance(x, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        low = builder.trunc(args[0], ir.IntType(32)) if x.bitwidth > 32 else args[0]
        return builder.bitcast(low, ir.FloatType())

    return types.float32(x), codegen


@njit(inline="always")
def _temper(w):
    y = np.uint32(w)
    y ^= y >> _S11
    y ^= (y << _S7) & _TEMPER_B
    y ^= (y << _S15) & _TEMPER_C
    return y ^ (y >> _S18)


@njit(cache=True)
def _twist(key):
    for i in range(N - M):
        y = (np.uint64(key[i]) & _UPPER) | (np.uint64(key[i + 1]) & _LOWER)
        key[i] = np.uint64(key[i + M]) ^ (y >> _U1) ^ ((y & _U1) * _MATRIX_A)
    for i in range(N - M, N - 1):
        y = (np.uint64(key[i]) & _UPPER) | (np.uint64(key[i + 1]) & _LOWER)
        key[i] = np.uint64(key[i + M - N]) ^ (y >> _U1) ^ ((y & _U1) * _MATRIX_A)
    y = (np.uint64(key[N - 1]) & _UPPER) | (np.uint64(key[0]) & _LOWER)
    key[N - 1] = np.uint64(key[M - 1]) ^ (y >> _U1) ^ ((y & _U1) * _MATRIX_A)


@njit(cache=True)
def words(key, pos, out, count):
    """Write the next ``count`` tempered mt19937 words into ``out[:count]``."""
    p = pos[0]
    i = 0
    while i < count:
        if p == N:
            _twist(key)
            p = 0
        k = min(N - p, count - i)
        for t in range(k):
            out[i + t] = _temper(key[p + t])
        i += k
        p += k
    pos[0] = p


@njit(inline="always")
def _uniform24(w):
    # through int32: a 24-bit integer converts exactly, and vectorizes (uint64 to float does not)
    return f32(np.int32(np.uint32(w) & _MASK24)) * _INV_2_24


@njit(inline="always")
def _uniform53(hi, lo):
    return np.float64(((np.uint64(hi) & _MASK21) << _U32) | np.uint64(lo)) * _INV_2_53


@njit(inline="always")
def _log_avx2(x):
    """log256_ps for one positive normal float32, with the FMAs GCC makes."""
    bits = f32_bits(x)
    e = f32(np.int64(bits >> np.uint32(23)) - 127) + _ONE
    x = bits_f32((bits & _EXP_MASK) | _HALF_BITS)
    small = x < _SQRTHF
    tmp = x if small else _ZERO
    x = x - _ONE
    e = e - (_ONE if small else _ZERO)
    x = x + tmp
    z = x * x
    y = fma32(_LP0, x, _LP1)
    y = fma32(y, x, _LP2)
    y = fma32(y, x, _LP3)
    y = fma32(y, x, _LP4)
    y = fma32(y, x, _LP5)
    y = fma32(y, x, _LP6)
    y = fma32(y, x, _LP7)
    y = fma32(y, x, _LP8)
    y = y * x
    y = fma32(y, z, e * _LQ1)
    y = y - z * _HALF
    x = x + y
    return x + e * _LQ2


@njit(inline="always")
def _box_muller_avx2(u1, u2):
    """normal_fill_16_AVX2 for one (u1, u2) pair: sincos256_ps of 2*pi*u2, log256_ps of u1."""
    radius = np.sqrt(_MINUS_TWO * _log_avx2(u1))
    x = _TWO_PI_F * u2  # >= 0, so the sine's sign bit is 0
    j = np.int64(x * _FOPI)
    j = (j + 1) & ~np.int64(1)
    y = f32(j)
    sin_flip = (j & 4) != 0
    cos_flip = ((j - 2) & 4) == 0
    poly = (j & 2) == 0
    x = fma32(y, _DP1, x)
    x = fma32(y, _DP2, x)
    x = fma32(y, _DP3, x)
    z = x * x
    yc = fma32(_CP0, z, _CP1)
    yc = fma32(yc, z, _CP2)
    yc = yc * z
    yc = fma32(yc, z, -(z * _HALF))
    yc = yc + _ONE
    ys = fma32(_SP0, z, _SP1)
    ys = fma32(ys, z, _SP2)
    ys = ys * z
    ys = fma32(ys, x, x)
    ysin2 = ys if poly else _ZERO
    ysin1 = _ZERO if poly else yc
    s = ysin1 + ysin2
    c = (yc - ysin1) + (ys - ysin2)
    s = -s if sin_flip else s
    c = -c if cos_flip else c
    return radius * c + _ZERO, radius * s + _ZERO


@njit(cache=True)
def _box_muller_avx2_pairs(u1, u2, cos_out, sin_out):
    # a plain loop over pairs, so LLVM vectorizes it (8 lanes, like the AVX2 original)
    for i in range(u1.size):
        cos_out[i], sin_out[i] = _box_muller_avx2(_ONE - u1[i], u2[i])


# -- blocks of 16 ------------------------------------------------------------------------------
# mt19937 must run in order, but each block of 16 values is transformed on its own: a chunk's
# untempered words are drawn into the output itself, then its blocks are tempered
# and transformed, by another thread (nogil) while the next chunk's words are drawn.

PAR_CHUNK = 1 << 17  # values a task transforms (a multiple of 16; its 512 KiB of words stay in L2)


@njit(cache=True, nogil=True)
def raw_words(key, pos, out):
    """The next ``out.size`` mt19937 state words, untempered (``_temper`` finishes each)."""
    p = pos[0]
    i = 0
    while i < out.size:
        if p == N:
            _twist(key)
            p = 0
        k = min(N - p, out.size - i)
        out[i:i + k] = key[p:p + k]
        i += k
        p += k
    pos[0] = p


@njit(inline="always")
def _round(x, bf16):
    """``x``, or the nearest bfloat16 (ties to even) when ``bf16``, as numeric.float32_to_bfloat16_values."""
    if not bf16:
        return x
    b = np.uint64(f32_bits(x))
    return bits_f32((b + np.uint64(0x7FFF) + ((b >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000))


@njit(cache=True, nogil=True)
def float_avx2_range(words, out, lo, hi, bf16):
    """normal_fill_16_AVX2 on values ``lo:hi``: untempered ``words`` in, ``out`` (may be the same memory) out.

    Every loop is a plain loop over a slice (indices LLVM knows are in range), so each one
    vectorizes: tempering, gathering slots j and j + 8 of each block into two arrays, the
    transform, and scattering back.
    """
    half = _SUB // 2
    uniforms = np.empty(_SUB, np.float32)
    u1, u2 = np.empty(half, np.float32), np.empty(half, np.float32)
    cos_part, sin_part = np.empty(half, np.float32), np.empty(half, np.float32)
    for start in range(lo, hi, _SUB):
        k = min(_SUB, hi - start)
        w, o = words[start:start + k], out[start:start + k]
        for i in range(k):
            uniforms[i] = _uniform24(_temper(w[i]))
        for i in range(k // 2):
            s = i + (i & ~7)  # pair i: slot i % 8 of block i // 8
            u1[i], u2[i] = uniforms[s], uniforms[s + 8]
        _box_muller_avx2_pairs(u1[: k // 2], u2[: k // 2], cos_part, sin_part)
        for i in range(k // 2):
            s = i + (i & ~7)
            o[s], o[s + 8] = cos_part[i], sin_part[i]
        if bf16:
            for i in range(k):
                o[i] = _round(o[i], True)


@njit(nogil=True)  # calls libm through ctypes, so it cannot be cached
def float_scalar_range(words, out, lo, hi, bf16):
    """NormalFill16<float> with libm logf/cosf/sinf on values ``lo:hi``, as float_avx2_range."""
    for o in range(lo, hi, 16):
        for j in range(8):  # each j reads and writes only slots j and j + 8
            u1 = _ONE - _uniform24(_temper(words[o + j]))
            u2 = _uniform24(_temper(words[o + 8 + j]))
            radius = np.sqrt(_MINUS_TWO * f32(_logf(u1)))
            theta = f32(_TWO_PI_D * np.float64(u2))
            out[o + j] = _round(radius * f32(_cosf(theta)) + _ZERO, bf16)
            out[o + 8 + j] = _round(radius * f32(_sinf(theta)) + _ZERO, bf16)


@njit(nogil=True)  # calls libm through ctypes, so it cannot be cached
def double_range(words, out, lo, hi, bf16):
    """NormalFill16<double> with libm log/cos/sin on values ``lo:hi``, as float_avx2_range; two words a value."""
    for o in range(lo, hi, 16):
        for j in range(8):  # value j's words lie under values j and j + 8 only
            i1, i2 = 2 * (o + j), 2 * (o + 8 + j)
            u1 = 1.0 - _uniform53(_temper(words[i1]), _temper(words[i1 + 1]))
            u2 = _uniform53(_temper(words[i2]), _temper(words[i2 + 1]))
            radius = np.sqrt(-2.0 * _log(u1))
            theta = _TWO_PI_D * u2
            out[o + j] = radius * _cos(theta) + 0.0
            out[o + 8 + j] = radius * _sin(theta) + 0.0
