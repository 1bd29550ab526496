"""One side of a comparison: a pipeline loaded on one framework, run from a seed, recorded.

torch runs diffusers, MindSpore runs mindone.diffusers (with the CPU fallbacks of
:mod:`.mindspore_cpu` when MindSpore is on a CPU). Both get noise from an ``xrand.Generator``
through :func:`xrand.patched`, and every ``scheduler.step`` is recorded, so sides can be
compared step by step. What differs between pipeline classes is in :mod:`.recipes`.

    loaded = load("torch", settings)            # once per model, dtype and pipeline
    side = run(loaded, settings)                # any number of runs (seed, steps, scheduler...)
"""
from __future__ import annotations

import contextlib
import functools
import gc
import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

import numpy as np

from ..checks import UsageError
from ..generator import Generator
from ..patch import patched
from . import schedulers
from .brownian import use_xrand_brownian
from .frameworks import (DEFAULT_MINDSPORE_MODE, FRAMEWORKS, Framework, check_framework, check_mindspore_mode,
                         framework)
from .recipes import Recipe, denoising_loop, recipe as recipe_named, step_arguments
from .settings import Settings

DEFAULT_PIPELINE = "DDIMPipeline"  # for a hub id, whose model_index.json is not read here


@dataclass
class Side:
    """What one framework produced: images in [0, 1] (NHWC), the noise and every step.

    ``ran``: the pipeline (or ``"denoising_loop"``), scheduler class, scheduler options, step
    options and full scheduler config this side actually ran, and the noise values drawn
    during the steps (``noise_draws``).
    """

    framework: str
    settings: Settings
    images: np.ndarray
    initial_noise: np.ndarray
    states: np.ndarray  # (steps, batch, C, H, W): the sample after each scheduler step
    timesteps: List[float]
    seconds: float
    model_fingerprint: str
    environment: Dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"
    ran: Dict[str, Any] = field(default_factory=dict)


# -- the model folder ------------------------------------------------------------------------------------------
def is_local(model: str) -> bool:
    return os.path.isabs(model) or model.startswith(".") or os.path.exists(model) or model.count("/") > 1


def folder_pipeline(model: str) -> str:
    """The pipeline class a local folder declares (``model_index.json`` ``_class_name``)."""
    path = os.path.join(model, "model_index.json")
    try:
        with open(path) as f:
            return json.load(f)["_class_name"]
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"model folder {model!r} has no readable model_index.json with a _class_name "
                         f"({type(exc).__name__}); expected a folder written by save_pretrained") from None


def folder_scheduler(model: str) -> Optional[Dict[str, Any]]:
    """The folder's ``scheduler/scheduler_config.json`` (None for a hub id)."""
    path = os.path.join(model, "scheduler", "scheduler_config.json")
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            return json.load(f)
    except ValueError as exc:
        raise UsageError(f"{path!r} is not valid JSON: {exc}") from None


def pipeline_class(settings: Settings) -> str:
    """``--pipeline``, else what the folder declares."""
    if settings.pipeline is not None:
        return settings.pipeline
    if not is_local(settings.model):
        return DEFAULT_PIPELINE
    if not os.path.isdir(settings.model):
        raise UsageError(f"model folder {settings.model!r} does not exist")
    name = folder_pipeline(settings.model)
    recipe_named(name)  # unknown pipeline: one line naming the accepted ones
    return name


def check_model(model: str, components=("unet", "scheduler")) -> str:
    """A local folder must hold every component the pipeline needs; anything else is a hub id."""
    if not isinstance(model, str) or not model:
        raise UsageError(f"model must be a folder or a hub id, got {model!r}")
    if not is_local(model):
        return model
    if not os.path.isdir(model):
        raise UsageError(f"model folder {model!r} does not exist")
    for part in components:
        folder = os.path.join(model, part)
        if not os.path.isdir(folder):
            raise UsageError(f"model folder {model!r} has no {part}/; the pipeline needs "
                             f"{', '.join(components)} (a folder written by save_pretrained)")
        if part == "scheduler" and not os.path.isfile(os.path.join(folder, "scheduler_config.json")):
            raise UsageError(f"model folder {model!r} has no scheduler/scheduler_config.json")
        if os.path.isfile(os.path.join(folder, "config.json")) and not _weights(folder):
            raise UsageError(f"model folder {model!r} has no {part}/*.safetensors weights "
                             "(mindone reads safetensors weights only)")
    if "unet" in components and not os.path.isfile(os.path.join(model, "unet", "config.json")):
        raise UsageError(f"model folder {model!r} has no unet/config.json")
    return model


def _weights(folder: str) -> List[str]:
    return sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".safetensors"))


def model_fingerprint(model: str) -> str:
    """sha256 over every component's safetensors weights (so sides from two machines can be matched)."""
    if not os.path.isdir(model):
        return f"hub:{model}"
    files = [path for part in sorted(os.listdir(model)) if os.path.isdir(os.path.join(model, part))
             for path in _weights(os.path.join(model, part))]
    if not files:
        return f"hub:{model}"
    digest = hashlib.sha256()
    for path in files:
        stat = os.stat(path)
        digest.update(os.path.relpath(path, model).encode() + b"\0")
        digest.update(_sha256(os.path.realpath(path), stat.st_size, stat.st_mtime_ns).encode() + b"\0")
    return "sha256:" + digest.hexdigest()


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """Hashed once per file version: both sides of a comparison read the same weights."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# -- loading ------------------------------------------------------------------------------------------------------
@dataclass
class Loaded:
    """A pipeline loaded on one framework, reusable for many runs of the same model and dtype."""

    fw: Framework
    pipe: Any
    recipe: Recipe
    model: str
    dtype: str
    device: Optional[str]  # torch device, or MindSpore device target (None: the context's)
    base_scheduler: Dict[str, Any]  # the folder's scheduler config, with its _class_name
    scheduler_class: str = ""
    step_options: Dict[str, Any] = field(default_factory=dict)

    @property
    def framework(self) -> str:
        return self.fw.name

    def use_scheduler(self, settings: Settings) -> None:
        """Build the settings' scheduler (default: the folder's) from the folder's config."""
        cls_name = settings.scheduler or self.base_scheduler.get("_class_name") or type(self.pipe.scheduler).__name__
        schedulers.check_fits(cls_name)
        if cls_name not in schedulers.IMAGE_SCHEDULERS:
            raise UsageError(f"the model's scheduler {cls_name} is not one xrand compares; choose one with "
                             f"--scheduler: {', '.join(schedulers.IMAGE_SCHEDULERS)}")
        library = self.fw.import_library()
        with _quiet():  # the first use of a scheduler class imports its module
            self.pipe.scheduler, self.step_options = schedulers.build(library, cls_name, self.base_scheduler,
                                                                      settings.scheduler_options)
        self.scheduler_class = cls_name

    def context(self, mode: str = "pynative"):
        return self.fw.context(self.device, mode)

    @contextlib.contextmanager
    def compile_cache(self, settings: Settings, mode: str) -> Iterator[Dict[str, str]]:
        """Around a run in MindSpore's graph mode: its compile cache (:mod:`.graph_cache`), the heap frozen."""
        if self.fw.name != "mindspore" or mode != "graph":
            yield {}
            return
        from .graph_cache import compile_cache

        # MindSpore's graph compile calls gc.collect(), which walks every object of the loaded
        # libraries and models (0.3 s of a cached digits run with both sides loaded, measured);
        # frozen, they are skipped. Left alone if the caller froze the heap itself.
        freeze = gc.get_freeze_count() == 0
        if freeze:
            gc.freeze()
        try:
            with compile_cache(settings, self.recipe.pipeline, self.scheduler_class) as state:
                yield state
        finally:
            if freeze:
                gc.unfreeze()


def check_settings(settings: Settings) -> Recipe:
    """Everything about the settings that can be refused before importing a framework: the
    pipeline (``--pipeline`` or the folder's), its own requirements (a prompt), its components."""
    recipe = recipe_named(pipeline_class(settings))
    recipe.check(settings)
    check_model(settings.model, recipe.components)
    return recipe


def load(framework_name: str, settings: Settings, device: Optional[str] = None, quiet: bool = False) -> Loaded:
    """Load the settings' model with its pipeline class on one framework (torch device or MindSpore target)."""
    fw = framework(framework_name)
    recipe = check_settings(settings)
    name = recipe.pipeline
    if fw.name == "mindspore" and device is not None:
        from ..backends.mindspore import device_target

        device = device_target(device)
    base = folder_scheduler(settings.model)
    library = fw.import_library()
    with fw.context(device, "pynative"), _quiet():
        fw.prepare()
        cls = getattr(library, name)  # a lazy attribute: imports the pipeline's modules (chatty)
        kwargs = {fw.dtype_argument(): fw.dtype(settings.dtype), **recipe.load_arguments}
        with _load_errors(settings.model, fw.library):
            pipe = cls.from_pretrained(settings.model, **kwargs)
    if fw.name == "torch":
        pipe.to(device or "cpu")
    pipe.set_progress_bar_config(disable=quiet, desc=fw.name)
    if base is None:
        base = dict(pipe.scheduler.config, _class_name=type(pipe.scheduler).__name__)
    loaded = Loaded(fw, pipe, recipe, settings.model, settings.dtype, device, base)
    loaded.use_scheduler(settings)  # a scheduler option the config lacks fails here, before any run
    return loaded


def _quiet():
    from .quiet import silenced

    return silenced()


@contextlib.contextmanager
def _load_errors(model: str, library: str) -> Iterator[None]:
    """A model that fails to load (corrupt weights, bad config, no hub) is a usage error."""
    try:
        yield
    except (OSError, ValueError, KeyError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"{library} could not load the model {model!r}: {first_line}") from exc


# -- running ------------------------------------------------------------------------------------------------------
class CountingGenerator(Generator):
    """An ``xrand.Generator`` that counts the values it draws (noise drawn during the steps)."""

    drawn = 0

    def _draw(self, shape, dtype):
        self.drawn += int(np.prod(shape))
        return super()._draw(shape, dtype)


class _StepRecorder:
    """Wraps ``scheduler.step`` on one scheduler instance to keep every input and output and to
    add the step options (``s_churn``...) to the library pipeline's calls."""

    def __init__(self, loaded: Loaded, generator: CountingGenerator) -> None:
        self.first_input: Optional[np.ndarray] = None
        self.outputs: List[np.ndarray] = []
        self.timesteps: List[float] = []
        self.drawn_before_steps: Optional[int] = None
        scheduler = loaded.pipe.scheduler
        original = scheduler.step
        to_numpy, options = loaded.fw.to_numpy, loaded.step_options

        @functools.wraps(original)  # pipelines inspect step's signature for eta and generator
        def step(model_output, timestep, sample, *args, **kwargs):
            if self.first_input is None:
                self.first_input = to_numpy(sample)
                self.drawn_before_steps = generator.drawn
            kwargs.update(options)
            out = original(model_output, timestep, sample, *args, **kwargs)
            prev = out.prev_sample if hasattr(out, "prev_sample") else out[0]
            self.outputs.append(to_numpy(prev))
            self.timesteps.append(float(timestep))
            return out

        scheduler.step = step


def run(loaded: Loaded, settings: Settings, mode: str = DEFAULT_MINDSPORE_MODE,
        generator: Optional[CountingGenerator] = None) -> Side:
    """Run a loaded pipeline from the settings' seed (with the settings' scheduler) and record it.

    ``mode`` is MindSpore's execution mode (``"graph"``, with :mod:`.graph_cache`, or
    ``"pynative"``); torch ignores it. A MindSpore side's ``environment`` says which mode ran
    and what the compile cache did (``mindspore_mode``, ``mindspore_compile_cache``).
    ``generator``: the run's noise, when it must be other than ``CountingGenerator(settings.seed,
    stream=settings.stream)`` (the noise floor's float64 run draws as the float32 run did).
    """
    check_mindspore_mode(mode)
    if (settings.model, settings.dtype) != (loaded.model, loaded.dtype) \
            or pipeline_class(settings) != loaded.recipe.pipeline:
        raise UsageError(f"these settings need another pipeline: loaded {loaded.recipe.pipeline} "
                         f"{loaded.dtype} from {loaded.model!r}, asked for {settings.model!r}")
    loaded.recipe.check(settings)
    loaded.use_scheduler(settings)
    schedulers.check_steps(loaded.pipe.scheduler, settings.steps)
    fw, pipe, recipe = loaded.fw, loaded.pipe, loaded.recipe
    if generator is None:
        generator = CountingGenerator(settings.seed, stream=settings.stream)
    use_xrand_brownian(pipe.scheduler, generator, fw.name)  # DPMSolverSDE, CosineDPMSolverMultistep
    recorder = _StepRecorder(loaded, generator)
    library_pipeline = recipe.runs_library_pipeline(loaded.scheduler_class)
    start = time.perf_counter()
    try:
        with patched(fw.library), loaded.context(mode), loaded.compile_cache(settings, mode) as cache:
            if library_pipeline:
                images = pipe(**recipe.call_arguments(settings, generator), return_dict=False)[0]
            else:
                images = denoising_loop(fw, pipe, recipe, settings, generator, loaded.step_options)
    finally:
        del pipe.scheduler.step  # drop the instance wrapper, back to the class method
    seconds = time.perf_counter() - start
    environment = {}
    if fw.name == "mindspore":
        from ..mindspore_cpu import onednn_isa

        environment["mindspore_mode"] = mode
        if "status" in cache:
            environment["mindspore_compile_cache"] = cache["status"]
        isa = onednn_isa()
        if isa is not None:
            environment["mindspore_onednn_isa"] = isa
    if not recorder.outputs:
        raise RuntimeError(f"{recipe.pipeline} on {fw.name} never called scheduler.step")
    return Side(
        framework=fw.name,
        settings=settings,
        images=np.asarray(images, dtype=np.float32),
        initial_noise=recorder.first_input,
        states=np.stack(recorder.outputs),
        timesteps=recorder.timesteps,
        seconds=seconds,
        model_fingerprint=model_fingerprint(settings.model),
        device=_device_name(loaded),
        environment=environment,
        ran={
            "pipeline": recipe.pipeline if library_pipeline else "denoising_loop",
            "recipe": recipe.pipeline,
            "scheduler": loaded.scheduler_class,
            "scheduler_options": dict(settings.scheduler_options),
            "step_options": dict(loaded.step_options),
            "scheduler_config": schedulers.config_dict(pipe.scheduler),
            "noise_draws": generator.drawn - (recorder.drawn_before_steps or 0),
        },
    )


def _device_name(loaded: Loaded) -> str:
    if loaded.fw.name == "torch":
        return str(loaded.device or "cpu")
    if loaded.device is not None:
        return loaded.device
    import mindspore as ms

    return ms.get_context("device_target")


def run_side(framework_name: str, settings: Settings, device: Optional[str] = None, quiet: bool = False,
             mode: str = DEFAULT_MINDSPORE_MODE) -> Side:
    """Load the model on one framework and run it (the whole of ``xrand run``)."""
    from .environment import fingerprint

    check_framework(framework_name)
    check_mindspore_mode(mode)
    side = run(load(framework_name, settings, device, quiet), settings, mode)
    side.environment = {**fingerprint([framework_name]), **side.environment}
    return side


__all__ = ["FRAMEWORKS", "Loaded", "Side", "check_model", "load", "model_fingerprint", "run", "run_side",
           "step_arguments"]
