"""A comparison resolved once: :func:`make_plan` turns settings into one immutable :class:`Plan`.

Everything that can be refused is refused here, before any model loads: the model folder and
whether it fits the pipeline (components, denoiser class), the pipeline's inputs, the scheduler
(its name, whether it fits the recipe's kind, its options against the class, the step count),
devices, MindSpore's mode, the tolerance, the layer options. Every stage (both sides,
lockstep, the noise floor, layers, a matrix row, a sweep cell) reads the plan and re-derives
nothing. The folder is read once (:func:`.folder.read_folder`).

    plan = make_plan(Settings(model="folder", scheduler="euler-a"), lockstep=True)
    comparison = compare_frameworks(plan)
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from ..checks import UsageError, UsageTypeError
from ..pipelines import schedulers
from ..pipelines.folder import ModelFolder, check_components, read_folder
from ..pipelines.frameworks import (DEFAULT_MINDSPORE_MODE, FRAMEWORKS, check_framework, check_mindspore_mode,
                                    framework)
from ..pipelines.quiet import silenced
from ..pipelines.recipes import Recipe, recipe as recipe_named
from ..pipelines.settings import Settings

#: mindone's own torch-vs-MindSpore pipeline tests accept these relative L2 errors.
DEFAULT_TOLERANCE = {"float32": 5e-3, "float16": 5e-2}


@dataclass(frozen=True)
class SchedulerPlan:
    """The scheduler every side builds: its class, the config ``from_config`` gets (the folder's
    with the config options over it) and the options ``step()`` gets."""

    cls: str
    config: Mapping[str, Any]
    options: Mapping[str, Any]  # as the user gave them, config and step options together
    step_options: Mapping[str, Any]

    def build(self, library: Any) -> Any:
        """A new scheduler of ``library`` (diffusers or mindone.diffusers): one per run."""
        with silenced():  # the first use of a scheduler class imports its module
            return schedulers.build(library, self.cls, self.config)


@dataclass(frozen=True)
class Plan:
    """One comparison (or one side's run), resolved: read by every stage, changed by none."""

    settings: Settings
    folder: ModelFolder = field(repr=False)
    recipe: Recipe
    scheduler: SchedulerPlan
    frameworks: Tuple[str, ...]
    devices: Mapping[str, Optional[str]]
    tolerance: float
    mindspore_mode: str = DEFAULT_MINDSPORE_MODE
    lockstep: bool = False
    layers: Optional[Any] = None  # a layers.LayerOptions, checked against the schedule
    noise_floor: bool = False
    denoiser_calls: Optional[int] = None  # how many denoiser calls a run makes (known with layers)

    @property
    def pipeline(self) -> str:
        return self.recipe.pipeline

    def graph_identity(self) -> Dict[str, Any]:
        """What a MindSpore graph compiled for this plan depends on (the graph cache's key, with
        the versions): the folder's configs, the pipeline, the scheduler, every setting but the seed."""
        values = dataclasses.asdict(self.settings)
        values.pop("seed")  # the noise is an input of the graph, not part of it
        values.pop("model")
        return {"model": self.folder.digest, "pipeline": self.pipeline, "scheduler": self.scheduler.cls,
                "settings": values}

    def cell(self, seed: Optional[int] = None, scheduler: Optional[str] = None,
             scheduler_options: Optional[Mapping[str, Any]] = None) -> "Plan":
        """This plan with another seed and/or scheduler (a matrix row, a sweep cell): the folder
        is not read again; the scheduler is resolved again."""
        changes: Dict[str, Any] = {}
        if seed is not None:
            changes["seed"] = seed
        if scheduler is not None:
            changes.update(scheduler=scheduler, scheduler_options=dict(scheduler_options or {}))
        return make_plan(replace(self.settings, **changes), frameworks=self.frameworks, devices=self.devices,
                         tolerance=self.tolerance, mindspore_mode=self.mindspore_mode, lockstep=self.lockstep,
                         layers=self.layers, noise_floor=self.noise_floor, folder=self.folder)


def check_tolerance(tolerance: Any) -> float:
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0 \
            or math.isinf(tolerance):
        raise UsageError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    return float(tolerance)


def make_plan(settings: Settings, *, frameworks: Sequence[str] = FRAMEWORKS,
              devices: Optional[Mapping[str, Optional[str]]] = None, tolerance: Optional[float] = None,
              mindspore_mode: str = DEFAULT_MINDSPORE_MODE, lockstep: bool = False, layers: Optional[Any] = None,
              noise_floor: bool = False, folder: Optional[ModelFolder] = None) -> Plan:
    """Resolve and check everything about a comparison (see the module); ``UsageError`` naming
    the first thing that cannot run. ``frameworks``: the sides it runs (both for a comparison,
    one for ``xrand run``); ``devices``: framework -> device (torch: ``"cuda:0"``; MindSpore: a
    device target); ``folder``: the model folder when already read (a cell of a sweep)."""
    if not isinstance(settings, Settings):
        raise UsageTypeError(f"make_plan takes Settings, got {settings!r}")
    frameworks = tuple(check_framework(name) for name in frameworks)
    if not frameworks:
        raise UsageError("a plan needs at least one framework; accepted: " + ", ".join(FRAMEWORKS))
    devices = dict(devices or {})
    for name in devices:
        check_framework(name)
    check_mindspore_mode(mindspore_mode)
    tolerance = DEFAULT_TOLERANCE[settings.dtype] if tolerance is None else check_tolerance(tolerance)
    if noise_floor and "torch" not in frameworks:
        raise UsageError("the noise floor is torch's own: it needs the torch side")
    if layers is not None:
        layers.check()  # what needs no scheduler (the step's range is checked below)

    folder = folder or read_folder(settings.model)
    recipe = recipe_named(settings.pipeline or folder.pipeline)
    check_components(folder, recipe.components, recipe.optional_components, recipe.pipeline, recipe.denoiser,
                     recipe.denoiser_classes)
    recipe.check(settings, folder)

    library = framework(frameworks[0]).import_library()  # option keys are checked against the class
    scheduler = _scheduler_plan(settings, folder, recipe, library)
    calls = None
    if layers is not None:
        calls = _denoiser_calls(scheduler, library, settings.steps)
        layers.check(calls)
    return Plan(settings=settings, folder=folder, recipe=recipe, scheduler=scheduler, frameworks=frameworks,
                devices={name: framework(name).check_device(devices.get(name)) for name in frameworks},
                tolerance=tolerance, mindspore_mode=mindspore_mode, lockstep=bool(lockstep), layers=layers,
                noise_floor=bool(noise_floor), denoiser_calls=calls)


def _scheduler_plan(settings: Settings, folder: ModelFolder, recipe: Recipe, library: Any) -> SchedulerPlan:
    base = folder.scheduler_config
    cls_name = settings.scheduler or base.get("_class_name")
    if not cls_name:
        raise UsageError(f"model folder {folder.path!r}: its scheduler_config.json names no _class_name; "
                         "choose a scheduler with --scheduler")
    cls = schedulers.scheduler_class(library, cls_name)
    config_options, step_options = schedulers.split_options(cls, settings.scheduler_options)
    config = {**base, **config_options}
    schedulers.check_fits(cls_name, config, recipe.scheduler_kind, recipe.pipeline)
    schedulers.check_steps(cls_name, config, settings.steps)
    return SchedulerPlan(cls=cls_name, config=config, options=dict(settings.scheduler_options),
                         step_options=step_options)


def _denoiser_calls(scheduler: SchedulerPlan, library: Any, steps: int) -> int:
    """How many denoiser calls a run makes: one per timestep of the schedule (Heun's and KDPM2's
    second-order steps repeat timesteps)."""
    built = scheduler.build(library)
    built.set_timesteps(steps)
    return len(built.timesteps)
