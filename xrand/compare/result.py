"""A comparison's result: two recorded sides made into the numbers, the verdict and what ran."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from ..checks import UsageError
from ..pipelines.recipes import RECIPES
from ..pipelines.settings import Settings
from .boundary import local_error_text
from .components import compare_components, components_text, parted_by
from .known import known_causes
from .metrics import metrics
from .nonfinite import nonfinite_text
from .plan import DEFAULT_TOLERANCE, check_tolerance
from .sides import Side
from .weights import verdict_text as weights_verdict


@dataclass
class Comparison:
    """The result of comparing two sides, as the report holds it."""

    settings: Settings
    frameworks: List[str]
    tolerance: float
    final: Dict[str, float]
    initial_noise: Dict[str, float]
    global_steps: List[Dict[str, float]]
    local_steps: Optional[List[Dict[str, Any]]]
    timesteps: List[int]
    seconds: Dict[str, float]
    environments: Dict[str, Dict[str, Any]]
    images: Dict[str, np.ndarray] = field(repr=False, default_factory=dict)
    ran: Dict[str, Dict[str, Any]] = field(default_factory=dict)
    noise_floor: Optional[Dict[str, Any]] = None  # torch against itself (floor.noise_floor)
    layers: Optional[Any] = None  # a layers.LayerReport
    ops: Optional[Any] = None  # an ops.OpsReport (--ops)
    # the second side's timesteps where the two libraries' schedulers gave other ones for the same config
    timesteps_b: Optional[List[float]] = None
    stages: Optional[Dict[str, Any]] = None  # {"done", "missing", "bytes"} of a run into a comparison folder (.stages)
    weights: Optional[Dict[str, Any]] = None  # the loaded weights matched (weights.compare_weights)
    components: Optional[List[Dict[str, Any]]] = None  # each component's numbers (.components)
    nonfinite: Optional[Dict[str, Any]] = None  # framework -> where its first NaN or Inf showed (.nonfinite)

    @property
    def passed(self) -> bool:
        return self.final["rel_l2"] <= self.tolerance and self.timesteps_b is None and \
            (self.weights is None or self.weights["passed"]) and not self.nonfinite_seen()

    def nonfinite_seen(self) -> Dict[str, Dict[str, Any]]:
        """Each side's first NaN or Inf (:mod:`.nonfinite`), with the module ``--layers`` found
        making it where it looked at that call."""
        seen = {fw: dict(where) for fw, where in (self.nonfinite or {}).items() if where}
        found = getattr(self.layers, "nonfinite", None)
        mine = seen.get("mindspore")
        if found and mine and getattr(self.layers, "component", "denoiser") == "denoiser" and \
                mine.get("call") == self.layers.step:
            mine.update(found)
        return seen

    def verdict(self) -> str:
        a, b = self.frameworks
        word = "PASS" if self.passed else "FAIL"
        noise = " (native noise: each library's own generator)" if self.settings.noise == "native" else ""
        first = nonfinite_text(self.nonfinite_seen())
        line = (f"{word}: {first + '; ' if first else ''}{a} vs {b}{noise} after {self.steps_text()}, "
                f"relative L2 {self.final['rel_l2']:.3g} "
                f"(tolerance {self.tolerance:g}), max |diff| {self.final['max_abs']:.3g}, "
                f"PSNR {self.final['psnr_db']:.1f} dB")
        if self.noise_floor is not None:
            line += "; " + floor_ratio_text(self.final["rel_l2"], self.noise_floor["rel_l2"], a, b,
                                            self.settings.dtype)
        if self.local_steps:
            line += "; " + local_error_text(self.local_steps)
        if self.timesteps_b is not None:
            line += (f"; the schedulers' timesteps differ ({a} {_short(self.timesteps)} vs {b} "
                     f"{_short(self.timesteps_b)}): the two libraries schedule this config differently")
        if self.weights is not None and not self.weights["passed"]:
            line += "; " + weights_verdict(self.weights)
        if self.components:
            line += "; " + components_text(self.components)
        if self.stages and self.stages["missing"]:
            line += f" (still missing: {', '.join(self.stages['missing'])})"
        return line

    @property
    def parted_by(self) -> Optional[str]:
        """The first component over its limit (:mod:`.components`), or None."""
        return parted_by(self.components)

    def known_causes(self) -> List[str]:
        """The measured causes (:mod:`.known`) of what this verdict shows, for what ran."""
        sides = dict(zip(self.frameworks, ("a", "b")))  # framework -> its side
        mindspore = self.environments.get(sides.get("mindspore")) or {}
        return known_causes((self.ran.get("a") or {}).get("recipe"), self.settings.dtype, self.passed, mindspore)

    def summary_lines(self) -> List[str]:
        """What the console prints: the verdict, its known cause where measured, the layers' lines."""
        lines = [self.verdict()] + [f"known cause: {text}" for text in self.known_causes()]
        lines += [] if self.layers is None else [self.layers.summary(passed=self.passed)]
        if self.ops is not None:
            lines += [self.ops.summary()] + (self.ops.table() if self.ops.rows else [])
        return lines

    def steps_ran(self) -> Dict[str, Any]:
        """The scheduler steps that ran (``count``) against ``--steps`` (``asked``) and, where they
        differ, ``why``: image to image and inpainting run only the tail of the schedule their
        strength leaves; PNDM, Heun and KDPM2 step twice at some timesteps."""
        count, asked = len(self.timesteps), self.settings.steps
        whys = []
        ran = self.ran.get("a") or {}
        takes_strength = "strength" in getattr(RECIPES.get(ran.get("recipe")), "inputs", ())
        if count < asked and (takes_strength or self.settings.strength is not None):
            strength = "the pipeline's default strength" if self.settings.strength is None else \
                f"--strength {self.settings.strength:g}"
            whys.append(f"{strength} runs only the last part of the schedule")
        twice = len(self.timesteps) - len(set(self.timesteps))
        if count != asked and twice:
            whys.append(f"{ran.get('scheduler', 'the scheduler')} steps twice at {twice} "
                        f"timestep{'s' if twice > 1 else ''}")
        return {"count": count, "asked": asked, "why": "; ".join(whys) if count != asked else None}

    def steps_text(self) -> str:
        """'10 steps', or '6 scheduler steps (--steps 10: --strength 0.5 runs only the last part of the schedule)'."""
        ran = self.steps_ran()
        if ran["count"] == ran["asked"]:
            return f"{ran['count']} steps"
        why = f": {ran['why']}" if ran["why"] else ""
        return f"{ran['count']} scheduler steps (--steps {ran['asked']}{why})"


def _short(values: List[float]) -> str:
    return "[" + ", ".join(f"{v:g}" for v in values) + "]"


def floor_ratio_text(rel_l2: float, floor: float, a: str = "torch", b: str = "mindspore", dtype: str = "float32") -> str:
    """'MindSpore differs from torch by 1.4x torch's own float32 floor (1.2e-06)'."""
    names = {"torch": "torch", "mindspore": "MindSpore"}
    a, b = names.get(a, a), names.get(b, b)
    ratio = "an unmeasurable multiple of" if floor == 0 and rel_l2 > 0 else f"{rel_l2 / floor if floor else 0:.3g}x"
    return f"{b} differs from {a} by {ratio} {a}'s own {dtype} floor ({floor:.3g})"


def compare_sides(a: Side, b: Side, tolerance: Optional[float] = None,
                  local_steps: Optional[List[Dict[str, Any]]] = None) -> Comparison:
    """Compare two recorded sides; ``UsageError`` if their settings, models or classes differ.
    Timesteps that differ under the same settings and scheduler config are the libraries' own
    difference: a FAIL that names them, not a refusal."""
    check_comparable(a, b)
    tolerance = DEFAULT_TOLERANCE[a.settings.dtype] if tolerance is None else check_tolerance(tolerance)
    final = final_metrics(a.images, b.images)
    return Comparison(
        settings=a.settings,
        frameworks=[a.framework, b.framework],
        tolerance=tolerance,
        final=final,
        initial_noise=metrics(a.initial_noise, b.initial_noise),
        global_steps=[metrics(x, y) for x, y in zip(a.states, b.states)],
        local_steps=local_steps,
        timesteps=list(a.timesteps),
        seconds={a.framework + ("" if a.framework != b.framework else " (a)"): a.seconds,
                 b.framework + ("" if a.framework != b.framework else " (b)"): b.seconds},
        environments={"a": a.environment, "b": b.environment},
        images={"a": a.images, "b": b.images},
        ran={"a": a.ran, "b": b.ran},
        timesteps_b=None if same_timesteps(a.timesteps, b.timesteps) else list(b.timesteps),
        nonfinite={a.framework: a.nonfinite, b.framework: b.nonfinite} if a.nonfinite or b.nonfinite else None,
        components=compare_components(a.prompt, b.prompt, a.states, b.states, final, tolerance,
                                      "VAE decode" if "vae" in (a.ran.get("component_dtypes") or {}) else "output"),
    )


def same_timesteps(a: Any, b: Any) -> bool:
    """Whether two schedules are the same. Float timesteps (Karras, EDM, interpolated) may differ in
    their last digits between the libraries, and by more where a kernel's rounding meets a
    cancellation: KDPM2 ancestral's interpolated sigmas take sqrt(next² - up²), and with one
    kernel thread MindSpore's CPU rounds one ulp otherwise there, so mindone's last interpolated
    timestep is 0.00117 where diffusers' is 0 (tests/test_recipes.py). So a timestep may be off
    by 1e-5 of the schedule's largest (0.01 of 1000) or 1e-3 of itself; a schedule a whole
    timestep apart (749 against 750) is another schedule."""
    if len(a) != len(b):
        return False
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = max([1.0, *np.abs(a), *np.abs(b)])
    return bool(np.allclose(a, b, rtol=1e-3, atol=1e-5 * scale))


def final_metrics(a: np.ndarray, b: np.ndarray) -> Dict[str, Any]:
    """:func:`.metrics.metrics` of the final images (values in [0, 1]); for videos (batch, frames,
    height, width, channels) also ``per_frame``: the same numbers for each frame over the batch."""
    out: Dict[str, Any] = metrics(a, b, data_range=1.0)
    if a.ndim == 5 and a.shape == b.shape:
        out["per_frame"] = [metrics(a[:, f], b[:, f], data_range=1.0) for f in range(a.shape[1])]
    return out


def check_comparable(a: Side, b: Side) -> None:
    """Two sides are comparable when they ran the same settings, weights, pipeline and scheduler;
    one run against itself (the same side file twice, or a copy of it) is refused."""
    if (a.framework, a.device, a.seconds, a.environment) == (b.framework, b.device, b.seconds, b.environment):
        raise UsageError(f"both sides are the same {a.framework} run (same device, environment and timing): "
                         "a run compared with itself says nothing; give the other framework's side")
    mismatched = [
        f"{key}: {getattr(a.settings, key)!r} vs {getattr(b.settings, key)!r}"
        for key in Settings.COMPARED
        if getattr(a.settings, key) != getattr(b.settings, key)
    ]
    for key in ("pipeline", "scheduler", "step_options"):
        if a.ran.get(key) != b.ran.get(key):
            mismatched.append(f"{key} run: {a.ran.get(key)!r} vs {b.ran.get(key)!r}")
    files_a, files_b = a.ran.get("input_files") or {}, b.ran.get("input_files") or {}
    for name in sorted(set(files_a) | set(files_b)):
        if files_a.get(name) != files_b.get(name):
            mismatched.append(f"--{name} file: {files_a.get(name) or 'none'} vs {files_b.get(name) or 'none'}")
    if a.model_fingerprint != b.model_fingerprint:
        mismatched.append(f"model: {a.model_fingerprint} vs {b.model_fingerprint}")
    if a.images.shape != b.images.shape or a.states.shape != b.states.shape:
        mismatched.append(f"shapes: images {a.images.shape} vs {b.images.shape}, "
                          f"steps {a.states.shape} vs {b.states.shape}")
    if mismatched:
        raise UsageError("the two runs are not comparable: " + "; ".join(mismatched))
