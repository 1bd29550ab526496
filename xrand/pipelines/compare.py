"""How far apart two sides end up: metrics, lockstep local error, verdict, and the whole run.

Free running compares the two pipelines' own trajectories (global error, which the sampler
may amplify). Lockstep feeds both UNets and schedulers the same input at every step, taken
from the torch trajectory, so its per-step (local) error isolates operator differences.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import numpy as np

from .ddim import Settings, Side
from ..patch import patched

#: mindone's own torch-vs-MindSpore pipeline tests accept these relative L2 errors.
DEFAULT_TOLERANCE = {"float32": 5e-3, "float16": 5e-2}


def metrics(reference: np.ndarray, other: np.ndarray, data_range: Optional[float] = None) -> Dict[str, float]:
    """max and mean |a-b|, relative L2 ``||a-b|| / ||a||`` and (with a data range) PSNR in dB."""
    a = np.asarray(reference, dtype=np.float64)
    b = np.asarray(other, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"cannot compare arrays of shapes {a.shape} and {b.shape}")
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
    """Compare two recorded sides; ``ValueError`` if their settings or models differ."""
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
    )


def check_tolerance(tolerance: Any) -> float:
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not tolerance >= 0 \
            or math.isinf(tolerance):
        raise ValueError(f"tolerance must be a finite number >= 0, got {tolerance!r}")
    return float(tolerance)


def check_comparable(a: Side, b: Side) -> None:
    mismatched = [
        f"{key}: {getattr(a.settings, key)!r} vs {getattr(b.settings, key)!r}"
        for key in ("steps", "seed", "batch_size", "eta", "stream", "dtype")
        if getattr(a.settings, key) != getattr(b.settings, key)
    ]
    if a.model_fingerprint != b.model_fingerprint:
        mismatched.append(f"model: {a.model_fingerprint} vs {b.model_fingerprint}")
    if a.images.shape != b.images.shape or a.states.shape != b.states.shape:
        mismatched.append(f"image shapes: {a.images.shape} vs {b.images.shape}")
    if list(a.timesteps) != list(b.timesteps):
        mismatched.append("timesteps differ")
    if mismatched:
        raise ValueError("the two runs are not comparable: " + "; ".join(mismatched))


def lockstep(torch_pipe: Any, ms_pipe: Any, settings: Settings, torch_side: Side,
             mode: str = "pynative") -> List[Dict[str, Any]]:
    """Per-step local error: both UNets and schedulers fed torch's sample at every step."""
    import mindspore as ms
    import torch

    from ..generator import Generator
    from .ddim import mindspore_mode

    inputs = [torch_side.initial_noise] + list(torch_side.states[:-1])
    torch_dtype, ms_dtype = getattr(torch, settings.dtype), getattr(ms, settings.dtype)
    # Two generators drawn exactly as in free running: the initial noise first, then per step.
    gens = [Generator(settings.seed, stream=settings.stream) for _ in range(2)]
    for g in gens:
        g.normal(inputs[0].shape, settings.dtype)
    torch_pipe.scheduler.set_timesteps(settings.steps)
    ms_pipe.scheduler.set_timesteps(settings.steps)
    device = torch_pipe.unet.device
    rows = []
    with patched(), torch.no_grad(), mindspore_mode(mode):
        for i, t in enumerate(torch_pipe.scheduler.timesteps):
            x_pt = torch.from_numpy(inputs[i]).to(device=device, dtype=torch_dtype)
            x_ms = ms.tensor(inputs[i], dtype=ms_dtype)
            eps_pt = torch_pipe.unet(x_pt, t).sample
            eps_ms = ms_pipe.unet(x_ms, ms_pipe.scheduler.timesteps[i])[0]
            out_pt = torch_pipe.scheduler.step(eps_pt, t, x_pt, eta=settings.eta, generator=gens[0]).prev_sample
            out_ms = ms_pipe.scheduler.step(eps_ms, ms_pipe.scheduler.timesteps[i], x_ms, eta=settings.eta,
                                            generator=gens[1])[0]
            rows.append({
                "timestep": int(t),
                "model_output": metrics(eps_pt.float().cpu().numpy(), eps_ms.float().asnumpy()),
                "sample": metrics(out_pt.float().cpu().numpy(), out_ms.float().asnumpy()),
            })
    return rows


def compare_frameworks(settings: Settings, torch_device: str = "cpu", mindspore_device: Optional[str] = None,
                       tolerance: Optional[float] = None, lockstep_mode: bool = False,
                       quiet: bool = False, mindspore_mode: str = "pynative",
                       layers: Optional[Any] = None, noise_floor: bool = False) -> Comparison:
    """Run diffusers on torch and mindone on MindSpore from one seed and compare them.

    ``mindspore_mode``: ``"pynative"`` (MindSpore's default) or ``"graph"``. ``layers``: a
    :class:`xrand.pipelines.layers.LayerOptions` to compare every UNet submodule at one step;
    ``noise_floor``: also run the torch pipeline in float64 to measure torch's own floor.
    """
    from .ddim import (_mindspore_device, check_mindspore_mode, load_mindspore_pipeline, load_torch_pipeline,
                       run_pipeline)
    from .environment import fingerprint

    settings.check()
    check_mindspore_mode(mindspore_mode)
    if tolerance is not None:
        check_tolerance(tolerance)
    if layers is not None:
        layers.check(settings.steps)
    ms_device = _mindspore_device(mindspore_device)
    torch_pipe = load_torch_pipeline(settings.model, settings.dtype, torch_device, quiet)
    if layers is not None and layers.dump:
        from .layers import check_module_names

        check_module_names(torch_pipe.unet, layers.dump)
    ms_pipe = load_mindspore_pipeline(settings.model, settings.dtype, quiet)
    with patched():  # once for both runs: (un)patching scans every loaded module
        a = run_pipeline("torch", torch_pipe, settings, torch_device)
        b = run_pipeline("mindspore", ms_pipe, settings, ms_device, mindspore_mode)
    a.environment = fingerprint(["torch"])
    b.environment = fingerprint(["mindspore"])
    b.environment["mindspore_mode"] = mindspore_mode
    local = None
    if lockstep_mode:
        start = time.perf_counter()
        local = lockstep(torch_pipe, ms_pipe, settings, a, mindspore_mode)
        a.environment["lockstep_seconds"] = time.perf_counter() - start
    comparison = compare_sides(a, b, tolerance, local)
    if layers is not None:  # issue 11: which module parts them
        comparison.layers = layers_at_step(torch_pipe, ms_pipe, settings, a, layers)
    if noise_floor:  # issue 11: torch against itself
        comparison.noise_floor = pipeline_floor(settings, torch_device, a.images)
    return comparison


def layers_at_step(torch_pipe: Any, ms_pipe: Any, settings: Settings, torch_side: Side, options: Any) -> Any:
    """layers.layer_diff on the two UNets at step ``options.step``, fed torch's sample there."""
    from .layers import layer_diff, unet_inputs

    k = options.step
    sample = torch_side.initial_noise if k == 0 else torch_side.states[k - 1]
    timestep = torch_side.timesteps[k]
    args, kwargs = unet_inputs(sample, np.int64(timestep))
    return layer_diff(torch_pipe.unet, ms_pipe.unet, args, kwargs, threshold=options.threshold,
                      dump=options.dump, dump_dir=options.dump_dir, step=k, timestep=timestep)


def pipeline_floor(settings: Settings, torch_device: str, images: np.ndarray) -> Dict[str, Any]:
    """noise_floor.noise_floor over the torch DDIM pipeline: ``settings.dtype`` (``images``) vs float64."""
    import torch

    from .ddim import load_torch_pipeline
    from .noise_floor import DrawsIn, noise_floor

    def run(dtype: str) -> np.ndarray:
        pipe = load_torch_pipeline(settings.model, dtype, torch_device, quiet=True)
        generator = DrawsIn(settings.seed, settings.stream, settings.dtype)  # the same noise, cast up
        with patched(), torch.no_grad():
            return pipe(batch_size=settings.batch_size, generator=generator, eta=settings.eta,
                        num_inference_steps=settings.steps, output_type="np").images

    return noise_floor(run, settings.dtype, "float64", baseline=images,
                       what=f"the final images of the DDIM pipeline ({settings.steps} steps)")
