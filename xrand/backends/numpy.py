"""NumPy backend: plain ndarrays on the CPU. Needs nothing beyond the core."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..numeric import cast_float64, float32_to_bfloat16_values
from .base import Backend, seed_global_numpy_generator


class NumpyBackend(Backend):
    name = "numpy"

    def dtype(self, name: str) -> Any:
        if name == "bfloat16":
            # NumPy has no bfloat16: values are rounded to bfloat16 and held in float32.
            return np.dtype(np.float32)
        return np.dtype(name)

    def from_numpy(self, array: np.ndarray, dtype: Optional[str], device: Any = None) -> np.ndarray:
        self.device(device)
        if dtype is None or array.dtype.name == dtype:
            return array
        if array.dtype == np.float64:
            return cast_float64(array, dtype)  # through float32, as torch and MindSpore cast
        if dtype == "bfloat16":
            return float32_to_bfloat16_values(array.astype(np.float32))
        return array.astype(dtype)

    def to_numpy(self, tensor: Any) -> np.ndarray:
        return np.asarray(tensor)

    def manual_seed(self, seed: int) -> None:
        """NumPy's legacy global RNG and xrand's global NumPy generator (``generator=None``)."""
        # np.random.seed takes 32-bit seeds; larger ones go in as two 32-bit words.
        np.random.seed(seed if seed < 2**32 else [seed & 0xFFFFFFFF, seed >> 32])
        seed_global_numpy_generator(seed)

    def versions(self):
        return {"numpy": np.__version__}
