"""Brownian motion drawn from an ``xrand.Generator``: the noise of the SDE samplers, framework-free.

diffusers' ``DPMSolverSDEScheduler`` and ``CosineDPMSolverMultistepScheduler`` take their noise
from a Brownian tree (``BrownianTreeNoiseSampler``, schedulers/scheduling_dpmsolver_sde.py):
for two noise levels ``sigma`` and ``sigma_next`` the normalised increment
``(W(sigma_next) - W(sigma)) / sqrt(|sigma_next - sigma|)``, where later queries may fall
inside earlier intervals and must stay consistent with them. diffusers builds the tree with
torchsde (seeded by ``noise_sampler_seed`` or torch's global RNG), mindone with its own port
(``np.random.seed(s); np.random.randn``, which reseeds NumPy's global RNG), so the two never
share noise. :class:`BrownianNoiseSampler` draws every value from an ``xrand.Generator`` and
does its arithmetic in float64 NumPy, so two libraries that ask the same questions in the same
order get the same numbers, and no global random state is read or changed.

The path is sampled lazily and exactly. Only increments matter, so the first time asked for
gets ``W = 0`` (no draw); a new time beyond the known ones extends the path by an independent
Gaussian step; a time between two known ones is drawn from the Brownian bridge between its two
neighbours (given them, Brownian motion is independent of everything else). A time within a
relative ``tol`` of a known one reuses it, as torchsde's ``tol`` does. Unlike torchsde's tree,
the values depend on the order of the queries (not only on the seed); both libraries'
schedulers query in the same order, so both draw the same numbers. A chain of adjacent
intervals (Cosine's) gives each step exactly one draw as its noise, the same bits on both
sides; noise over an interval that splits known points (DPMSolverSDE's second-order step)
depends on the times too, so two sides whose sigmas differ in the last bits get noise that
differs in the last bits.
"""
from __future__ import annotations

import bisect
import math
from typing import List, Sequence, Union

import numpy as np

from .checks import UsageError, UsageTypeError, check_shape
from .generator import Generator

#: Relative distance under which two query times count as the same point.
DEFAULT_TOL = 1e-6


class BrownianPath:
    """One Brownian motion of array shape ``shape`` whose every draw comes from ``generator``.

    ``path.increment(s, t)`` is ``W(t) - W(s)`` as a float64 array.
    """

    def __init__(self, shape: Sequence[int], generator: Generator, tol: float = DEFAULT_TOL) -> None:
        if not isinstance(generator, Generator):
            raise UsageTypeError(f"BrownianPath needs an xrand.Generator, got {generator!r}")
        if not (isinstance(tol, (int, float)) and 0 <= tol < 1):
            raise UsageError(f"tol must be a number in [0, 1), got {tol!r}")
        self.shape = check_shape(shape)
        self.generator = generator
        self.tol = float(tol)
        self._times: List[float] = []
        self._values: List[np.ndarray] = []

    @property
    def times(self) -> List[float]:
        """The times the path is known at, sorted (every time queried so far, within ``tol``)."""
        return list(self._times)

    def _normal(self) -> np.ndarray:
        return self.generator.normal(self.shape, "float32").astype(np.float64)

    def value(self, t: float) -> np.ndarray:
        """``W(t)``: a known value, or a new one drawn consistently with every known value."""
        t = _check_time(t)
        if not self._times:  # the reference point: increments do not depend on it
            self._times.append(t)
            self._values.append(np.zeros(self.shape))
            return self._values[0]
        k = bisect.bisect_left(self._times, t)
        for i in (k - 1, k):  # the neighbours: a time within tol of one reuses it
            if 0 <= i < len(self._times) and abs(self._times[i] - t) <= self.tol * max(abs(t), abs(self._times[i])):
                return self._values[i]
        z = self._normal()
        if k == len(self._times):  # beyond the last known time: a free Gaussian step
            a = self._times[-1]
            value = self._values[-1] + math.sqrt(t - a) * z
        elif k == 0:  # before the first known time: the same, backwards
            b = self._times[0]
            value = self._values[0] + math.sqrt(b - t) * z
        else:  # the Brownian bridge between the two neighbours
            a, b = self._times[k - 1], self._times[k]
            wa, wb = self._values[k - 1], self._values[k]
            mean = wa + (t - a) / (b - a) * (wb - wa)
            value = mean + math.sqrt((t - a) * (b - t) / (b - a)) * z
        self._times.insert(k, t)
        self._values.insert(k, value)
        return value

    def increment(self, s: float, t: float) -> np.ndarray:
        """``W(t) - W(s)`` (``W(s)`` is looked up or drawn first)."""
        ws = self.value(s)
        return self.value(t) - ws


class BrownianNoiseSampler:
    """The noise of ``BrownianTreeNoiseSampler``: ``sampler(sigma, sigma_next)`` as a NumPy array.

    ``generator`` is an ``xrand.Generator`` (one path of ``shape``) or a list of them, one per
    batch item (``shape[0]`` items, one path each, as diffusers' list of seeds gives one tree
    per item). ``dtype`` is the dtype of the arrays returned (the arithmetic is float64).
    """

    def __init__(self, shape: Sequence[int], generator: Union[Generator, Sequence[Generator]],
                 dtype: str = "float32", tol: float = DEFAULT_TOL) -> None:
        self.shape = check_shape(shape)
        self.dtype = np.dtype(dtype)
        if isinstance(generator, (list, tuple)):
            if not self.shape or len(generator) != self.shape[0]:
                raise UsageError(f"got {len(generator)} generators for noise of shape {self.shape}; "
                                 "pass one xrand.Generator or one per batch item")
            self.paths = [BrownianPath(self.shape[1:], g, tol) for g in generator]
        else:
            self.paths = [BrownianPath(self.shape, generator, tol)]
        self.batched = isinstance(generator, (list, tuple))

    def __call__(self, sigma: float, sigma_next: float) -> np.ndarray:
        sigma, sigma_next = _check_time(sigma), _check_time(sigma_next)
        scale = math.sqrt(abs(sigma_next - sigma))
        increments = [path.increment(sigma, sigma_next) for path in self.paths]
        w = np.stack(increments) if self.batched else increments[0]
        if scale == 0.0:
            return np.zeros(self.shape, self.dtype)
        return (w / scale).astype(self.dtype)


def _check_time(t) -> float:
    try:
        value = float(t)
    except (TypeError, ValueError):
        raise UsageTypeError(f"a Brownian time must be a real number or a one-element tensor, got {t!r}") from None
    if not math.isfinite(value):
        raise UsageError(f"a Brownian time must be finite, got {value}")
    return value
