"""What must agree for two sides to be comparable, checked once when it is made."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from ..checks import UsageError, UsageTypeError, check_seed
from ..streams import DEFAULT_STREAM, stream_factory
from . import schedulers
from .recipes import PIPELINES

#: Model dtypes the pipelines run in.
DTYPES: Tuple[str, ...] = ("float32", "float16")
#: The longest schedule: the models' training schedule.
MAX_STEPS = 1000


def _positive_int(name: str, value: Any, optional: bool = False) -> Optional[int]:
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{name} must be a positive integer, got {value!r}")
    return value


def _number(name: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise UsageError(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def _text(name: str, value: Any) -> Optional[str]:
    if value is not None and not isinstance(value, str):
        raise UsageTypeError(f"{name} must be a string, got {value!r}")
    return value


@dataclass(frozen=True)
class Settings:
    """Everything that must agree for two sides to be comparable (frozen: checked once, here).

    ``pipeline`` and ``scheduler`` are None for what the model folder declares; ``scheduler`` may
    be an alias (``"euler-a"``), stored as the class name with the alias's options.
    ``scheduler_options`` go to ``from_config`` or, for keys of ``step()`` (``eta``, ``s_churn``),
    to every step. The text fields are for text-to-image pipelines.
    """

    model: str
    steps: int = 50
    seed: int = 0
    batch_size: int = 4
    eta: float = 0.0
    stream: str = DEFAULT_STREAM
    dtype: str = "float32"
    pipeline: Optional[str] = None
    scheduler: Optional[str] = None
    scheduler_options: Dict[str, Any] = field(default_factory=dict)
    prompt: Optional[str] = None
    negative_prompt: Optional[str] = None
    guidance_scale: float = 7.5
    height: Optional[int] = None
    width: Optional[int] = None

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalised values are set once, here
        if not isinstance(self.model, str) or not self.model:
            raise UsageError(f"model must be a folder or a hub id, got {self.model!r}")
        _positive_int("steps", self.steps)
        _positive_int("batch_size", self.batch_size)
        if self.steps > MAX_STEPS:
            raise UsageError(f"steps must be at most {MAX_STEPS} (the training schedule's length), got {self.steps}")
        set_(self, "seed", check_seed(self.seed))
        set_(self, "eta", _number("eta", self.eta, 0.0, 1.0))
        stream_factory(self.stream)
        if self.dtype not in DTYPES:
            raise UsageError(f"unknown dtype {self.dtype!r} for the pipelines; accepted: {', '.join(DTYPES)}")
        if self.pipeline is not None:
            match = {p.lower(): p for p in PIPELINES}.get(str(self.pipeline).lower())
            if match is None:
                raise UsageError(f"unknown pipeline {self.pipeline!r}; accepted: {', '.join(PIPELINES)}")
            set_(self, "pipeline", match)
        options = schedulers.check_options(self.scheduler_options)
        if self.scheduler is not None:
            cls, alias_options = schedulers.resolve(self.scheduler)
            schedulers.check_fits(cls)
            set_(self, "scheduler", cls)
            options = {**alias_options, **options}
        set_(self, "scheduler_options", options)
        _text("prompt", self.prompt)
        _text("negative_prompt", self.negative_prompt)
        if isinstance(self.guidance_scale, bool) or not isinstance(self.guidance_scale, (int, float)) \
                or not math.isfinite(self.guidance_scale) or self.guidance_scale < 0:
            raise UsageError(f"guidance_scale must be a finite number >= 0, got {self.guidance_scale!r}")
        set_(self, "guidance_scale", float(self.guidance_scale))
        for name in ("height", "width"):
            value = _positive_int(name, getattr(self, name), optional=True)
            if value is not None and value % 8:
                raise UsageError(f"{name} must be a multiple of 8, got {value}")

    #: The fields two sides must share (the model is matched by its weights' fingerprint).
    COMPARED = ("steps", "seed", "batch_size", "eta", "stream", "dtype", "pipeline", "scheduler",
                "scheduler_options", "prompt", "negative_prompt", "guidance_scale", "height", "width")
