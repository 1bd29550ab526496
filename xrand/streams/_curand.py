"""Constants of Philox4x32-10 (Random123) and cuRAND's normal transforms, for both torch-cuda engines."""
import numpy as np

BLOCK_SIZE = 256  # DistributionTemplates.h: block_size_bound; the threads launched are a multiple

MASK32 = np.uint64(0xFFFFFFFF)
PHILOX_M = (np.uint64(0xD2511F53), np.uint64(0xCD9E8D57))
PHILOX_W = (np.uint64(0x9E3779B9), np.uint64(0xBB67AE85))

# curand_globals.h: CURAND_2POW32_INV (2.3283064e-10f, exactly 2**-32) and
# CURAND_2POW32_INV_2PI (2.3283064e-10f * 6.2831855f, folded in float).
INV32 = np.float32(2.3283064e-10)
INV32_2PI = np.float32(np.float32(2.3283064e-10) * np.float32(6.2831855))
V_SCALE, V_SHIFT = np.float64(INV32_2PI), np.float64(INV32_2PI / np.float32(2))

# sin and cos in float64 without the C library (whose results vary between machines and which
# cannot be vectorised): Cephes sin.c's minimax polynomials on [-pi/4, pi/4] and pi/2 in three
# parts (j * part is exact for the j <= 4 used here). Both engines evaluate them with the same
# float64 operations in the same order, so they agree bit for bit; error about 1 ulp.
TWO_OVER_PI = 0.63661977236758134308
PIO2_PARTS = (2 * 7.85398125648498535156e-1, 2 * 3.77489470793079817668e-8, 2 * 2.69515142907905952645e-15)
SIN_COEF = (1.58962301576546568060e-10, -2.50507477628578072866e-8, 2.75573136213857245213e-6,
            -1.98412698295895385996e-4, 8.33333333332211858878e-3, -1.66666666666666307295e-1)
COS_COEF = (-1.13585365213876817300e-11, 2.08757008419747316778e-9, -2.75573141792967388112e-7,
            2.48015872888517045348e-5, -1.38888888888730564116e-3, 4.16666666666665929218e-2)
