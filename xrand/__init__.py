"""xrand: reproducible random noise for diffusion models across frameworks and hardware.

>>> import xrand
>>> g = xrand.Generator(1234)                 # torch.Generator("cpu").manual_seed(1234)'s stream
>>> with xrand.use_backend("numpy"):
...     noise = xrand.randn_tensor((1, 4, 8, 8), generator=g)

Importing xrand imports NumPy only; a framework is imported when its backend is first used.
"""
from ._version import __version__
from .checks import UsageError
from .determinism import disable_full_determinism, enable_full_determinism, full_determinism_enabled
from .generator import Generator
from .noise import manual_seed, randn_tensor
from .registry import (
    BackendInfo,
    available_backends,
    backend,
    get_backend,
    register_backend,
    set_backend,
    use_backend,
)
from .patch import is_patched, patch, patched, unpatch
from .frameworks.quiet import silenced as quiet
from .streams import register_stream, stream_names

__all__ = [
    "BackendInfo",
    "Generator",
    "available_backends",
    "backend",
    "disable_full_determinism",
    "enable_full_determinism",
    "full_determinism_enabled",
    "get_backend",
    "manual_seed",
    "randn_tensor",
    "register_backend",
    "register_stream",
    "set_backend",
    "stream_names",
    "use_backend",
    "UsageError",
    "is_patched",
    "patch",
    "patched",
    "quiet",
    "unpatch",
]
