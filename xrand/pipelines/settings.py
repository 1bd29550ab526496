"""What a run asks for, as the user gave it: checked field by field once, when it is made.

:class:`Settings` is plain data (it travels in side files and sweep folders). What depends on
the model folder and the pipeline (which inputs a pipeline takes, which schedulers fit it) is
decided when a comparison is planned (:mod:`xrand.compare.plan`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from ..checks import UsageError, UsageTypeError, check_seed
from ..streams import DEFAULT_STREAM, stream_factory
from . import schedulers
from .folder import check_variant
from .inputs import FAMILY_INPUTS, TEXT_INPUTS
from .lora import check_loras
from .recipes import canonical_pipeline

#: Model dtypes the pipelines run in.
DTYPES: Tuple[str, ...] = ("float32", "float16", "bfloat16")
#: Where a run's noise comes from: ``shared``, one ``xrand.Generator`` stream on both sides;
#: ``native``, each library's own generator from the seed, as its docs tell users
#: (:meth:`xrand.frameworks.Framework.native_generator`).
NOISES: Tuple[str, ...] = ("shared", "native")
#: The longest schedule: the models' training schedule.
MAX_STEPS = 1000
#: The inputs that name files (read and checked when a comparison is planned).
FILE_INPUTS: Tuple[str, ...] = ("image", "mask", "control_image", "video")


def _positive_int(name: str, value: Any, optional: bool = False) -> Optional[int]:
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{name} must be a positive integer, got {value!r}")
    return value


def _number(name: str, value: Any, low: float, high: float, optional: bool = False) -> Optional[float]:
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise UsageError(f"{name} must be a number in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def check_call_options(options: Any) -> Dict[str, Any]:
    """``call_options``: keyword -> JSON value for the pipeline's call (the keywords are checked
    against the pipeline when a comparison is planned)."""
    options = schedulers.check_options(options, "call_options", "keyword names")
    bad = [key for key in options if not key.isidentifier()]
    if bad:
        raise UsageError(f"call option {bad[0]!r} is not a keyword name; expected KEY=VALUE with KEY a keyword of "
                         "the pipeline's call, e.g. max_sequence_length=64")
    return options


def check_component_dtypes(value: Any) -> Dict[str, str]:
    """``component_dtypes``: component name -> one of :data:`DTYPES`."""
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.isidentifier() for k in value):
        raise UsageTypeError(f"component_dtypes must map component names to dtypes, e.g. {{'vae': 'float32'}}, "
                             f"got {value!r}")
    for name, dtype in value.items():
        if dtype not in DTYPES:
            raise UsageError(f"--component-dtype {name}={dtype}: unknown dtype {dtype!r}; accepted: "
                             f"{', '.join(DTYPES)}")
    return dict(value)


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
    to every step. The pipeline's inputs (``prompt`` ... ``width``) are None when not given: the
    pipeline's own default, and a pipeline that does not take one refuses it.
    """

    model: str
    # the weights' form: a variant of the folder's files (fp16: */*.fp16.safetensors), or, with
    # config (a diffusers folder of the same architecture), model is one file of every weight
    variant: Optional[str] = None
    config: Optional[str] = None
    # LoRA adapters, (FILE.safetensors, scale) each, loaded by each library's load_lora_weights and
    # weighed by set_adapters; fuse_lora: merged into the weights (fuse_lora), their layers dropped
    loras: Tuple[Tuple[str, float], ...] = ()
    fuse_lora: bool = False
    steps: int = 50
    seed: int = 0
    batch_size: int = 4
    eta: float = 0.0
    stream: str = DEFAULT_STREAM
    dtype: str = "float32"
    noise: str = "shared"
    # components loaded in a dtype of their own (name -> dtype, e.g. {"vae": "float32"}), the
    # same on both sides; the names are checked against the folder when a comparison is planned
    component_dtypes: Dict[str, str] = field(default_factory=dict)
    pipeline: Optional[str] = None
    scheduler: Optional[str] = None
    scheduler_options: Dict[str, Any] = field(default_factory=dict)
    prompt: Optional[str] = None
    negative_prompt: Optional[str] = None
    guidance_scale: Optional[float] = None
    height: Optional[int] = None
    width: Optional[int] = None
    # the pipeline families' inputs (xrand.pipelines.recipes): a second and third prompt, an input
    # image and mask (file paths; sides compare the files' content, not their paths), img2img's
    # strength, a video's frame count, a ControlNet's control image (a file path too), and any
    # other keyword of the pipeline's call
    prompt_2: Optional[str] = None
    negative_prompt_2: Optional[str] = None
    prompt_3: Optional[str] = None
    negative_prompt_3: Optional[str] = None
    image: Optional[str] = None
    mask: Optional[str] = None
    strength: Optional[float] = None
    frames: Optional[int] = None
    control_image: Optional[str] = None
    video: Optional[str] = None  # a video's frames (an animated GIF, PNG or WebP): video to video
    call_options: Dict[str, Any] = field(default_factory=dict)

    #: The pipeline inputs among the fields (a recipe says which it takes).
    INPUTS = TEXT_INPUTS + FAMILY_INPUTS
    FILES = FILE_INPUTS

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalised values are set once, here
        if not isinstance(self.model, str) or not self.model:
            raise UsageError(f"model must be a folder written by save_pretrained, got {self.model!r}")
        check_variant(self.variant)
        set_(self, "loras", check_loras(self.loras))
        if not isinstance(self.fuse_lora, bool) or (self.fuse_lora and not self.loras):
            raise UsageError(f"fuse_lora merges the LoRAs given (--lora FILE) into the weights: it needs at least one "
                             f"LoRA, got fuse_lora={self.fuse_lora!r} with {len(self.loras)}")
        if self.config is not None and (not isinstance(self.config, str) or not self.config):
            raise UsageTypeError(f"config must be the path of a diffusers folder (the configs of a single file), "
                                 f"got {self.config!r}")
        _positive_int("steps", self.steps)
        _positive_int("batch_size", self.batch_size)
        if self.steps > MAX_STEPS:
            raise UsageError(f"steps must be at most {MAX_STEPS} (the training schedule's length), got {self.steps}")
        set_(self, "seed", check_seed(self.seed))
        set_(self, "eta", _number("eta", self.eta, 0.0, 1.0))
        stream_factory(self.stream)
        if self.dtype not in DTYPES:
            raise UsageError(f"unknown dtype {self.dtype!r} for the pipelines; accepted: {', '.join(DTYPES)}")
        if self.noise not in NOISES:
            raise UsageError(f"unknown noise {self.noise!r}; accepted: {', '.join(NOISES)} (shared: xrand's one "
                             "stream on both sides; native: each library's own generator from the seed)")
        set_(self, "component_dtypes", check_component_dtypes(self.component_dtypes))
        if self.pipeline is not None:
            set_(self, "pipeline", canonical_pipeline(self.pipeline))
        options = schedulers.check_options(self.scheduler_options)
        if self.scheduler is not None:
            cls, alias_options = schedulers.resolve(self.scheduler)
            set_(self, "scheduler", cls)
            options = {**alias_options, **options}
        set_(self, "scheduler_options", options)
        _text("prompt", self.prompt)
        _text("negative_prompt", self.negative_prompt)
        if self.guidance_scale is not None and (
                isinstance(self.guidance_scale, bool) or not isinstance(self.guidance_scale, (int, float))
                or not math.isfinite(self.guidance_scale) or self.guidance_scale < 0):
            raise UsageError(f"guidance_scale must be a finite number >= 0, got {self.guidance_scale!r}")
        if self.guidance_scale is not None:
            set_(self, "guidance_scale", float(self.guidance_scale))
        for name in ("height", "width"):
            _positive_int(name, getattr(self, name), optional=True)
        self._check_family_inputs()

    def _check_family_inputs(self) -> None:
        """The families' inputs, field by field (files are read when a comparison is planned:
        side files carry settings to machines without them)."""
        for name in ("prompt_2", "negative_prompt_2", "prompt_3", "negative_prompt_3"):
            _text(name, getattr(self, name))
        for name in self.FILES:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise UsageTypeError(f"{name} must be the path of an image file{' (animated)' if name == 'video' else ''}, "
                                     f"got {value!r}")
        if self.strength is not None:
            if isinstance(self.strength, bool) or not isinstance(self.strength, (int, float)) \
                    or not 0 < self.strength <= 1:
                raise UsageError(f"strength must be a number in (0, 1], got {self.strength!r}")
            object.__setattr__(self, "strength", float(self.strength))
        _positive_int("frames", self.frames, optional=True)
        object.__setattr__(self, "call_options", check_call_options(self.call_options))

    def given_inputs(self) -> Dict[str, Any]:
        """The pipeline inputs that were given (not None)."""
        return {name: getattr(self, name) for name in self.INPUTS if getattr(self, name) is not None}

    #: The fields two sides must share (the model is matched by its weights' fingerprint; a single
    #: file's config folder, like a folder's configs, by nothing).
    COMPARED = ("variant", "fuse_lora", "steps", "seed", "batch_size", "eta", "stream", "dtype", "noise", "component_dtypes",
                "pipeline", "scheduler", "scheduler_options", "prompt", "negative_prompt", "guidance_scale", "height",
                "width")
    #: (input files are matched by their content's digest, in what each side ran)
    COMPARED = COMPARED + tuple(n for n in FAMILY_INPUTS if n not in FILE_INPUTS) + ("call_options",)

