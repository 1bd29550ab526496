"""MindSpore backend: NumPy draws turned into MindSpore tensors, as mindone.diffusers does.

mindone.diffusers draws with a NumPy generator and builds the tensor with
``ms.tensor(array, dtype=dtype)`` (mindone/diffusers/utils/mindspore_utils.py ``randn``), so the
NumPy generator is this backend's native one.
"""
from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional

import numpy as np

from ..checks import UsageError, UsageTypeError
from ..numeric import cast_float64
from .base import Backend

#: MindSpore's device targets, by lower-case name.
DEVICE_TARGETS = {"cpu": "CPU", "gpu": "GPU", "ascend": "Ascend"}


def device_target(device: Any) -> str:
    """MindSpore's name for a device target ("cpu", "Ascend:0" -> "CPU", "Ascend")."""
    if not isinstance(device, str):
        raise UsageTypeError(f"device must be a string such as 'CPU' or 'Ascend', got {device!r}")
    target = DEVICE_TARGETS.get(device.partition(":")[0].lower())
    if target is None:
        raise UsageError(f"unknown MindSpore device {device!r}; accepted: {', '.join(DEVICE_TARGETS.values())}")
    return target


@contextlib.contextmanager
def use_device_target(device: Optional[str]) -> Iterator[str]:
    """MindSpore's device_target set to ``device`` inside the block (None: keep it), restored after."""
    import mindspore as ms

    previous = ms.get_context("device_target")
    wanted = previous if device is None else device_target(device)
    if wanted != previous:
        ms.set_context(device_target=wanted)
    try:
        yield wanted
    finally:
        if ms.get_context("device_target") != previous:
            ms.set_context(device_target=previous)


class MindSporeBackend(Backend):
    """mindone.diffusers on MindSpore: its native generator is ``numpy.random.Generator``.

    ``randn_native`` (the base class's) is mindone's ``randn_tensor``: a float64 draw, then
    ``ms.tensor(array, dtype=dtype)``; lists draw one ``(1, ...)`` item per generator and
    concatenate.
    """

    name = "mindspore"
    module = "mindspore"
    extra = "mindspore"

    def dtype(self, name: str) -> Any:
        import mindspore as ms

        return getattr(ms, name)

    def device(self, device: Any) -> Any:
        """MindSpore places tensors by its context, so a device must name the context's target."""
        if device is None:
            return None
        kind = device_target(device)
        import mindspore as ms

        target = ms.get_context("device_target")
        if kind != target:
            raise UsageError(
                f"device {device!r} is not MindSpore's device_target {target!r}; MindSpore places tensors by "
                f"its context: call mindspore.set_context(device_target=...) or pass device=None"
            )
        return device

    def from_numpy(self, array: np.ndarray, dtype: Optional[str], device: Any = None) -> Any:
        import mindspore as ms

        if device is not None:
            self.device(device)
        if dtype is not None and array.dtype != dtype:
            if array.dtype != np.float64 or dtype not in ("float32", "float16"):
                return ms.tensor(array, dtype=self.dtype(dtype))
            array = cast_float64(array, dtype)  # MindSpore's own cast gives the same bits
        # Wrapping the array without a copy is several times faster than ms.tensor (figure 1 of benchmarks/RESULTS.md).
        return ms.Tensor.from_numpy(np.ascontiguousarray(array))

    def to_numpy(self, tensor: Any) -> np.ndarray:
        import mindspore as ms

        if tensor.dtype == ms.bfloat16:
            tensor = tensor.float()
        return tensor.asnumpy()

    def manual_seed(self, seed: int) -> None:
        import mindspore as ms

        ms.set_seed(seed & 0xFFFFFFFF)  # MindSpore accepts 32-bit seeds only

    # mindone.diffusers.utils.testing_utils.enable_full_determinism
    def determinism_state(self) -> Dict[str, Any]:
        import mindspore as ms

        return {key: ms.get_context(key) for key in ("deterministic", "pynative_synchronize")}

    def enable_determinism(self) -> None:
        import mindspore as ms

        ms.set_context(deterministic="ON", pynative_synchronize=True)

    def restore_determinism(self, state: Dict[str, Any]) -> None:
        import mindspore as ms

        ms.set_context(**state)

    def versions(self) -> Dict[str, str]:
        import mindspore as ms

        info = {"mindspore": ms.__version__, "mindspore_device_target": ms.get_context("device_target")}
        try:
            import mindone

            info["mindone"] = mindone.__version__
        except ImportError:
            pass
        return info
