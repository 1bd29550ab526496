"""Float casts that every backend agrees on, including bfloat16 without a NumPy bfloat16 type."""
from __future__ import annotations

import numpy as np


def float32_to_bfloat16_values(x: np.ndarray) -> np.ndarray:
    """Round float32 to the nearest bfloat16 (ties to even), returned as float32.

    Same rounding as torch's and MindSpore's float32 -> bfloat16 casts; NaN stays NaN.
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    rounded &= np.uint32(0xFFFF0000)
    out = rounded.view(np.float32)
    nan = np.isnan(x)
    if nan.any():
        out = np.where(nan, x, out)
    return out


def cast_float64(x: np.ndarray, dtype: str) -> np.ndarray:
    """Cast a float64 array to ``dtype`` the way torch's and MindSpore's casts do.

    Both round float64 -> bfloat16 and float64 -> float16 through float32 (two roundings:
    1 + 2**-8 + 2**-30 becomes bfloat16 1.0 and 1 + 2**-11 + 2**-40 float16 1.0 in both, where
    NumPy's direct float16 cast gives 1.001), so this does the same.
    """
    if dtype == "float64":
        return x
    if dtype == "bfloat16":
        return float32_to_bfloat16_values(x.astype(np.float32))
    return x.astype(np.float32).astype(dtype, copy=False)
