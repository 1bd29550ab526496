"""PyTorch backend: tensors on any torch device; torch.Generator draws exactly as diffusers does."""
from __future__ import annotations

import os
import sys
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..checks import UsageError, UsageTypeError, dtype_name
from .base import Backend


class TorchBackend(Backend):
    name = "torch"
    module = "torch"
    extra = "torch"
    layouts = True

    def is_native_generator(self, obj: Any) -> bool:
        torch = sys.modules.get("torch")
        return (torch is not None and isinstance(obj, torch.Generator)) or isinstance(obj, np.random.Generator)

    def dtype(self, name: str) -> Any:
        import torch

        return getattr(torch, name)

    def device(self, device: Any) -> Any:
        import torch

        if device is None or isinstance(device, torch.device):
            return device
        if not isinstance(device, str):
            raise UsageTypeError(f"device must be a string or torch.device, got {device!r} ({type(device).__name__})")
        try:
            return torch.device(device)
        except RuntimeError:
            raise UsageError(
                f"unknown device {device!r} for the torch backend; accepted: 'cpu', 'cuda', 'cuda:N', "
                "'mps' or any torch.device"
            ) from None

    def from_numpy(self, array: np.ndarray, dtype: Optional[str], device: Any = None) -> Any:
        import torch

        tensor = torch.from_numpy(np.ascontiguousarray(array))
        target = None if dtype is None else self.dtype(dtype)
        if device is None and (target is None or target == tensor.dtype):
            return tensor  # what .to() would return, without its cost
        return tensor.to(device=self.device(device), dtype=target)

    def to_numpy(self, tensor: Any) -> np.ndarray:
        import torch

        tensor = tensor.detach().cpu()
        if tensor.dtype == torch.bfloat16:
            tensor = tensor.float()
        return tensor.numpy()

    def randn(self, shape: Tuple[int, ...], dtype: Optional[str], device: Any = None, layout: Any = None) -> Any:
        """torch's global RNG of the device, as diffusers' randn_tensor with ``generator=None``."""
        return self._diffusers_randn(shape, None, device, None if dtype is None else self.dtype(dtype), layout)

    def randn_native(self, shape, generator, device=None, dtype=None, layout=None) -> Any:
        """torch.Generator(s): diffusers' randn_tensor; numpy.random.Generator(s): mindone's rule."""
        torch = sys.modules["torch"]
        if isinstance(generator, torch.Generator) and layout is None and generator.device.type == "cpu" \
                and (dtype is None or isinstance(dtype, torch.dtype)):
            # what diffusers does for the usual call (one CPU generator, a CPU or no device), made cheap:
            # a CPU generator draws on the CPU, so its .to(device) is a no-op
            if device is None:
                return torch.randn(shape, generator=generator, dtype=dtype)
            if isinstance(device, torch.device) and device.type == "cpu":
                return torch.randn(shape, generator=generator, device=device, dtype=dtype)
        first = generator[0] if isinstance(generator, list) else generator
        if isinstance(first, np.random.Generator):
            if layout is not None:
                raise UsageError(f"layout={layout!r} cannot be used with a numpy.random.Generator; pass None")
            return super().randn_native(shape, generator, device, dtype)
        if dtype is not None and not isinstance(dtype, torch.dtype):
            dtype = self.dtype(dtype_name(dtype))
        return self._diffusers_randn(shape, generator, device, dtype, layout)

    def _diffusers_randn(self, shape, generator, device=None, dtype=None, layout=None) -> Any:
        """diffusers.utils.torch_utils.randn_tensor, line for line (diffusers 0.35)."""
        import torch

        device = self.device(device)
        rand_device = device
        batch_size = shape[0] if shape else 1
        layout = layout or torch.strided
        device = device or torch.device("cpu")

        if generator is not None:
            gen_device_type = generator.device.type if not isinstance(generator, list) else generator[0].device.type
            if gen_device_type != device.type and gen_device_type == "cpu":
                rand_device = "cpu"
            elif gen_device_type != device.type and gen_device_type == "cuda":
                raise UsageError(f"Cannot generate a {device} tensor from a generator of type {gen_device_type}.")

        if isinstance(generator, list) and len(generator) == 1:
            generator = generator[0]

        if isinstance(generator, list):
            shape = (1,) + tuple(shape[1:])
            latents = [
                torch.randn(shape, generator=generator[i], device=rand_device, dtype=dtype, layout=layout)
                for i in range(batch_size)
            ]
            return torch.cat(latents, dim=0).to(device)
        return torch.randn(shape, generator=generator, device=rand_device, dtype=dtype, layout=layout).to(device)

    def manual_seed(self, seed: int) -> None:
        import torch

        torch.manual_seed(seed)  # also seeds every CUDA device

    # diffusers.utils.torch_utils.enable_full_determinism
    _ENV = {"CUDA_LAUNCH_BLOCKING": "1", "CUBLAS_WORKSPACE_CONFIG": ":16:8"}

    def determinism_state(self) -> Dict[str, Any]:
        import torch

        return {
            "env": {key: os.environ.get(key) for key in self._ENV},
            "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
            "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "cudnn_deterministic": torch.backends.cudnn.deterministic,
            "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        }

    def enable_determinism(self) -> None:
        import torch

        os.environ.update(self._ENV)
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        torch.backends.cuda.matmul.allow_tf32 = False

    def restore_determinism(self, state: Dict[str, Any]) -> None:
        import torch

        for key, value in state["env"].items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        torch.use_deterministic_algorithms(state["deterministic_algorithms"], warn_only=state["warn_only"])
        torch.backends.cudnn.deterministic = state["cudnn_deterministic"]
        torch.backends.cudnn.benchmark = state["cudnn_benchmark"]
        torch.backends.cuda.matmul.allow_tf32 = state["allow_tf32"]

    def versions(self) -> Dict[str, str]:
        import torch

        info = {"torch": torch.__version__, "torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}
        if torch.cuda.is_available():
            info["cuda"] = str(torch.version.cuda)
            info["gpu"] = torch.cuda.get_device_name()
        return info
