"""The environment fingerprint recorded in reports and side files."""
from __future__ import annotations

import functools
import os
import platform
import sys
from typing import Any, Dict, Iterable, Optional

import numpy as np


def fingerprint(frameworks: Optional[Iterable[str]] = None) -> Dict[str, Any]:
    """Versions, machine, CPU capability and determinism flags of the given frameworks."""
    from .._version import __version__
    from ..determinism import full_determinism_enabled
    from ..registry import backend
    from .threads import usable_cores

    info: Dict[str, Any] = {
        "xrand": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cores(),
        "numpy": np.__version__,
        "xrand_full_determinism": full_determinism_enabled(),
    }
    for name in frameworks or []:
        b = backend(name)
        if b.unavailable_reason() is None:
            info.update(b.versions())
            info[f"{name}_determinism"] = b.determinism_state()
    if "torch" in (frameworks or []) and "torch" in sys.modules:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        try:
            import diffusers

            info["diffusers"] = diffusers.__version__
        except ImportError:
            pass
    return info


@functools.lru_cache(maxsize=None)
def _cpu_model() -> str:  # read once: a process stays on its machine
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
