"""The two frameworks a comparison runs, each behind the same few calls.

A recipe or the generic denoising loop never asks which framework it drives: it calls
``fw.randn``, ``fw.tensor``, ``fw.to_numpy`` and the library's own classes from ``fw.library``
(``diffusers`` on torch, ``mindone.diffusers`` on MindSpore, which use the same class names).
"""
from __future__ import annotations

import contextlib
import importlib
from typing import Any, Iterator, Optional, Tuple

import numpy as np

from ..checks import check_choice
from ..registry import backend
from .quiet import silenced

#: The frameworks a comparison runs, in report order (the torch side is the reference).
FRAMEWORKS: Tuple[str, ...] = ("torch", "mindspore")
MINDSPORE_MODES: Tuple[str, ...] = ("pynative", "graph")
#: What a comparison runs MindSpore in unless told otherwise: graph mode, its compiled graphs
#: kept between processes by .graph_cache (within 1e-6 relative L2 of PyNative; several times
#: faster per step on a CPU, benchmarks/RESULTS.md figure 5).
DEFAULT_MINDSPORE_MODE = "graph"


def check_framework(framework: Any) -> str:
    return check_choice(framework, FRAMEWORKS, "framework")


def check_mindspore_mode(mode: Any) -> str:
    return check_choice(mode, MINDSPORE_MODES, "MindSpore mode")


@contextlib.contextmanager
def mindspore_mode(mode: str) -> Iterator[None]:
    """MindSpore's execution mode inside the block, the previous one after it.

    ``"graph"`` compiles each Cell (the UNet) on its first call: a few seconds once (or loaded
    from :mod:`.graph_cache` around a run), then a step costs a fraction of PyNative's on a CPU
    (benchmarks/RESULTS.md, figure 5). On a CPU its Linear layers compute as PyNative's do, and
    its calls skip a slow per-call walk of the sub-cells (:mod:`.graph_calls`).
    """
    import mindspore as ms

    from .graph_calls import graph_mode_calls

    wanted = {"pynative": ms.PYNATIVE_MODE, "graph": ms.GRAPH_MODE}[check_mindspore_mode(mode)]
    previous = ms.get_context("mode")
    if wanted != previous:
        ms.set_context(mode=wanted)
    try:
        with graph_mode_calls() if mode == "graph" else contextlib.nullcontext():
            yield
    finally:
        if ms.get_context("mode") != previous:
            ms.set_context(mode=previous)


class Framework:
    """One framework and its diffusion library, as the pipelines layer uses them.

    What belongs to the framework itself (its dtypes, reading a tensor) is its xrand backend's;
    this adds what belongs to the diffusion library.
    """

    name: str = ""
    library: str = ""  # the diffusion library's package, e.g. "diffusers"
    transformers: str = ""  # its transformers package (text encoders)

    def import_library(self) -> Any:
        with silenced():
            return importlib.import_module(self.library)

    def dtype(self, name: str) -> Any:
        return backend(self.name).dtype(name)

    def dtype_argument(self) -> str:
        """``from_pretrained``'s keyword for the dtype."""
        raise NotImplementedError

    def randn(self, shape: Tuple[int, ...], generator: Any, dtype: Any, device: Any = None) -> Any:
        """The library's own ``randn_tensor`` (looked up at call time, so ``xrand.patched()`` applies)."""
        raise NotImplementedError

    def tensor(self, array: np.ndarray, dtype: Any, device: Any = None) -> Any:
        raise NotImplementedError

    def to_numpy(self, tensor: Any) -> np.ndarray:
        """The values as float32 (float16 and bfloat16 widened), whatever the device."""
        return backend(self.name).to_numpy(tensor).astype(np.float32, copy=False)

    def cat(self, tensors: list) -> Any:
        raise NotImplementedError

    def chunk2(self, tensor: Any) -> Tuple[Any, Any]:
        """Two halves along the batch dimension (classifier-free guidance)."""
        half = tensor.shape[0] // 2
        return tensor[:half], tensor[half:]

    def context(self, device: Optional[str], mode: str) -> contextlib.AbstractContextManager:
        """Everything set around loading and running (no gradients, MindSpore's target and mode)."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Once before loading a model."""

    def model_device(self, pipe: Any) -> Any:
        return None


class Torch(Framework):
    name = "torch"
    library = "diffusers"
    transformers = "transformers"

    def dtype_argument(self):
        return "torch_dtype"

    def randn(self, shape, generator, dtype, device=None):
        from diffusers.utils import torch_utils

        return torch_utils.randn_tensor(shape, generator=generator, device=device, dtype=dtype)

    def tensor(self, array, dtype, device=None):
        import torch

        return torch.from_numpy(np.ascontiguousarray(array)).to(device=device, dtype=dtype)

    def cat(self, tensors):
        import torch

        return torch.cat(tensors)

    @contextlib.contextmanager
    def context(self, device, mode):
        import torch

        with torch.no_grad():
            yield

    def model_device(self, pipe):
        return pipe.unet.device if hasattr(pipe, "unet") else None


class MindSpore(Framework):
    name = "mindspore"
    library = "mindone.diffusers"
    transformers = "mindone.transformers"

    def dtype_argument(self):
        return "mindspore_dtype"

    def randn(self, shape, generator, dtype, device=None):
        from mindone.diffusers.utils import mindspore_utils

        return mindspore_utils.randn_tensor(shape, generator=generator, dtype=dtype)

    def tensor(self, array, dtype, device=None):
        import mindspore as ms

        return ms.tensor(np.ascontiguousarray(array), dtype=dtype)

    def cat(self, tensors):
        from mindspore import ops

        return ops.cat(tensors)

    @contextlib.contextmanager
    def context(self, device, mode):
        from ..backends.mindspore import use_device_target

        check_mindspore_mode(mode)
        with use_device_target(device), mindspore_mode(mode):
            yield

    def prepare(self):
        from .. import mindspore_cpu

        mindspore_cpu.install()  # no-op unless MindSpore runs on a CPU
        # Synchronous launch (about 10x faster per step on a CPU) and oneDNN at AVX2 (a fast
        # Conv2D): each can be set once per process, so a process that already chose keeps its choice.
        mindspore_cpu.tune_cpu_runtime()


_FRAMEWORKS = {"torch": Torch(), "mindspore": MindSpore()}


def framework(name: str) -> Framework:
    return _FRAMEWORKS[check_framework(name)]
