"""What the pictures share: exact values on their own labelled band, legends outside the data.

Torch and MindSpore often agree exactly (a step that draws no noise, a module fed the same
inputs), and a log axis has no place for 0, nor a linear PSNR axis for infinity. Rather than
clamping such values to an arbitrary 1e-12 that reads like a measurement, :class:`ExactBand`
draws them on a shaded band at the end of the axis whose tick says "exact (0)".
"""
from __future__ import annotations

import math
import textwrap
from typing import Iterable, Optional, Sequence

import numpy as np


class ExactBand:
    """Positions for values on an axis where some values are exact (0 on a log axis, inf on PSNR).

    ``values``: every value the axis will show (None and NaN are ignored). Exact values are
    drawn one decade below the smallest positive value (``exact=0``, log scale) or above the
    largest finite one (``exact=inf``, linear scale); :meth:`finish` shades that band and labels it.
    ``floor`` (log scale): values at or below it count as exact, on a band one decade below it
    labelled "<= floor" (where smaller differences say nothing more).
    """

    def __init__(self, values: Iterable[Optional[float]], exact: float = 0.0, axis: str = "y",
                 floor: Optional[float] = None) -> None:
        finite = [float(v) for v in values if v is not None and not math.isnan(float(v))]
        self.exact, self.axis, self.floor = exact, axis, floor
        self.log = exact == 0.0
        self.present = any(self._exact(v) for v in finite)
        if self.log:
            positive = [v for v in finite if 0 < v < math.inf]
            low = floor if floor is not None else min(positive) if positive else 1.0
            self.at = 10.0 ** (math.floor(math.log10(low)) - 1)
            self.band = (self.at / 10 ** 0.5, self.at * 10 ** 0.5)
        else:
            regular = [v for v in finite if math.isfinite(v)]
            low, high = (min(regular), max(regular)) if regular else (0.0, 1.0)
            step = max((high - low) * 0.15, 1.0)
            self.at = high + 2 * step
            self.band = (high + 1.5 * step, high + 2.5 * step)

    def _exact(self, value: float) -> bool:
        return value == self.exact or (self.floor is not None and value <= self.floor)

    def __call__(self, values: Sequence[Optional[float]]) -> np.ndarray:
        """The positions to plot ``values`` at: exact ones on the band, None as NaN (not drawn)."""
        out = np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
        out[[not math.isnan(v) and self._exact(v) for v in out]] = self.at
        return out

    def start(self, ax) -> None:
        """Set the scale before plotting (log for ``exact=0``)."""
        if self.log:
            (ax.set_yscale if self.axis == "y" else ax.set_xscale)("log")

    def finish(self, ax) -> None:
        """After plotting: shade the band of exact values and make its tick read "exact (0)"."""
        if not self.present:
            return
        axis = ax.yaxis if self.axis == "y" else ax.xaxis
        get_lim, set_lim = (ax.get_ylim, ax.set_ylim) if self.axis == "y" else (ax.get_xlim, ax.set_xlim)
        span = ax.axhspan if self.axis == "y" else ax.axvspan
        low, high = get_lim()
        if self.log:
            set_lim(self.band[0], max(high, self.band[1] * (1000 if self.floor is not None else 10)))
        else:
            set_lim(low, max(high, self.band[1]))
        low, high = get_lim()
        span(*self.band, color="0.92", zorder=0, lw=0)
        formatter = axis.get_major_formatter()
        ticks = [t for t in axis.get_majorticklocs()
                 if low <= t <= high and not self.band[0] <= t <= self.band[1]
                 and (t > self.band[1] if self.log else t < 1.5 * self.band[0] - 0.5 * self.band[1])]
        labels = list(formatter.format_ticks(ticks))
        word = "exact (0)" if self.log else "exact (inf)"
        if self.floor is not None:
            word = "≤ " + f"{self.floor:.0e}".replace("e-0", "e-")
        axis.set_ticks(ticks + [self.at], labels + [word])
        minor = [t for t in axis.get_minorticklocs() if self.band[1] < t <= high] if self.log else []
        axis.set_ticks(minor, minor=True)


def legend_outside(ax, where: str = "right", **kwargs) -> None:
    """The legend beside (``right``) or under (``below``) the axes, never over the data."""
    if where == "right":
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kwargs)
    else:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), borderaxespad=0.0, **kwargs)


def wrap(text: str, width: int) -> str:
    """``text`` in lines of at most ``width`` characters, broken first at "; "."""
    return "\n".join(textwrap.fill(part, width) for part in text.split("; "))


def spaced_ticks(positions: Sequence[int], min_gap: float) -> list:
    """The positions kept for labels, each at least ``min_gap`` after the previous kept one, so
    labels never overlap; the last position is kept in preference to its close neighbours."""
    kept: list = []
    for p in positions:
        if not kept or p - kept[-1] >= min_gap:
            kept.append(p)
    if positions and kept[-1] != positions[-1] and len(kept) > 1 and positions[-1] - kept[-2] >= min_gap:
        kept[-1] = positions[-1]
    return kept
