"""How far apart two sides end up: metrics, lockstep local error, verdict, and the whole run.

Free running compares the two pipelines' own trajectories (global error, which the sampler
may amplify). Lockstep feeds both UNets and schedulers the same input at every step, taken
from the torch trajectory, so its per-step (local) error isolates operator differences.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import numpy as np

from ..checks import UsageError
from ..patch import patched
from .frameworks import DEFAULT_MINDSPORE_MODE, check_mindspore_mode
from .settings import Settings
from .sides import Loaded, Side, load, run

#: mindone's own torch-vs-MindSpore pipeline tests accept these relative L2 errors.
DEFAULT_TOLERANCE = {"float32": 5e-3, "float16": 5e-2}


def metrics(reference: np.ndarray, other: np.ndarray, data_range: Optional[float] = None) -> Dict[str, float]:
    """max and mean |a-b|, relative L2 ``||a-b|| / ||a||`` and (with a data range) PSNR in dB."""
    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(other, dtype=np.float64)
    if a.shape != b.shape:
        raise UsageError(f"cannot compare arrays of shapes {a.shape} and {b.shape}")
    diff = a - b
    norm = float(np.linalg.norm(a))
    out = {
        "max_abs": float(np.max(np.abs(diff))) if diff.size else 0.0,
        "mean_abs": float(np.mean(np.abs(diff))) if diff.size else 0.0,
        "rel_l2": float(np.linalg.norm(diff) / norm) if norm > 0 else float(np.linalg.norm(diff)),
    }
    if data_range is not None:
        mse = float(np.mean(diff**2)) if diff.size else 0.0
        out["psnr_db"] = math.inf if mse == 0 else 10 * math.log10(data_range**2 / mse)
    return out


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
    noise_floor: Optional[Dict[str, Any]] = None  # torch against itself (noise_floor.noise_floor)
    layers: Optional[Any] = None  # a layers.LayerReport

    @property
    def passed(self) -> bool:
        return self.final["rel_l2"] <= self.tolerance

    def verdict(self) -> str:
        a, b = self.frameworks
        word = "PASS" if self.passed else "FAIL"
        line = (f"{word}: {a} vs {b} after {self.settings.steps} steps, relative L2 {self.final['rel_l2']:.3g} "
                f"(tolerance {self.tolerance:g}), max |diff| {self.final['max_abs']:.3g}, "
                f"PSNR {self.final['psnr_db']:.1f} dB")
        if self.noise_floor is not None:
            line += "; " + floor_ratio_text(self.final["rel_l2"], self.noise_floor["rel_l2"], a, b,
                                            self.settings.dtype)
        return line


def floor_ratio_text(rel_l2: float, floor: float, a: str = "torch", b: str = "mindspore", dtype: str = "float32") -> str:
    """'MindSpore differs from torch by 1.4x torch's own float32 floor (1.2e-06)'."""
    names = {"torch": "torch", "mindspore": "MindSpore"}
    a, b = names.get(a, a), names.get(b, b)
    ratio = "an unmeasurable multiple of" if floor == 0 and rel_l2 > 0 else f"{rel_l2 / floor if floor else 0:.3g}x"
    return f"{b} differs from {a} by {ratio} {a}'s own {dtype} floor ({floor:.3g})"


def compare_sides(a: Side, b: Side, tolerance: Optional[float] = None,
                  local_steps: Optional[List[Dict[str, Any]]] = None) -> Comparison:
    """Compare two recorded sides; ``UsageError`` if their settings, models or classes differ."""
    check_comparable(a, b)
    tolerance = DEFAULT_TOLERANCE[a.settings.dtype] if tolerance is None else check_tolerance(tolerance)
    return Comparison(
        settings=a.settings,
        frameworks=[a.framework, b.framework],
        tolerance=tolerance,
        final=metrics(a.images, b.images, data_range=1.0),
        initial_noise=metrics(a.initial_noise, b.initial_noise),
        global_steps=[metrics(x, y) for x, y in zip(a.states, b.states)],
        local_steps=local_steps,
        timesteps=list(a.timesteps),
        seconds={a.framework + ("" if a.framework != b.framework else " (a)"): a.seconds,
                 b.framework + ("" if a.framework != b.framework else " (b)"): b.seconds},
        environments={"a": a.environment, "b": b.environment},
        images={"a": a.images, "b": b.images},
        ran={"a": a.ran, "b": b.ran},
    )


def check_tolerance(tolerance: Any) -> float:
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0 \
            or math.isinf(tolerance):
        raise UsageError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    return float(tolerance)


def check_comparable(a: Side, b: Side) -> None:
    """Two sides are comparable when they ran the same settings, weights, pipeline and scheduler."""
    mismatched = [
        f"{key}: {getattr(a.settings, key)!r} vs {getattr(b.settings, key)!r}"
        for key in Settings.COMPARED
        if getattr(a.settings, key) != getattr(b.settings, key)
    ]
    for key in ("pipeline", "scheduler", "step_options"):
        if a.ran.get(key) != b.ran.get(key):
            mismatched.append(f"{key} run: {a.ran.get(key)!r} vs {b.ran.get(key)!r}")
    if a.model_fingerprint != b.model_fingerprint:
        mismatched.append(f"model: {a.model_fingerprint} vs {b.model_fingerprint}")
    if a.images.shape != b.images.shape or a.states.shape != b.states.shape:
        mismatched.append(f"shapes: images {a.images.shape} vs {b.images.shape}, "
                          f"steps {a.states.shape} vs {b.states.shape}")
    elif not np.allclose(a.timesteps, b.timesteps, rtol=1e-3, atol=1e-3):
        # float timesteps (Karras, EDM) may differ in the last digits between the libraries
        mismatched.append("timesteps differ")
    if mismatched:
        raise UsageError("the two runs are not comparable: " + "; ".join(mismatched))


# -- both sides in one process ----------------------------------------------------------------------------------
@dataclass
class Pair:
    """Both frameworks' pipelines loaded once; :func:`compare_loaded` runs any number of cells."""

    torch: Loaded
    mindspore: Loaded

    def sides(self) -> List[Loaded]:
        return [self.torch, self.mindspore]


def load_pair(settings: Settings, torch_device: str = "cpu", mindspore_device: Optional[str] = None,
              quiet: bool = False) -> Pair:
    """Load the settings' model and pipeline on torch and on MindSpore (the same weights)."""
    return Pair(torch=load("torch", settings, torch_device, quiet),
                mindspore=load("mindspore", settings, mindspore_device, quiet))


def lockstep_side(loaded: Loaded, settings: Settings, inputs: List[np.ndarray], mode: str = DEFAULT_MINDSPORE_MODE,
                  hook: Optional[Callable[..., None]] = None) -> List[Dict[str, np.ndarray]]:
    """Each step of one side fed ``inputs[i]`` (the reference trajectory): its model output and its
    next sample. ``hook(index, timestep, unet_args, unet_kwargs)`` sees every UNet call's inputs
    (framework tensors, after ``scale_model_input`` and guidance duplication) before it runs.
    """
    from .brownian import use_xrand_brownian
    from .recipes import step_arguments
    from .sides import CountingGenerator

    loaded.use_scheduler(settings)
    fw, pipe, recipe = loaded.fw, loaded.pipe, loaded.recipe
    dtype = fw.dtype(settings.dtype)
    # The generator drawn exactly as in free running: the initial noise first, then per step.
    generator = CountingGenerator(settings.seed, stream=settings.stream)
    generator.normal(inputs[0].shape, settings.dtype)
    rows = []
    with patched(fw.library), loaded.context(mode):
        scheduler = pipe.scheduler
        use_xrand_brownian(scheduler, generator, fw.name)
        scheduler.set_timesteps(settings.steps)
        cond = recipe.conditioning(fw, pipe, settings)
        timesteps = scheduler.timesteps
        for i, t in enumerate(timesteps):
            if i >= len(inputs):
                break
            sample = fw.tensor(inputs[i], dtype, fw.model_device(pipe))
            model_input = scheduler.scale_model_input(sample, t)
            args, kwargs = recipe.unet_inputs(fw, pipe, model_input, t, cond, settings)
            if hook is not None:
                hook(i, t, args, kwargs)
            output = recipe.guide(fw, recipe.denoiser(pipe)(*args, **kwargs)[0], settings)
            step_kwargs = step_arguments(scheduler, generator, settings, loaded.step_options, timesteps, i)
            nxt = scheduler.step(output, t, sample, **step_kwargs, return_dict=False)[0]
            rows.append({"timestep": float(t), "model_output": fw.to_numpy(output), "sample": fw.to_numpy(nxt)})
    return rows


def lockstep(pair: Pair, settings: Settings, torch_side: Side,
             mode: str = DEFAULT_MINDSPORE_MODE) -> List[Dict[str, Any]]:
    """Per-step local error: both denoisers and schedulers fed torch's sample at every step."""
    inputs = [torch_side.initial_noise] + list(torch_side.states[:-1])
    a = lockstep_side(pair.torch, settings, inputs, mode)
    b = lockstep_side(pair.mindspore, settings, inputs, mode)
    return [{"timestep": x["timestep"], "model_output": metrics(x["model_output"], y["model_output"]),
             "sample": metrics(x["sample"], y["sample"])} for x, y in zip(a, b)]


def compare_loaded(pair: Pair, settings: Settings, tolerance: Optional[float] = None, lockstep_mode: bool = False,
                   mindspore_mode: str = DEFAULT_MINDSPORE_MODE, layers: Optional[Any] = None,
                   noise_floor: bool = False) -> Comparison:
    """One comparison (a sweep's cell) on pipelines already loaded by :func:`load_pair`.

    ``layers``: a :class:`.layers.LayerOptions`, to compare every submodule of the two
    denoisers at one step (:func:`layers_at_step`); ``noise_floor``: also run the torch side in
    float64 to measure torch's own floor (:func:`pipeline_floor`).
    """
    from .environment import fingerprint

    check_mindspore_mode(mindspore_mode)
    if tolerance is not None:
        check_tolerance(tolerance)
    if layers is not None:  # before any run: the step against the schedule, the dump's module names
        from .layers import check_module_names

        layers.check(schedule_length(pair.torch, settings))
        if layers.dump:
            check_module_names(pair.torch.recipe.denoiser(pair.torch.pipe), layers.dump)
    with patched():  # once for both runs: (un)patching scans every loaded module
        a = run(pair.torch, settings)
        b = run(pair.mindspore, settings, mindspore_mode)
        a.environment = {**fingerprint(["torch"]), **a.environment}
        b.environment = {**fingerprint(["mindspore"]), **b.environment}  # with the mode and cache that ran
        local = None
        if lockstep_mode:
            start = time.perf_counter()
            local = lockstep(pair, settings, a, mindspore_mode)
            a.environment["lockstep_seconds"] = time.perf_counter() - start
        comparison = compare_sides(a, b, tolerance, local)
        if layers is not None:  # which module parts them
            comparison.layers = layers_at_step(pair, settings, a, layers)
        if noise_floor:  # torch against itself
            comparison.noise_floor = pipeline_floor(pair.torch, settings, a.images)
    return comparison


def compare_frameworks(settings: Settings, torch_device: str = "cpu", mindspore_device: Optional[str] = None,
                       tolerance: Optional[float] = None, lockstep_mode: bool = False,
                       quiet: bool = False, mindspore_mode: str = DEFAULT_MINDSPORE_MODE,
                       layers: Optional[Any] = None, noise_floor: bool = False) -> Comparison:
    """Run diffusers on torch and mindone on MindSpore from one seed and compare them.

    ``mindspore_mode``: ``"graph"`` (the default: compiled once per model and machine, then
    loaded from :mod:`.graph_cache`) or ``"pynative"`` (MindSpore's own default, operator by
    operator). ``layers`` and ``noise_floor``: as :func:`compare_loaded`.
    """
    check_mindspore_mode(mindspore_mode)
    if tolerance is not None:
        check_tolerance(tolerance)
    if layers is not None:
        layers.check()  # what needs no model (the step's range is checked once the scheduler is built)
    pair = load_pair(settings, torch_device, mindspore_device, quiet)
    return compare_loaded(pair, settings, tolerance, lockstep_mode, mindspore_mode, layers, noise_floor)


def schedule_length(loaded: Loaded, settings: Settings) -> int:
    """How many scheduler steps (denoiser calls) a run of ``settings`` makes: ``settings.steps``,
    or more for a second-order scheduler (Heun, KDPM2 repeat timesteps)."""
    loaded.use_scheduler(settings)
    with loaded.context():
        loaded.pipe.scheduler.set_timesteps(settings.steps)
        return len(loaded.pipe.scheduler.timesteps)


class _Reached(Exception):
    """Stops the torch lockstep loop once the denoiser call of the layer step is captured."""


def layers_at_step(pair: Pair, settings: Settings, torch_side: Side, options: Any) -> Any:
    """:func:`.layers.layer_diff` on the two sides' denoisers at step ``options.step``.

    The inputs are the call torch's recipe makes there in lockstep (:func:`lockstep_side`):
    torch's sample at that step through ``scale_model_input``, the timestep, and whatever the
    recipe adds (Stable Diffusion: the prompt embeddings and the batch doubled for guidance).
    Both denoisers get exactly these tensors, in their dtypes.
    """
    from .layers import capture_call, layer_diff

    k = options.step
    inputs = [torch_side.initial_noise] + list(torch_side.states[:k])
    found: Dict[str, Any] = {}

    def hook(index, timestep, args, kwargs):
        if index == k:
            found["timestep"] = float(timestep)
            found["call"] = capture_call(args, kwargs)
            raise _Reached

    try:
        lockstep_side(pair.torch, settings, inputs, hook=hook)
    except _Reached:
        pass
    if "call" not in found:
        raise RuntimeError(f"the torch side made no denoiser call at step {k}")
    args, kwargs = found["call"]
    with pair.torch.context(), pair.mindspore.context():
        return layer_diff(pair.torch.recipe.denoiser(pair.torch.pipe),
                          pair.mindspore.recipe.denoiser(pair.mindspore.pipe), args, kwargs,
                          threshold=options.threshold, dump=options.dump, dump_dir=options.dump_dir,
                          step=k, timestep=found["timestep"])


def pipeline_floor(loaded: Loaded, settings: Settings, images: np.ndarray) -> Dict[str, Any]:
    """:func:`.noise_floor.noise_floor` of a loaded torch side: its ``images`` (``settings.dtype``)
    against the same run (:func:`.sides.run`, any recipe and scheduler) in float64, the noise
    drawn as in ``settings.dtype`` and cast up."""
    from .noise_floor import DrawsIn, noise_floor, widened

    def run64(dtype: str) -> np.ndarray:
        generator = DrawsIn(settings.seed, settings.stream, settings.dtype)
        with widened(loaded.pipe.components.values()):
            return run(loaded, settings, generator=generator).images

    return noise_floor(run64, settings.dtype, "float64", baseline=images,
                       what=f"the final images of {loaded.recipe.pipeline} with {loaded.scheduler_class} "
                            f"({settings.steps} steps)")
