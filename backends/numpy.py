"""NumPy backend: plain ndarrays on the CPU. Needs nothing beyond the core."""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import Backend, check_layout
from ..numeric import cast_float64, float32_to_bfloat16_values


class NumpyBackend(Backend):
    name = "numpy"

    def is_tensor(self, obj: Any) -> bool:
        return isinstance(obj, np.ndarray)

    def dtype(self, name: str) -> Any:
        if name == "bfloat16":
            # NumPy has no bfloat16: values are rounded to bfloat16 and held in float32.
            return np.dtype(np.float32)
        return np.dtype(name)

    def device(self, device: Any) -> Any:
        if device is None or (isinstance(device, str) and device.lower() == "cpu"):
            return "cpu"
        raise ValueError(f"unknown device {device!r} for the numpy backend; accepted: 'cpu' or None")

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

    def cat(self, tensors: Sequence[Any]) -> np.ndarray:
        return np.concatenate(tensors, axis=0)

    def randn(self, shape: Tuple[int, ...], dtype: Optional[str], device: Any = None, layout: Any = None) -> Any:
        from ..noise import global_numpy_generator

        check_layout(self.name, layout)
        self.device(device)
        return self.from_numpy(global_numpy_generator().standard_normal(shape), dtype or "float64")

    def versions(self):
        return {"numpy": np.__version__}
