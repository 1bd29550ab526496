"""How far apart two outputs are: the one definition of every number a comparison reports.

``rel_l2 = ||a - b|| / ||a||`` with ``a`` the reference (torch), in float64; ``max_abs``,
``mean_abs``; PSNR for images in [0, 1]; SSIM (scikit-image) for a batch of images; and the
per-module numbers of Ascend's msprobe compare (cosine, relative errors). Compare, lockstep,
layers, the noise floor and sweeps all call these.
"""
from __future__ import annotations

import math
import weakref
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..checks import UsageError


def norm(x: np.ndarray) -> float:
    """The L2 norm, summed in one fixed order: not BLAS, whose threaded dot adds in an order that
    depends on its thread count, so the same arrays gave other last digits in another process."""
    flat_x = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    return float(np.sqrt(np.einsum("i,i->", flat_x, flat_x)))


def rel_l2(reference: np.ndarray, other: np.ndarray) -> float:
    """``||a - b|| / ||a||`` in float64 (``||a - b||`` when ``a`` is all zeros)."""
    a = np.asarray(reference, dtype=np.float64)
    diff = a - np.asarray(other, dtype=np.float64)
    size = norm(a)
    return norm(diff) / size if size > 0 else norm(diff)


def metrics(reference: np.ndarray, other: np.ndarray, data_range: Optional[float] = None) -> Dict[str, float]:
    """max and mean |a-b|, :func:`rel_l2` and (with a data range) PSNR in dB; where either side holds
    NaN or Inf, these over the values finite on both, and ``nonfinite_a`` / ``nonfinite_b``: how
    many are not on each side."""
    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(other, dtype=np.float64)
    if a.shape != b.shape:
        raise UsageError(f"cannot compare arrays of shapes {a.shape} and {b.shape}")
    finite = np.isfinite(a) & np.isfinite(b)
    counts = {}
    if not finite.all():  # the numbers over the values finite on both sides, and how many are not
        counts = {"nonfinite_a": int(a.size - np.isfinite(a).sum()), "nonfinite_b": int(b.size - np.isfinite(b).sum())}
        a, b = a[finite], b[finite]
    diff = a - b
    size = norm(a)
    out = {
        "max_abs": float(np.max(np.abs(diff))) if diff.size else 0.0,
        "mean_abs": float(np.mean(np.abs(diff))) if diff.size else 0.0,
        "rel_l2": norm(diff) / size if size > 0 else norm(diff),
    }
    if data_range is not None:
        mse = float(np.mean(diff**2)) if diff.size else 0.0
        out["psnr_db"] = math.inf if mse == 0 else 10 * math.log10(data_range**2 / mse)
    return {**out, **counts}


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Mean SSIM (scikit-image) over a batch of NHWC images in [0, 1] (or of videos, NFHWC: every frame)."""
    from skimage.metrics import structural_similarity

    if a.ndim == 5:
        a, b = a.reshape(-1, *a.shape[2:]), b.reshape(-1, *b.shape[2:])
    side = min(a.shape[1], a.shape[2])
    win = min(7, side if side % 2 else side - 1)  # scikit-image's default window, shrunk for tiny images
    return float(np.mean([structural_similarity(x, y, data_range=1.0, channel_axis=-1, win_size=win)
                          for x, y in zip(a.astype(np.float64), b.astype(np.float64))]))


def _real_pairs(a: np.ndarray) -> np.ndarray:
    """A complex array as its real and imaginary parts, side by side on a last axis of 2."""
    return np.stack([np.real(a), np.imag(a)], axis=-1).astype(np.float64)


class Errors:
    """:func:`rel_l2` over all the tensors of an output (a list of arrays), each reference array's
    squared norm computed once: in ``compare --layers`` an array is a reference up to four times."""

    def __init__(self) -> None:
        self._sq_norms: Dict[int, Tuple[Any, float]] = {}
        self._scratch = np.zeros(0)

    def _difference(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``a - b`` in float64, in a buffer kept between calls: a fresh array of megabytes per
        module call costs its page faults each time (half of ``--layers``' own time, measured)."""
        if self._scratch.size < a.size:
            self._scratch = np.empty(a.size)
        d = self._scratch[:a.size]
        np.subtract(a.reshape(-1), b.reshape(-1), out=d, dtype=np.float64)
        return d

    def _sq_norm(self, a: np.ndarray) -> float:
        hit = self._sq_norms.get(id(a))
        if hit is None or hit[0]() is not a:
            # float64 sums without a float64 copy of the array (a quarter of the time of astype + vdot)
            flat_a = a.reshape(-1)
            # weakly: an array read from a record file is let go after its call
            hit = self._sq_norms[id(a)] = (weakref.ref(a), float(np.einsum("i,i->", flat_a, flat_a, dtype=np.float64)))
        return hit[1]

    def __call__(self, reference: Sequence[np.ndarray], other: Sequence[np.ndarray],
                 max_abs: bool = False) -> Optional[Dict[str, float]]:
        """``{"rel_l2"}`` (and ``"max_abs"``); None when the outputs' structures differ."""
        if len(reference) != len(other) or any(a.shape != b.shape for a, b in zip(reference, other)):
            return None
        sq_diff = sq_ref = 0.0
        largest = 0.0
        for a, b in zip(reference, other):
            if np.iscomplexobj(a) or np.iscomplexobj(b):  # a rotary table as complex numbers (Qwen-Image's)
                a, b = _real_pairs(a), _real_pairs(b)
            d = self._difference(a, b)
            sq_diff += float(np.einsum("i,i->", d, d))  # not BLAS: its threads contend with the frameworks'
            sq_ref += self._sq_norm(a)
            if max_abs and d.size:
                largest = max(largest, float(np.max(np.abs(d, out=d))))
        rel = float(np.sqrt(sq_diff / sq_ref)) if sq_ref > 0 else float(np.sqrt(sq_diff))
        return {"rel_l2": rel, "max_abs": largest} if max_abs else {"rel_l2": rel}


def flat(value: Sequence[np.ndarray]) -> np.ndarray:
    """Arrays as one float64 vector."""
    parts: List[np.ndarray] = [(_real_pairs(v) if np.iscomplexobj(v) else np.asarray(v, dtype=np.float64)).ravel()
                               for v in value]
    return np.concatenate(parts) if parts else np.zeros(0)


def _arrays(value: Union[np.ndarray, Sequence[np.ndarray]]) -> Sequence[np.ndarray]:
    return [value] if isinstance(value, np.ndarray) else value


def module_metrics(reference: Union[np.ndarray, Sequence[np.ndarray]],
                   other: Union[np.ndarray, Sequence[np.ndarray]]) -> Dict[str, float]:
    """Ascend msprobe's real-data metrics of ``other`` (MindSpore, msprobe's NPU side) against
    ``reference`` (torch, its Bench side), as ``compare --layers`` writes them per module call
    (msprobe's python/msprobe/core/compare/npy_compare.py).

    ``reference``/``other``: an array, or a module's output tensors as a list (concatenated in
    order). Computed as msprobe's npy_compare does, in float64: the relative error of each element
    is ``|(o - r) / r|``, where ``r == 0`` both get float64's eps added (so two zeros agree
    exactly); ``err_ratio_1e-3`` / ``err_ratio_5e-3`` are the fractions of elements whose relative
    error is below 0.001 / 0.005 (1.0 is best); ``cosine`` is 1.0 when both are all zero and NaN
    when only one is. NaN or inf in either side makes the metrics NaN. Empty outputs give NaN.
    """
    r, o = flat(_arrays(reference)), flat(_arrays(other))
    if r.shape != o.shape:
        raise ValueError(f"cannot compare outputs of {r.size} and {o.size} values")
    nan = float("nan")
    if r.size == 0:
        return {"cosine": nan, "max_abs": nan, "max_rel_err": nan, "err_ratio_1e-3": nan, "err_ratio_5e-3": nan}
    eps = np.finfo(np.float64).eps
    zero = r == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(((o + eps * zero) - (r + eps * zero)) / (r + eps * zero))
        norm_r, norm_o = norm(r), norm(o)
        if norm_r <= eps and norm_o <= eps:
            cosine = 1.0
        elif norm_r <= eps or norm_o <= eps:
            cosine = nan
        else:
            cosine = float(np.einsum("i,i->", r.reshape(-1), o.reshape(-1)) / (norm_r * norm_o))  # not BLAS (norm)
    finite = bool(np.isfinite(r).all() and np.isfinite(o).all())
    return {
        "cosine": cosine if finite else nan,
        "max_abs": float(np.max(np.abs(o - r))) if finite else nan,
        "max_rel_err": float(np.max(rel)) if finite else nan,
        "err_ratio_1e-3": float(np.mean(rel < 0.001)) if finite else nan,
        "err_ratio_5e-3": float(np.mean(rel < 0.005)) if finite else nan,
    }
