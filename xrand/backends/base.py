"""The contract for a framework: everything xrand does with one lives in a Backend subclass.

A backend turns NumPy arrays into the framework's tensors (device, dtype) and back, draws with
the framework's own generators exactly as its diffusion library does, draws from its global
random state, and seeds and configures the framework. The framework is imported the first time
the backend needs it, never to ask whether an object belongs to it (that looks in
``sys.modules``, as einops does).
"""
from __future__ import annotations

import threading
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..checks import UsageError, check_fits_memory, dtype_name, module_installed, module_loaded

_global_lock = threading.Lock()
_global_generator: Optional[np.random.Generator] = None


def global_numpy_generator() -> np.random.Generator:
    """The generator behind ``generator=None`` on the numpy and mindspore backends.

    Unseeded it draws fresh entropy, like mindone's ``np.random.default_rng()``;
    :func:`seed_global_numpy_generator` makes it reproducible (mindone's ``ms.set_seed`` does not).
    """
    global _global_generator
    with _global_lock:
        if _global_generator is None:
            _global_generator = np.random.default_rng()
        return _global_generator


def seed_global_numpy_generator(seed: int) -> None:
    global _global_generator
    with _global_lock:
        _global_generator = np.random.Generator(np.random.PCG64(seed))


def numpy_generators_draw(shape: Tuple[int, ...], generator: Any) -> np.ndarray:
    """float64 standard normals from a ``numpy.random.Generator`` or one per batch item.

    mindone.diffusers' ``randn_tensor`` (mindone/diffusers/utils/mindspore_utils.py): one
    generator draws the whole shape; a list draws a ``(1, ...)`` item from each, concatenated.
    """
    check_fits_memory(shape, "float64")
    if not isinstance(generator, list):
        return generator.standard_normal(shape)
    item_shape = (1,) + tuple(shape[1:])
    return np.concatenate([g.standard_normal(item_shape) for g in generator], axis=0)


class Backend:
    """Base class: a subclass names its framework and implements the tensor methods.

    Methods receive checked input: ``shape`` a tuple of non-negative ints, ``dtype`` a name from
    :data:`xrand.checks.DTYPE_NAMES` (or None where it says so), generator lists of one kind
    whose length is the batch size (a one-item list is passed as its item).
    """

    #: registry name, e.g. "torch"
    name: str = ""
    #: top-level module the backend needs ("" when NumPy is enough)
    module: str = ""
    #: pip extra that installs it, for error messages
    extra: str = ""
    #: whether randn and randn_native take a ``layout`` (only torch has layouts)
    layouts: bool = False

    # -- availability, without importing the framework -------------------------------------
    def unavailable_reason(self) -> Optional[str]:
        """None when usable here, else a one-line reason."""
        if not self.module or module_installed(self.module):
            return None
        hint = f" (pip install 'xrand[{self.extra}]')" if self.extra else ""
        return f"{self.module} is not installed{hint}"

    def loaded(self) -> bool:
        """Whether the framework is already imported in this process."""
        return not self.module or module_loaded(self.module)

    # -- what callers pass -------------------------------------------------------------------
    def is_native_generator(self, obj: Any) -> bool:
        """Whether ``obj`` is a generator this backend draws with natively (:meth:`randn_native`).

        Every backend takes ``numpy.random.Generator`` the way mindone.diffusers does (a
        float64 draw, then cast); a framework with generators of its own adds them.
        """
        return isinstance(obj, np.random.Generator)

    def dtype(self, name: str) -> Any:
        """The framework dtype for a name from xrand.checks.DTYPE_NAMES."""
        raise NotImplementedError

    def device(self, device: Any) -> Any:
        """Parse a device name or object; :class:`~xrand.checks.UsageError` naming it if not usable."""
        if device is None or (isinstance(device, str) and device.lower() == "cpu"):
            return None
        raise UsageError(f"unknown device {device!r} for the {self.name} backend; accepted: 'cpu' or None")

    # -- tensors -----------------------------------------------------------------------------
    def from_numpy(self, array: np.ndarray, dtype: Optional[str], device: Any = None) -> Any:
        """A tensor holding ``array`` cast to ``dtype`` (None keeps the array's dtype)."""
        raise NotImplementedError

    def to_numpy(self, tensor: Any) -> np.ndarray:
        """The tensor's values (bfloat16 as float32)."""
        raise NotImplementedError

    def randn(self, shape: Tuple[int, ...], dtype: Optional[str], device: Any = None) -> Any:
        """Draw from the framework's global random state (``generator=None``); dtype None: its default.

        The default draws from :func:`global_numpy_generator` in float64, then casts.
        """
        return self.from_numpy(global_numpy_generator().standard_normal(shape), dtype, device)

    def randn_native(self, shape: Tuple[int, ...], generator: Any, device: Any = None, dtype: Any = None) -> Any:
        """Draw with native generator(s), exactly as this framework's diffusion library does.

        The default is mindone.diffusers' rule for NumPy generators: a float64 draw, then cast
        (``dtype=None`` stays float64).
        """
        name = None if dtype is None else dtype_name(dtype)
        return self.from_numpy(numpy_generators_draw(shape, generator), name, device)

    # -- process-wide settings ---------------------------------------------------------------
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


__all__ = ["Backend", "global_numpy_generator", "numpy_generators_draw",
           "seed_global_numpy_generator"]
