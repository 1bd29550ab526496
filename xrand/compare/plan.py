"""A comparison resolved once: :func:`make_plan` turns settings into one immutable :class:`Plan`.

Everything that can be refused is refused here, before any model loads: the model folder and
whether it fits the pipeline (components, denoiser class), the pipeline's inputs (input files
read once and known by their content's digest; call options against the library pipeline's
call), the scheduler (its name, whether it fits the recipe's kind and the library pipeline, its
options against the class, the step count), devices, MindSpore's mode (PyNative where the
recipe's denoiser cannot compile for a CPU or, unless graph mode is asked for, the model is large;
and why), the tolerance, the layer options. Every
stage (both sides, lockstep, the noise floor, layers, a matrix row, a sweep cell) reads the
plan and re-derives nothing. The folder is read once (:func:`.folder.read_folder`).

    plan = make_plan(Settings(model="folder", scheduler="euler-a"), lockstep=True)
    comparison = compare_frameworks(plan)
"""
from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass, field, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..checks import UsageError, UsageTypeError
from ..files import json_safe
from ..frameworks import (BFLOAT16_ON_CPU, DEFAULT_MINDSPORE_MODE, FRAMEWORKS, PYNATIVE_ABOVE_BYTES, check_framework,
                          check_mindspore_mode, framework, large_model_pynative)
from ..frameworks.base import library_class
from ..frameworks.quiet import silenced
from ..pipelines import schedulers
from ..pipelines.components import COMPONENT_DTYPES_PYNATIVE, model_components
from ..pipelines.folder import ModelFolder, check_components, read_folder
from ..pipelines.inputs import read_input
from ..pipelines.lora import adapter_name, check_lora_files, check_lora_targets
from ..pipelines.recipes import RECIPES, Recipe, recipe as recipe_named
from ..pipelines.settings import Settings

#: A model folder with more weights than this runs MindSpore's stages (one run of them after
#: torch's: its weights' check, side, layers, lockstep) in one process of their own, which loads
#: the pipeline once, when the comparison goes to a folder: MindSpore keeps memory after its
#: pipeline is dropped (in graph mode, about half of what its side held); a process that ends gives
#: all of it back. The process that plans and waits for them never imports MindSpore (0.3 GiB held
#: beside them for nothing): it asks a new process for MindSpore's device
#: (frameworks.mindspore.default_device_target) and imports and patches only what its own stages
#: run (stages.run_stages, the command line). Smaller folders run them here (a new process costs
#: seconds: importing MindSpore and mindone).
OWN_PROCESS_BYTES = 1 << 30

#: mindone's own torch-vs-MindSpore pipeline tests accept these relative L2 errors.
DEFAULT_TOLERANCE = {"float32": 5e-3, "float16": 5e-2, "bfloat16": 5e-2}


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
    weights_check: bool = True  # each side's loaded weights against the files, then against each other
    denoiser_calls: Optional[int] = None  # how many denoiser calls a run makes (known with layers)
    input_files: Mapping[str, str] = field(default_factory=dict)  # input -> sha256 of its file
    mindspore_mode_reason: Optional[str] = None  # why MindSpore runs PyNative where graph mode was asked or the default
    mindspore_mode_asked: Optional[str] = None  # as make_plan got it (None: the default)
    tolerance_given: bool = False  # False: the dtype's default (a cell in another dtype takes that one's)

    @property
    def pipeline(self) -> str:
        return self.recipe.pipeline

    def call_arguments(self, generator: Any) -> Dict[str, Any]:
        """The library pipeline's call for one run: the recipe's arguments and the call options."""
        return {**self.recipe.call_arguments(self.settings, generator), **self.settings.call_options}

    def graph_identity(self) -> Dict[str, Any]:
        """What a MindSpore graph compiled for this plan depends on (the graph cache's key, with
        the versions): the folder's configs, the pipeline, the scheduler, every setting but the
        seed (input files by their content)."""
        values = dataclasses.asdict(self.settings)
        values.pop("seed")  # the noise is an input of the graph, not part of it
        values.pop("noise")
        values.pop("model")
        values.pop("variant")  # weights, not the graph (the folder's digest covers a single file's configs)
        values.pop("config")
        values["loras"] = [[adapter_name(path), scale] for path, scale in self.settings.loras]  # files: input_files
        values.update(self.input_files)
        return {"model": self.folder.digest, "pipeline": self.pipeline, "scheduler": self.scheduler.cls,
                "settings": values}

    def identity(self) -> Dict[str, Any]:
        """What every result of this plan depends on (a comparison folder's, a kept floor's): the
        graph's identity, the seed, the noise and the weights' digest. The model folder's path is
        not part of it (the other machine's may differ); its configs and weights are."""
        return json_safe({**self.graph_identity(), "seed": self.settings.seed, "noise": self.settings.noise,
                          "weights": self.folder.fingerprint()})

    def cell(self, seed: Optional[int] = None, scheduler: Optional[str] = None,
             scheduler_options: Optional[Mapping[str, Any]] = None, dtype: Optional[str] = None) -> "Plan":
        """This plan with another seed, scheduler and/or dtype (a matrix row, a sweep cell): the
        folder is not read again; the scheduler is resolved again; a default tolerance becomes
        the cell dtype's."""
        changes: Dict[str, Any] = {}
        if seed is not None:
            changes["seed"] = seed
        if dtype is not None:
            changes["dtype"] = dtype
        if scheduler is not None:
            changes.update(scheduler=scheduler, scheduler_options=dict(scheduler_options or {}))
        return make_plan(replace(self.settings, **changes), frameworks=self.frameworks, devices=self.devices,
                         tolerance=self.tolerance if self.tolerance_given else None,
                         mindspore_mode=self.mindspore_mode_asked,
                         lockstep=self.lockstep, layers=self.layers, noise_floor=self.noise_floor, folder=self.folder,
                         weights_check=self.weights_check)


def check_tolerance(tolerance: Any) -> float:
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0 \
            or math.isinf(tolerance):
        raise UsageError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    return float(tolerance)


def make_plan(settings: Settings, *, frameworks: Sequence[str] = FRAMEWORKS,
              devices: Optional[Mapping[str, Optional[str]]] = None, tolerance: Optional[float] = None,
              mindspore_mode: Optional[str] = None, lockstep: bool = False, layers: Optional[Any] = None,
              noise_floor: bool = False, folder: Optional[ModelFolder] = None, weights_check: bool = True) -> Plan:
    """Resolve and check everything about a comparison (see the module); ``UsageError`` naming
    the first thing that cannot run. ``frameworks``: the sides it runs (both for a comparison,
    one for ``xrand run``); ``devices``: framework -> device (torch: ``"cuda:0"``; MindSpore: a
    device target); ``mindspore_mode``: ``"graph"`` or ``"pynative"``, None for graph mode but
    PyNative on a CPU for a folder of more than 1 GiB of weights; ``folder``: the model folder
    when already read (a cell of a sweep); ``weights_check``: False skips the check of the loaded
    weights (:mod:`.weights`)."""
    if not isinstance(settings, Settings):
        raise UsageTypeError(f"make_plan takes Settings, got {settings!r}")
    frameworks = tuple(check_framework(name) for name in frameworks)
    if not frameworks:
        raise UsageError("a plan needs at least one framework; accepted: " + ", ".join(FRAMEWORKS))
    devices = dict(devices or {})
    for name in devices:
        check_framework(name)
    asked_mode = mindspore_mode if mindspore_mode is None else check_mindspore_mode(mindspore_mode)
    mindspore_mode = asked_mode or DEFAULT_MINDSPORE_MODE
    tolerance_given = tolerance is not None
    tolerance = DEFAULT_TOLERANCE[settings.dtype] if tolerance is None else check_tolerance(tolerance)
    if noise_floor and "torch" not in frameworks:
        raise UsageError("the noise floor is torch's own: it needs the torch side")
    if noise_floor and settings.noise == "native":
        raise UsageError("the noise floor reruns torch in float64 with the shared noise (--noise shared); with "
                         "--noise native give --no-noise-floor (noise_floor=False)")
    if layers is not None:
        layers.check()  # what needs no scheduler (the step's range is checked below)

    folder = folder or read_folder(settings.model, settings.variant, settings.config)
    here = folder.weights_bytes <= OWN_PROCESS_BYTES
    if "mindspore" in frameworks and asked_mode is None and folder.weights_bytes > PYNATIVE_ABOVE_BYTES:
        framework("mindspore").ask_compiles_on_cpu(devices.get("mindspore"), here)  # on_cpu() below: meanwhile
    recipe = recipe_named(settings.pipeline or folder.pipeline)
    check_components(folder, recipe.components, recipe.optional_components, recipe.pipeline, recipe.denoiser,
                     recipe.denoiser_classes)
    if folder.single_file:
        _check_single_file(settings, folder, recipe)
    recipe.check(settings, folder)
    _check_component_dtypes(settings, folder, recipe)
    input_files = {name: read_input(name, getattr(settings, name)).digest for name in settings.FILES
                   if getattr(settings, name) is not None}
    input_files.update(_lora_files(settings, recipe, frameworks))

    first = framework(frameworks[0])
    library = first.import_library()  # option keys are checked against the class
    scheduler = _scheduler_plan(settings, folder, recipe, library)
    if settings.call_options:
        _check_call_options(settings, recipe, scheduler, library)
    calls = None
    if layers is not None:
        with first.running(devices.get(frameworks[0]), "pynative"):
            first.prepare()  # the scheduler runs mindone's first operators: MindSpore takes its launch before them only
            calls = _denoiser_calls(scheduler, recipe, settings, library)
        layers.check(calls)
        held = [name for name in folder.components()
                if name in ("vae", "controlnet") or name.startswith("text_encoder")]
        if layers.component != "denoiser" and layers.component not in held:  # a name layers knows: checked above
            raise UsageError(f"--layers-component {layers.component!r}: {recipe.pipeline} in {folder.path!r} has no "
                             f"such component; accepted: {', '.join(['denoiser'] + held)}")
    devices = {name: framework(name).check_device(devices.get(name)) for name in frameworks}
    mode_reason = None

    def on_cpu() -> bool:  # asked last: it imports MindSpore, or asks a new process where its stages run in one
        return "mindspore" in frameworks and framework("mindspore").compiles_on_cpu(devices["mindspore"], here)

    if mindspore_mode == "graph" and recipe.pynative_only and on_cpu():
        mindspore_mode, mode_reason = "pynative", recipe.pynative_only
    if mindspore_mode == "graph" and settings.dtype == "bfloat16" and on_cpu():
        mindspore_mode, mode_reason = "pynative", BFLOAT16_ON_CPU
    if asked_mode is None and mindspore_mode == "graph" and folder.weights_bytes > PYNATIVE_ABOVE_BYTES and on_cpu():
        mindspore_mode, mode_reason = "pynative", large_model_pynative(folder.weights_bytes)
    if mindspore_mode == "graph" and settings.component_dtypes and "mindspore" in frameworks:
        mindspore_mode, mode_reason = "pynative", COMPONENT_DTYPES_PYNATIVE
    return Plan(settings=settings, folder=folder, recipe=recipe, scheduler=scheduler, frameworks=frameworks,
                devices=devices, tolerance=tolerance, mindspore_mode=mindspore_mode, lockstep=bool(lockstep),
                layers=layers, noise_floor=bool(noise_floor), weights_check=bool(weights_check), denoiser_calls=calls,
                input_files=input_files,
                mindspore_mode_reason=mode_reason, mindspore_mode_asked=asked_mode, tolerance_given=tolerance_given)


def _lora_files(settings: Settings, recipe: Recipe, frameworks: Sequence[str]) -> Dict[str, str]:
    """``lora NAME`` -> sha256 of its file, for each ``--lora`` (sides compare LoRAs by content);
    UsageError where the pipeline loads no LoRA or diffusers lacks peft."""
    if not settings.loras:
        return {}
    import hashlib
    import importlib.util

    check_lora_files(settings.loras)
    takes = all(hasattr(library_class(framework(fw).import_library(), recipe.pipeline), "load_lora_weights")
                for fw in frameworks)
    if not takes:
        raise UsageError(f"--lora: {recipe.pipeline} loads no LoRA (it has no load_lora_weights); LoRAs load into "
                         "the pipelines of Stable Diffusion, SDXL, SD3 and Flux")
    if "torch" in frameworks and importlib.util.find_spec("peft") is None:
        raise UsageError("--lora: diffusers loads LoRAs through the peft package, which is not installed here: "
                         "pip install 'xrand[diffusers]' (or pip install peft)")
    if isinstance(recipe.denoiser, str):
        check_lora_targets(settings.loras, recipe.denoiser, recipe.pipeline)
    digests = {}
    for path, _ in settings.loras:
        with open(path, "rb") as f:
            digests[f"lora {adapter_name(path)}"] = hashlib.file_digest(f, "sha256").hexdigest()
    return digests


def _check_single_file(settings: Settings, folder: ModelFolder, recipe: Recipe) -> None:
    """A single file loads where the recipe takes its layout, as one pipeline (no component again)."""
    refusal = recipe.check_single_file(folder)
    if refusal:
        accepted = [r.pipeline for r in RECIPES.values() if r.loads_single_file]
        raise UsageError(f"{folder.single_file!r} with --config {folder.path!r} (a {folder.pipeline} folder) cannot "
                         f"load as {recipe.pipeline}: {refusal}; single files load as {', '.join(accepted)}, with "
                         "--config a folder of the same architecture")
    if settings.component_dtypes:
        raise UsageError(f"--component-dtype loads a component again from its folder's files; a single file "
                         f"({folder.single_file!r}) has none: give the model as a folder, or leave out "
                         "--component-dtype")


def _check_component_dtypes(settings: Settings, folder: ModelFolder, recipe: Recipe) -> None:
    """``--component-dtype`` names a component of the folder that holds weights, not the
    denoiser (it runs in ``--dtype``)."""
    accepted = [name for name in model_components(folder) if name != recipe.denoiser]
    for name, dtype in settings.component_dtypes.items():
        if name not in accepted:
            why = f"the denoiser runs in --dtype ({settings.dtype})" if name == recipe.denoiser else \
                f"{folder.path!r} has no component {name!r} with weights"
            raise UsageError(f"--component-dtype {name}={dtype}: {why}; accepted: "
                             f"{', '.join(accepted) or 'none (this folder has no other component with weights)'}")


def _scheduler_plan(settings: Settings, folder: ModelFolder, recipe: Recipe, library: Any) -> SchedulerPlan:
    base = folder.scheduler_config
    cls_name = settings.scheduler or base.get("_class_name")
    if not cls_name:
        raise UsageError(f"model folder {folder.path!r}: its scheduler_config.json names no _class_name; "
                         "choose a scheduler with --scheduler")
    cls = schedulers.scheduler_class(library, cls_name)
    config_options, step_options = schedulers.split_options(cls, settings.scheduler_options)
    config = schedulers.config_for(cls_name, base, recipe.scheduler_kind, config_options)

    def accepted() -> List[str]:
        return fitting_schedulers(recipe, base, library)

    schedulers.check_fits(cls_name, config, recipe.scheduler_kind, recipe.pipeline, accepted)
    refusal = recipe.scheduler_refusal(cls, config)
    if refusal:
        raise UsageError(f"scheduler {cls_name} cannot drive {recipe.pipeline}: {refusal}; accepted: "
                         f"{', '.join(accepted())}")
    schedulers.check_shared_noise(cls_name, config)
    schedulers.check_steps(cls_name, config, settings.steps)
    return SchedulerPlan(cls=cls_name, config=config, options=dict(settings.scheduler_options),
                         step_options=step_options)


def matrix_entries(plan: Plan) -> Tuple[List[Tuple[str, Dict[str, Any]]], Dict[str, str]]:
    """``--scheduler all``'s rows for this plan: the matrix of its recipe's kind, less the entries
    its library pipeline cannot run (returned apart: label -> why)."""
    library = framework(plan.frameworks[0]).import_library()
    base = plan.folder.scheduler_config
    entries, left_out = [], {}
    for name, options in schedulers.MATRICES[plan.recipe.scheduler_kind]:
        config = schedulers.config_for(name, base, plan.recipe.scheduler_kind, options)
        refusal = plan.recipe.scheduler_refusal(schedulers.scheduler_class(library, name), config)
        if refusal:
            left_out[schedulers.describe(name, options)] = refusal
        else:
            entries.append((name, dict(options)))
    return entries, left_out


def fitting_schedulers(recipe: Recipe, base: Mapping[str, Any], library: Any) -> List[str]:
    """The shared schedulers that fit ``recipe``'s kind and its library pipeline, built on the
    folder's scheduler config ``base``."""
    fitting = []
    for name in schedulers.DRIVEN:
        config = schedulers.config_for(name, base, recipe.scheduler_kind)
        if schedulers.kind_of(name, config) == recipe.scheduler_kind and \
                not recipe.scheduler_refusal(schedulers.scheduler_class(library, name), config):
            fitting.append(name)
    return fitting


def _check_call_options(settings: Settings, recipe: Recipe, scheduler: SchedulerPlan, library: Any) -> None:
    """Call options go to the library pipeline's call: refused when the run makes none (the
    generic loop) or the call takes no such keyword."""
    if not recipe.runs_library_pipeline(scheduler.cls, settings.dtype):
        raise UsageError(f"call options ({', '.join(settings.call_options)}) go to {recipe.pipeline}'s call, which "
                         f"a run with {scheduler.cls} does not make (it runs xrand's denoising loop)")
    call = library_class(library, recipe.pipeline).__call__
    parameters = [name for name, p in inspect.signature(call).parameters.items()
                  if name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    recipe.check_call_options(settings, parameters)


def _denoiser_calls(scheduler: SchedulerPlan, recipe: Recipe, settings: Settings, library: Any) -> int:
    """How many denoiser calls a run makes: one per timestep of the schedule (Heun's and KDPM2's
    second-order steps repeat timesteps), less those the library pipeline's own ``get_timesteps``
    skips at the run's strength (image to image, inpainting)."""
    built = scheduler.build(library)
    # Flux, SD3 (with dynamic shifting) and LTX compute mu from the image's token count
    # (pipeline_flux.py calculate_shift); mu shifts the sigmas but never changes how many there are
    needs_mu = scheduler.config.get("use_dynamic_shifting") and \
        "mu" in inspect.signature(built.set_timesteps).parameters
    built.set_timesteps(settings.steps, **({"mu": scheduler.config.get("base_shift", 0.5)} if needs_mu else {}))
    if "strength" not in recipe.inputs:
        return len(built.timesteps)
    pipeline = library_class(library, recipe.pipeline)
    strength = settings.strength
    if strength is None:  # the call's default (0.8 for StableDiffusionImg2ImgPipeline, 1.0 for inpainting...)
        strength = inspect.signature(pipeline.__call__).parameters["strength"].default
    get_timesteps = pipeline.get_timesteps  # it reads self.scheduler alone
    taken = inspect.signature(get_timesteps).parameters
    options = {k: v for k, v in settings.call_options.items() if k in taken}  # SDXL's denoising_start
    timesteps, _ = get_timesteps(_SchedulerHolder(built), settings.steps, strength, None, **options)
    return len(timesteps)


@dataclass
class _SchedulerHolder:
    """What a library pipeline's ``get_timesteps`` reads of its pipeline: the scheduler."""

    scheduler: Any
