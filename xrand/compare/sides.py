"""One side of a comparison: a pipeline loaded on one framework, run from a seed, recorded.

torch runs diffusers, MindSpore runs mindone.diffusers (with the CPU stand-ins of
:mod:`xrand.mindspore_cpu` when MindSpore is on a CPU). Both get noise from an
``xrand.Generator`` through :func:`xrand.patched`, and every denoiser call and scheduler step
passes the :class:`.boundary.Boundary`, so sides can be compared step by step.

    loaded = load(plan, "torch")          # once per model, dtype and pipeline
    side = run(loaded, plan)              # any number of runs (seed, steps, scheduler...)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Container, Dict, List, Optional

import numpy as np

from ..checks import UsageError
from ..frameworks import Framework, framework
from ..frameworks.threads import measure as measure_load
from ..generator import Generator
from ..patch import patched
from ..pipelines import schedulers
from ..pipelines.brownian import use_xrand_brownian
from ..pipelines.components import component_dtypes, model_components, use_component_dtypes
from ..pipelines.lora import use_loras
from ..pipelines.loop import denoising_loop
from ..pipelines.settings import Settings
from .boundary import Boundary, Recording
from .component_call import recorded
from .known import known_failure
from .records import RecordWriter
from .plan import Plan


@dataclass
class Side:
    """What one framework produced: images in [0, 1] (NHWC), the noise and every step.

    ``ran``: the pipeline (or ``"denoising_loop"``), scheduler class, scheduler options, step
    options and full scheduler config this side actually ran, where its noise came from
    (``noise``: the shared stream, or the library's own generator), the noise values drawn
    during the steps (``noise_draws``, None for native noise), whether xrand gave ``step`` the generator the pipeline
    did not pass, the input files' digests, the dtype and the operators that ran through a
    half-precision stand-in (``half_precision_stand_ins``: kernel -> dtypes; MindSpore on a CPU). ``recording``: the denoiser calls and steps kept for
    lockstep and layers (not saved in side files).
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
    recording: Optional[Recording] = field(default=None, repr=False)
    local_steps: Optional[List[Dict[str, Any]]] = field(default=None, repr=False)
    prompt: Dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # components.PROMPT_INPUTS given
    nonfinite: Optional[Dict[str, Any]] = None  # where a NaN or Inf first showed (.nonfinite), None: nowhere


@dataclass
class Loaded:
    """A pipeline loaded on one framework, reusable for many runs of the same model, dtype and pipeline."""

    fw: Framework
    pipe: Any
    pipeline: str
    model: str
    dtype: str
    device: Optional[str]  # torch device, or MindSpore device target (None: the context's)
    component_dtypes: Dict[str, str] = field(default_factory=dict)  # components in a dtype of their own
    loras: Any = ()  # the LoRAs loaded into it (Settings.loras) and whether fused
    weights: Optional[Any] = None  # its weights.SideWeights, once checked (they do not change between runs)

    @property
    def framework(self) -> str:
        return self.fw.name


def load(plan: Plan, framework_name: str, quiet: bool = True) -> Loaded:
    """Load the plan's model with its pipeline class on one framework."""
    fw = framework(framework_name)
    device = plan.devices.get(fw.name)
    pipe = plan.recipe.load(fw, plan.folder, plan.settings.dtype, device)
    if plan.settings.component_dtypes:
        use_component_dtypes(fw, pipe, plan.folder, plan.settings.component_dtypes, device)
    if plan.settings.loras:
        use_loras(pipe, plan.settings.loras, plan.settings.fuse_lora)
    if hasattr(pipe, "set_progress_bar_config"):  # a library pipeline (a recipe may load its own kind)
        pipe.set_progress_bar_config(disable=quiet, desc=fw.name)
    return Loaded(fw, pipe, plan.pipeline, plan.folder.path, plan.settings.dtype, device,
                  dict(plan.settings.component_dtypes), _loras(plan.settings))


def _loras(settings: Settings) -> Any:
    return (settings.loras, settings.fuse_lora) if settings.loras else ()


class CountingGenerator(Generator):
    """An ``xrand.Generator`` that counts the values it draws (noise drawn during the steps)."""

    drawn = 0

    def _draw(self, shape, dtype):
        self.drawn += int(np.prod(shape))
        return super()._draw(shape, dtype)


class Everything:
    """Every index (``record_calls=Everything()`` keeps every denoiser call)."""

    def __contains__(self, index: object) -> bool:
        return True


def run(loaded: Loaded, plan: Plan, *, generator: Optional[CountingGenerator] = None,
        record_calls: Optional[Container[int]] = None, record_steps: bool = False,
        feed: Optional[Recording] = None, record: Optional[RecordWriter] = None,
        record_component: Optional[str] = None, component_step: int = 0) -> Side:
    """Run a loaded pipeline as the plan says (seed, scheduler, inputs) and record it.

    A new scheduler is built for the run (``plan.scheduler``). MindSpore runs in
    ``plan.mindspore_mode``; a MindSpore side's ``environment`` says which mode ran and what the
    compile cache did; every side's, its kernel threads and why (:mod:`..frameworks.threads`) and
    the machine's load as it started. ``generator``: the run's noise, when it must be other than
    ``CountingGenerator(seed, stream=...)`` (the noise floor's float64 run draws as the float32
    run did); with ``noise="native"`` the side draws from its library's own generator instead
    (``ran["noise"]`` says how it was made; no draws are counted). ``record_calls`` / ``record_steps``: keep those denoiser calls / every step's
    inputs in ``side.recording`` (written by ``record``, a :class:`.records.RecordWriter`, when
    given; else held in memory); ``feed``: run fed the reference's recording (lockstep), with
    the local error per step in ``side.local_steps``. ``record_component``: also keep that
    component's call in the recording (:mod:`.component_call`; ``--layers-component``): a
    ControlNet's call number ``component_step``.
    """
    settings = plan.settings
    if (plan.folder.path, settings.dtype, plan.pipeline, settings.component_dtypes, _loras(settings)) != (
            loaded.model, loaded.dtype, loaded.pipeline, loaded.component_dtypes, loaded.loras):
        def dtypes(dtype: str, components: Dict[str, str]) -> str:
            return dtype + "".join(f" {name}={d}" for name, d in components.items())

        raise UsageError(f"this plan needs another pipeline: loaded {loaded.pipeline} "
                         f"{dtypes(loaded.dtype, loaded.component_dtypes)} from {loaded.model!r}, the plan runs "
                         f"{plan.pipeline} {dtypes(settings.dtype, settings.component_dtypes)} from "
                         f"{plan.folder.path!r}")
    fw, pipe, recipe = loaded.fw, loaded.pipe, plan.recipe
    pipe.scheduler = plan.scheduler.build(fw.import_library())
    native = settings.noise == "native"
    if native:  # the library's own generator, passed where the library pipeline passes it, nowhere else
        generator = fw.native_generator(settings.seed)
    elif generator is None:
        generator = CountingGenerator(settings.seed, stream=settings.stream)
    if not native:
        use_xrand_brownian(pipe.scheduler, generator, fw.name)  # DPMSolverSDE, CosineDPMSolverMultistep
    boundary = Boundary(fw, plan.scheduler.step_options, generator, record_calls, record_steps, feed,
                        add_generator=not native, record=record)
    library_pipeline = recipe.runs_library_pipeline(plan.scheduler.cls, settings.dtype)
    load = measure_load()  # the machine as this side starts: its threads, and the report's
    start = time.perf_counter()
    with patched(fw.library), fw.running(loaded.device, plan.mindspore_mode, plan.graph_identity()) as state, \
            fw.laid_out(pipe, plan.mindspore_mode), fw.threads(load) as threads, fw.half_precision(settings.dtype) as stand_ins, \
            boundary.attached(recipe.denoiser_of(pipe), pipe.scheduler), \
            recorded(fw, pipe, record_component, boundary.recording, component_step):
        try:
            if library_pipeline:
                images = pipe(**plan.call_arguments(generator), return_dict=False)[0]
            else:
                images = denoising_loop(fw, pipe, recipe, settings, plan.folder, generator)
        except Exception as exc:  # a failure measured before is said in one line, with its cause
            why = known_failure(recipe.pipeline, fw.name, exc)
            if why is None:
                raise
            raise UsageError(f"{fw.name}'s {recipe.pipeline} cannot run: {why}") from exc
    seconds = time.perf_counter() - start
    if not boundary.outputs:
        raise RuntimeError(f"{recipe.pipeline} on {fw.name} never called scheduler.step")
    if boundary.recording is not None:
        boundary.recording.close()
    images = np.asarray(images, dtype=np.float32)
    boundary.watch("decoded output", [images], step=None)
    return Side(
        framework=fw.name,
        settings=settings,
        images=images,
        initial_noise=boundary.first_input,
        states=np.stack(boundary.outputs),
        timesteps=boundary.timesteps,
        seconds=seconds,
        model_fingerprint=plan.folder.fingerprint(),
        device=fw.device_name(loaded.device),
        environment={**fw.environment(plan.mindspore_mode, state, plan.mindspore_mode_reason), **threads,
                     **load.report()},
        ran={
            "pipeline": recipe.pipeline if library_pipeline else "denoising_loop",
            "recipe": recipe.pipeline,
            "scheduler": plan.scheduler.cls,
            "scheduler_options": dict(settings.scheduler_options),
            "step_options": dict(plan.scheduler.step_options),
            "scheduler_config": schedulers.config_dict(pipe.scheduler),
            "noise": fw.native_noise.format(seed=settings.seed) if native else f"shared ({settings.stream})",
            "noise_draws": None if native else generator.drawn - boundary.drawn_before_steps,
            "generator_added_to_step": boundary.generator_added,
            "input_files": dict(plan.input_files),
            "dtype": settings.dtype,
            "component_dtypes": component_dtypes(fw, pipe, model_components(plan.folder)),
            "half_precision_stand_ins": dict(stand_ins),
        },
        recording=boundary.recording,
        local_steps=boundary.local if feed is not None else None,
        prompt=boundary.prompt,
        nonfinite=boundary.nonfinite,
    )


def fingerprinted(side: Side) -> Side:
    """``side`` with its framework's versions, machine and determinism flags in its environment
    (beside the mode and compile cache that ran, which :func:`run` records)."""
    from ..frameworks.environment import fingerprint

    side.environment = {**fingerprint([side.framework]), **side.environment}
    return side


def run_side(plan: Plan, framework_name: str, quiet: bool = False) -> Side:
    """Load the model on one framework and run it (the whole of ``xrand run``)."""
    return fingerprinted(run(load(plan, framework_name, quiet), plan))


__all__ = ["CountingGenerator", "Everything", "Loaded", "Side", "fingerprinted", "load", "run", "run_side"]
