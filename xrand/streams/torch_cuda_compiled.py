"""Compiled, multi-core kernels of the torch-cuda stream (engine "numba"); imported only when used.

Every value equals the NumPy engine's in torch_cuda.py: the same Philox words, the same float
steps in the same order (sin and cos by the polynomials of _curand.py), and the logarithm taken
by NumPy's own ``np.log`` between the two compiled passes, because NumPy's float64 log (SIMD on
AVX-512 machines) and the C library's differ in the last bit for about a fifth of inputs
(measured with NumPy 1.26).
"""
from __future__ import annotations

import threading

import numpy as np
from numba import njit

from ._curand import (
    BLOCK_SIZE, COS_COEF, INV32, MASK32, PHILOX_M, PHILOX_W, PIO2_PARTS, SIN_COEF, TWO_OVER_PI, V_SCALE, V_SHIFT,
)
from ._parallel import Tasks

_CHUNK_UNITS = 1 << 16  # Philox calls per pass, a multiple of BLOCK_SIZE (bounds the scratch to 2 MiB)
_M0, _M1 = PHILOX_M
_W0, _W1 = PHILOX_W
_U21, _U32 = np.uint64(21), np.uint64(32)
_HALF_INV32 = INV32 / np.float32(2)
_MINUS_TWO = np.float32(-2.0)
_S0, _S1, _S2, _S3, _S4, _S5 = SIN_COEF
_C0, _C1, _C2, _C3, _C4, _C5 = COS_COEF
_P1, _P2, _P3 = PIO2_PARTS


@njit(inline="always")
def _sincos_reduced(r):
    """torch_cuda._sincos_reduced for one value."""
    z = r * r
    ps = ((((_S0 * z + _S1) * z + _S2) * z + _S3) * z + _S4) * z + _S5
    pc = ((((_C0 * z + _C1) * z + _C2) * z + _C3) * z + _C4) * z + _C5
    return r + r * z * ps, 1.0 - 0.5 * z + z * z * pc


@njit(inline="always")
def _quadrant(q, s, c):
    """torch_cuda._quadrant for one value."""
    q = q & 3
    sin_x, cos_x = (c, s) if q & 1 else (s, c)
    if q >= 2:
        sin_x = -sin_x
    if q == 1 or q == 2:
        cos_x = -cos_x
    return sin_x, cos_x


@njit(inline="always")
def _sincos(x):
    """torch_cuda._sincos for one value."""
    j = np.rint(x * TWO_OVER_PI)
    r = ((x - j * _P1) - j * _P2) - j * _P3
    s, c = _sincos_reduced(r)
    return _quadrant(np.int64(j), s, c)


@njit(inline="always")
def _philox(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on uint64 values holding 32-bit words."""
    for _ in range(10):
        p0 = _M0 * c0
        p1 = _M1 * c2
        c0, c1, c2, c3 = (p1 >> _U32) ^ c1 ^ k0, p1 & MASK32, (p0 >> _U32) ^ c3 ^ k1, p0 & MASK32
        k0 = (k0 + _W0) & MASK32
        k1 = (k1 + _W1) & MASK32
    return c0, c1, c2, c3


# Each CUDA block of 256 threads calls a function on contiguous slices: LLVM vectorizes those
# loops (8 lanes with AVX-512), which it did not do for the same loops inlined into the caller.

@njit(cache=True)
def _store(out, start, values):
    """``out[start:start + len(values)] = values``, cast, for the elements inside ``out``.

    Through a view of ``out``: LLVM vectorizes this loop, not the same loop indexing ``out`` at
    ``start + j`` (0.20 against 0.58 ns a value, measured).
    """
    dst = out[start:start + values.size]
    for j in range(dst.size):
        dst[j] = values[j]


@njit(cache=True)
def _prepare4_block(c0, c1, idx0, key0, key1, u1, u2, v1, v2):
    for j in range(u1.size):
        x0, x1, x2, x3 = _philox(c0, c1, np.uint64(idx0 + j), np.uint64(0), key0, key1)
        u1[j] = np.float64(np.float32(x0) * INV32 + _HALF_INV32)
        u2[j] = np.float64(np.float32(x2) * INV32 + _HALF_INV32)
        v1[j] = np.float64(np.float32(np.float64(x1) * V_SCALE + V_SHIFT))
        v2[j] = np.float64(np.float32(np.float64(x3) * V_SCALE + V_SHIFT))


@njit(cache=True, nogil=True)
def prepare4(u0, count, threads, base, key0, key1, log_in, angle):
    """curand_normal4, first pass: u (for the log) and the angle v of word pairs p = 0, 1 at p*count + i."""
    for blk in range(count // BLOCK_SIZE):  # a block of 256 threads lies in one iteration
        first = u0 + blk * BLOCK_SIZE
        k = first // threads
        counter = np.uint64(base + k)
        lo, hi = blk * BLOCK_SIZE, (blk + 1) * BLOCK_SIZE
        _prepare4_block(counter & MASK32, counter >> _U32, first - k * threads, key0, key1, log_in[lo:hi],
                        log_in[count + lo:count + hi], angle[lo:hi], angle[count + lo:count + hi])


@njit(cache=True)
def _box_muller4_block(log_u, angle):
    """(s sin v, s cos v) in place of (log u, v)."""
    for i in range(log_u.size):
        s = np.float64(np.sqrt(_MINUS_TWO * np.float32(log_u[i])))
        sin_v, cos_v = _sincos(angle[i])
        log_u[i], angle[i] = s * sin_v, s * cos_v


@njit(cache=True, nogil=True)
def finish4(u0, count, threads, log_u, angle, out):
    """curand_normal4, second pass: (s1 sin v1, s1 cos v1, s2 sin v2, s2 cos v2) into ``out``."""
    for blk in range(count // BLOCK_SIZE):
        first = u0 + blk * BLOCK_SIZE
        k = first // threads
        element = k * 4 * threads + first - k * threads  # of component 0, thread j = 0
        for p in range(2):
            lo = p * count + blk * BLOCK_SIZE
            _box_muller4_block(log_u[lo:lo + BLOCK_SIZE], angle[lo:lo + BLOCK_SIZE])
            _store(out, element + 2 * p * threads, log_u[lo:lo + BLOCK_SIZE])
            _store(out, element + (2 * p + 1) * threads, angle[lo:lo + BLOCK_SIZE])


@njit(cache=True)
def _prepare2_block(c0, c1, idx0, key0, key1, u, v):
    for j in range(u.size):
        x0, x1, x2, x3 = _philox(c0, c1, np.uint64(idx0 + j), np.uint64(0), key0, key1)
        u[j] = np.float64(x0 ^ (x1 << _U21)) * 2.0**-53 + 2.0**-54
        v[j] = np.float64(x2 ^ (x3 << _U21)) * 2.0**-52 + 2.0**-53


@njit(cache=True, nogil=True)
def prepare2(u0, count, threads, base, key0, key1, log_in, angle):
    """curand_normal2_double, first pass: 53-bit u and v."""
    for blk in range(count // BLOCK_SIZE):
        first = u0 + blk * BLOCK_SIZE
        k = first // threads
        counter = np.uint64(base + k)
        lo, hi = blk * BLOCK_SIZE, (blk + 1) * BLOCK_SIZE
        _prepare2_block(counter & MASK32, counter >> _U32, first - k * threads, key0, key1, log_in[lo:hi],
                        angle[lo:hi])


@njit(cache=True)
def _box_muller2_block(log_u, angle):
    """(s sinpi v, s cospi v) in place of (log u, v), sincospi as torch_cuda._sincospi."""
    for i in range(log_u.size):
        s = np.sqrt(-2.0 * log_u[i])
        v = angle[i]
        half_turns = np.rint(2.0 * v)
        sa, ca = _sincos_reduced(np.pi * (v - 0.5 * half_turns))
        sin_v, cos_v = _quadrant(np.int64(half_turns), sa, ca)
        log_u[i], angle[i] = s * sin_v, s * cos_v


@njit(cache=True, nogil=True)
def finish2(u0, count, threads, log_u, angle, out):
    """curand_normal2_double, second pass: (s sinpi v, s cospi v) into ``out``."""
    for blk in range(count // BLOCK_SIZE):
        first = u0 + blk * BLOCK_SIZE
        k = first // threads
        element = k * 2 * threads + first - k * threads
        lo = blk * BLOCK_SIZE
        _box_muller2_block(log_u[lo:lo + BLOCK_SIZE], angle[lo:lo + BLOCK_SIZE])
        _store(out, element, log_u[lo:lo + BLOCK_SIZE])
        _store(out, element + threads, angle[lo:lo + BLOCK_SIZE])


_scratch = threading.local()


def _pass(u0, count, threads, unroll, base, key0, key1, out):
    """Philox calls ``u0:u0 + count`` and their values, on this thread's scratch arrays."""
    pairs = 2 if unroll == 4 else 1
    if getattr(_scratch, "log_in", None) is None or _scratch.log_in.size < count * pairs:
        _scratch.log_in, _scratch.angle = np.empty(_CHUNK_UNITS * pairs), np.empty(_CHUNK_UNITS * pairs)
    log_in, angle = _scratch.log_in[: count * pairs], _scratch.angle[: count * pairs]
    prepare, finish = (prepare4, finish4) if unroll == 4 else (prepare2, finish2)
    prepare(u0, count, threads, base, key0, key1, log_in, angle)
    np.log(log_in, out=log_in)
    finish(u0, count, threads, log_in, angle, out)


def draw(out: np.ndarray, threads: int, unroll: int, base: int, seed: int) -> None:
    """torch's grid-stride kernel into ``out`` (float32 for unroll 4, float64 for unroll 2), on every core."""
    units = ((out.size - 1) // (threads * unroll) + 1) * threads  # Philox calls: iterations x threads
    key0, key1 = np.uint64(seed & 0xFFFFFFFF), np.uint64(seed >> 32)
    tasks = Tasks(None if units > _CHUNK_UNITS else 1)
    try:
        for u0 in range(0, units, _CHUNK_UNITS):
            tasks.submit(_pass, u0, min(_CHUNK_UNITS, units - u0), threads, unroll, base, key0, key1, out)
    finally:
        tasks.wait()
