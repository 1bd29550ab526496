"""How far apart two outputs are: the one definition of every number a comparison reports.

``rel_l2 = ||a - b|| / ||a||`` with ``a`` the reference (torch), in float64; ``max_abs``,
``mean_abs``; PSNR for images in [0, 1]; SSIM (scikit-image) for a batch of images; and the
per-module numbers of Ascend's msprobe compare (cosine, relative errors). Compare, lockstep,
layers, the noise floor and sweeps all call these.
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..checks import UsageError


def rel_l2(reference: np.ndarray, other: np.ndarray) -> float:
    """``||a - b|| / ||a||`` in float64 (``||a - b||`` when ``a`` is all zeros)."""
    a = np.asarray(reference, dtype=np.float64)
    diff = a - np.asarray(other, dtype=np.float64)
    norm = float(np.linalg.norm(a))
    return float(np.linalg.norm(diff) / norm) if norm > 0 else float(np.linalg.norm(diff))


def metrics(reference: np.ndarray, other: np.ndarray, data_range: Optional[float] = None) -> Dict[str, float]:
    """max and mean |a-b|, :func:`rel_l2` and (with a data range) PSNR in dB."""
    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(other, dtype=np.float64)
    if a.shape != b.shape:
        raise UsageError(f"cannot compare arrays of shapes {a.shape} and {b.shape}")
    diff = a - b
    norm = float(np.linalg.norm(a))
    out = {
        "max_abs": float(np.max(np.abs(diff))) if diff.size else 0.0,
        "mean_abs": float(np.mean(np.abs(diff))) if diff.size else 0.0,
        "rel_l2": float(np.linalg.norm(diff) / norm) if norm > 0 else float(np.linalg.norm(diff)),
    }
    if data_range is not None:
        mse = float(np.mean(diff**2)) if diff.size else 0.0
        out["psnr_db"] = math.inf if mse == 0 else 10 * math.log10(data_range**2 / mse)
    return out


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean SSIM (scikit-image) over a batch of NHWC images in [0, 1]."""
    from skimage.metrics import structural_similarity

    side = min(a.shape[1], a.shape[2])
    win = min(7, side if side % 2 else side - 1)  # scikit-image's default window, shrunk for tiny images
    return float(np.mean([structural_similarity(x, y, data_range=1.0, channel_axis=-1, win_size=win)
                          for x, y in zip(a.astype(np.float64), b.astype(np.float64))]))


class Errors:
    """:func:`rel_l2` over all the tensors of an output (a list of arrays), each reference array's
    squared norm computed once: in ``compare --layers`` an array is a reference up to four times."""

    def __init__(self) -> None:
        self._sq_norms: Dict[int, Tuple[np.ndarray, float]] = {}

    def _sq_norm(self, a: np.ndarray) -> float:
        hit = self._sq_norms.get(id(a))
        if hit is None or hit[0] is not a:
            a64 = a.astype(np.float64)
            hit = self._sq_norms[id(a)] = (a, float(np.vdot(a64, a64)))  # the array kept: its id stays its own
        return hit[1]

    def __call__(self, reference: Sequence[np.ndarray], other: Sequence[np.ndarray],
                 max_abs: bool = False) -> Optional[Dict[str, float]]:
        """``{"rel_l2"}`` (and ``"max_abs"``); None when the outputs' structures differ."""
        if len(reference) != len(other) or any(a.shape != b.shape for a, b in zip(reference, other)):
            return None
        sq_diff = sq_ref = 0.0
        largest = 0.0
        for a, b in zip(reference, other):
            d = np.subtract(a, b, dtype=np.float64)
            sq_diff += float(np.vdot(d, d))
            sq_ref += self._sq_norm(a)
            if max_abs and d.size:
                largest = max(largest, float(np.max(np.abs(d))))
        rel = float(np.sqrt(sq_diff / sq_ref)) if sq_ref > 0 else float(np.sqrt(sq_diff))
        return {"rel_l2": rel, "max_abs": largest} if max_abs else {"rel_l2": rel}


def flat(value: Sequence[np.ndarray]) -> np.ndarray:
    """Arrays as one float64 vector."""
    parts: List[np.ndarray] = [np.asarray(v, dtype=np.float64).ravel() for v in value]
    return np.concatenate(parts) if parts else np.zeros(0)
