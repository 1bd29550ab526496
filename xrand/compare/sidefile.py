"""One side of a comparison in a file, for machines that can only run one framework.

A safetensors file: tensors ``images``, ``initial_noise``, ``states`` and ``prompt.NAME`` (the
prompt embeddings the denoiser got, :mod:`.components`; none without a prompt); metadata key
``xrand_side`` holds the settings, framework, timesteps, timing and environment as JSON.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Any, Dict

import numpy as np

from ..checks import UsageError
from ..files import atomic_path
from ..pipelines.settings import Settings
from .sides import Side

SIDE_VERSION = 1
_TENSORS = ("images", "initial_noise", "states")
PROMPT = "prompt."


def save_side(side: Side, path: str) -> str:
    from safetensors.numpy import save_file

    meta = {
        "xrand_side": SIDE_VERSION,
        "framework": side.framework,
        "settings": asdict(side.settings),
        "timesteps": list(side.timesteps),
        "seconds": side.seconds,
        "model_fingerprint": side.model_fingerprint,
        "device": side.device,
        "environment": side.environment,
        "ran": side.ran,
        "nonfinite": side.nonfinite,
    }
    tensors = {name: np.ascontiguousarray(getattr(side, name), dtype=np.float32) for name in _TENSORS}
    tensors.update({PROMPT + name: np.ascontiguousarray(a, dtype=np.float32) for name, a in side.prompt.items()})
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata={"xrand_side": json.dumps(meta, default=str)})
    return path


def load_side(path: str) -> Side:
    """Read a side file; ``ValueError`` naming the file if it is not one or is damaged."""
    from safetensors import safe_open

    if not os.path.isfile(path):
        raise UsageError(f"side file {path!r} does not exist")
    try:
        with safe_open(path, framework="numpy") as f:
            meta_text = (f.metadata() or {}).get("xrand_side")
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    except Exception as exc:  # safetensors raises its own error types for damaged files
        raise UsageError(f"{path!r} is not a readable xrand side file (truncated or not safetensors): {exc}") from None
    if meta_text is None:
        raise UsageError(f"{path!r} is a safetensors file but not an xrand side file (no xrand_side metadata)")
    try:
        meta: Dict[str, Any] = json.loads(meta_text)
        if meta.get("xrand_side") != SIDE_VERSION:
            raise ValueError(f"unsupported side file version {meta.get('xrand_side')!r}")
        missing = [name for name in _TENSORS if name not in tensors]
        if missing:
            raise ValueError(f"missing tensors {missing}")
        return Side(
            framework=meta["framework"],
            settings=Settings(**meta["settings"]),
            images=tensors["images"],
            initial_noise=tensors["initial_noise"],
            states=tensors["states"],
            timesteps=[float(t) for t in meta["timesteps"]],
            seconds=float(meta["seconds"]),
            model_fingerprint=meta["model_fingerprint"],
            environment=meta.get("environment", {}),
            device=meta.get("device", "cpu"),
            ran=meta.get("ran", {}),
            nonfinite=meta.get("nonfinite"),
            prompt={name[len(PROMPT):]: a for name, a in tensors.items() if name.startswith(PROMPT)},
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path!r} is a damaged xrand side file: {exc}") from None
