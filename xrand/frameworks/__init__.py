"""The frameworks a comparison runs: one module per framework, each a :class:`Framework` subclass
holding everything that framework does above the noise layer (as :mod:`xrand.backends` holds the
noise layer's), and the runtime both share.

- ``base.py``: the :class:`Framework` contract;
- ``torch.py``: torch and diffusers, and torch in float64 (the noise floor's reference);
- ``mindspore.py``: MindSpore and mindone.diffusers, its modes and graph mode's compile cache;
  ``mindspore_graph.py``: graph-mode calls with PyNative's numbers;
- ``environment.py`` (the fingerprint a report records), ``threads.py`` (a side's kernel threads),
  ``interrupts.py`` (Ctrl-C after MindSpore's graph runtime, a process's end), ``quiet.py`` (the libraries' chatter).

No framework is imported here: each module imports its framework when first used.
"""
from typing import Any, Tuple

from ..checks import check_choice
from .base import Framework
from .mindspore import (
    BFLOAT16_ON_CPU,
    DEFAULT_MINDSPORE_MODE,
    MINDSPORE_MODES,
    PYNATIVE_ABOVE_BYTES,
    MindSpore,
    check_mindspore_mode,
    large_model_pynative,
    mindspore_mode,
)
from .torch import Torch

#: The frameworks a comparison runs, in report order (the torch side is the reference).
FRAMEWORKS: Tuple[str, ...] = ("torch", "mindspore")

_FRAMEWORKS = {"torch": Torch(), "mindspore": MindSpore()}


def check_framework(framework: Any) -> str:
    return check_choice(framework, FRAMEWORKS, "framework")


def framework(name: str) -> Framework:
    return _FRAMEWORKS[check_framework(name)]


__all__ = ["BFLOAT16_ON_CPU", "DEFAULT_MINDSPORE_MODE", "FRAMEWORKS", "MINDSPORE_MODES", "PYNATIVE_ABOVE_BYTES",
           "Framework", "MindSpore", "Torch", "check_framework", "check_mindspore_mode", "framework",
           "large_model_pynative", "mindspore_mode"]
