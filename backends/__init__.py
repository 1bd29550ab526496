"""Backend adapters: one module per framework, each a small class over the same methods.

A backend turns NumPy arrays into the framework's tensors (device, dtype), concatenates
them, draws from the framework's global random state, and seeds and configures the
framework. The framework is imported the first time the backend is used, never to ask
whether an object belongs to it (that looks in ``sys.modules``).
"""
from __future__ import annotations

import importlib.util
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np


class Backend:
    """Base class: subclasses name their framework and implement the tensor methods."""

    #: registry name, e.g. "torch"
    name: str = ""
    #: top-level module the backend needs ("" when NumPy is enough)
    module: str = ""
    #: pip extra that installs it, for error messages
    extra: str = ""

    # -- availability, without importing the framework -------------------------------------
    def unavailable_reason(self) -> Optional[str]:
        """None when usable here, else a one-line reason."""
        if not self.module or sys.modules.get(self.module) is not None:  # loaded: no search needed
            return None
        if importlib.util.find_spec(self.module) is None:
            hint = f" (pip install 'xrand[{self.extra}]')" if self.extra else ""
            return f"{self.module} is not installed{hint}"
        return None

    def loaded(self) -> bool:
        """Whether the framework is already imported in this process."""
        return not self.module or self.module in sys.modules

    # -- what callers pass ---------------------------------------------------------------
    def is_tensor(self, obj: Any) -> bool:
        raise NotImplementedError

    def is_native_generator(self, obj: Any) -> bool:
        """Whether ``obj`` is this framework's own generator (drawn with native semantics)."""
        return False

    def dtype(self, name: str) -> Any:
        """The framework dtype for a name from xrand.checks.DTYPE_NAMES."""
        raise NotImplementedError

    def device(self, device: Any) -> Any:
        """Parse a device name or object; ``ValueError`` naming it if not usable."""
        raise NotImplementedError

    # -- tensors -------------------------------------------------------------------------
    def from_numpy(self, array: np.ndarray, dtype: Optional[str], device: Any = None) -> Any:
        """A tensor holding ``array`` cast to ``dtype`` (None keeps the array's dtype)."""
        raise NotImplementedError

    def to_numpy(self, tensor: Any) -> np.ndarray:
        """The tensor's values (bfloat16 as float32)."""
        raise NotImplementedError

    def cat(self, tensors: Sequence[Any]) -> Any:
        raise NotImplementedError

    def randn(self, shape: Tuple[int, ...], dtype: Optional[str], device: Any = None) -> Any:
        """Draw from the framework's global random state (``generator=None``)."""
        raise NotImplementedError

    def randn_native(self, shape, generator, device=None, dtype=None, layout=None) -> Any:
        """Draw with this framework's own generator(s), exactly as its diffusion library does."""
        raise TypeError(f"the {self.name} backend has no native generator")

    # -- process-wide settings -----------------------------------------------------------
    def manual_seed(self, seed: int) -> None:
        """Seed the framework's global random state (only called when it is loaded)."""

    def determinism_state(self) -> Dict[str, Any]:
        """Every setting that enable_determinism changes, to restore later."""
        return {}

    def enable_determinism(self) -> None:
        pass

    def restore_determinism(self, state: Dict[str, Any]) -> None:
        pass

    def versions(self) -> Dict[str, str]:
        """Framework versions for reports (imports the framework)."""
        return {}

    def __repr__(self) -> str:
        return f"<xrand backend {self.name!r}>"


def check_layout(backend: str, layout: Any) -> None:
    if layout is not None:
        raise ValueError(f"layout={layout!r} is only accepted by the torch backend, not {backend!r}; pass None")


def same_device_kind(names: List[str], device: str, backend: str) -> str:
    """Validate a device name against the kinds a framework knows ("cpu", "cuda:1"...)."""
    kind, _, index = device.partition(":")
    if kind.lower() not in names or (index and not index.isdigit()):
        raise ValueError(
            f"unknown device {device!r} for the {backend} backend; accepted: "
            + ", ".join(repr(n) for n in names)
            + " (optionally with ':N')"
        )
    return kind.lower()
