"""Scheduler names, aliases, kinds and options: which scheduler a side runs and how it is built.

Both libraries ship the same scheduler classes under the same names, and both swap one in with
``Cls.from_config(pipeline.scheduler.config, **options)``. Names and aliases are checked here
without importing either library; option keys are checked against the class.

A scheduler is of one kind: it drives a noise-prediction model (epsilon, v or sample
prediction on discrete timesteps: the UNets of DDPM, Stable Diffusion, SDXL), a flow-matching
model (a velocity: SD3, Flux, Wan), or CogVideoX's transformer (v-prediction on a schedule
shifted by ``snr_shift_scale`` with zero terminal SNR, driven by its own two samplers: DDIM, and
a DPM-Solver whose ``step`` takes the previous timestep and the previous step's predicted
original sample and draws its noise from the generator the pipeline gives it, so both sides
draw it from xrand's shared stream). A recipe says which kind its denoiser is; a scheduler of
another kind, or of none, is refused before any work (:func:`check_fits`).
"""
from __future__ import annotations

import inspect
import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from ..checks import UsageError, UsageTypeError

NOISE, FLOW, COGVIDEOX = "noise", "flow", "cogvideox"
KINDS = {NOISE: "a noise-prediction (epsilon, v or sample) model", FLOW: "a flow-matching (velocity) model",
         COGVIDEOX: "CogVideoX's v-prediction model (its SNR-shifted samplers)"}

#: Every shared scheduler that drives a noise-prediction model.
NOISE_SCHEDULERS: Tuple[str, ...] = (
    "DDIMScheduler", "DDIMParallelScheduler", "DDPMScheduler", "DDPMParallelScheduler", "PNDMScheduler",
    "IPNDMScheduler", "EulerDiscreteScheduler", "EulerAncestralDiscreteScheduler", "HeunDiscreteScheduler",
    "KDPM2DiscreteScheduler", "KDPM2AncestralDiscreteScheduler", "LMSDiscreteScheduler",
    "DPMSolverMultistepScheduler", "DPMSolverSinglestepScheduler", "DPMSolverSDEScheduler",
    "UniPCMultistepScheduler", "DEISMultistepScheduler", "LCMScheduler", "TCDScheduler", "SASolverScheduler",
    "EDMEulerScheduler", "EDMDPMSolverMultistepScheduler", "CosineDPMSolverMultistepScheduler",
    "CMStochasticIterativeScheduler", "UnCLIPScheduler",
)

#: Shared schedulers made for flow-matching models (mindone.diffusers 0.5.0 does not export
#: diffusers' FlowMatchLCMScheduler).
FLOW_SCHEDULERS: Tuple[str, ...] = ("FlowMatchEulerDiscreteScheduler", "FlowMatchHeunDiscreteScheduler")

#: CogVideoX's own samplers (scheduling_ddim_cogvideox.py, scheduling_dpm_cogvideox.py): v-prediction with
#: ``snr_shift_scale``; the DPM one's step() takes the previous timestep and predicted original sample.
COGVIDEOX_SCHEDULERS: Tuple[str, ...] = ("CogVideoXDDIMScheduler", "CogVideoXDPMScheduler")
#: Every shared scheduler xrand drives, of any kind.
DRIVEN: Tuple[str, ...] = NOISE_SCHEDULERS + FLOW_SCHEDULERS + COGVIDEOX_SCHEDULERS

#: Multistep solvers that drive a flow-matching model with these config options (diffusers'
#: scheduling_dpmsolver_multistep.py and its siblings: ``use_flow_sigmas``, ``flow_prediction``).
FLOW_OPTIONS: Dict[str, Any] = {"use_flow_sigmas": True, "prediction_type": "flow_prediction"}
FLOW_CAPABLE: Tuple[str, ...] = (
    "DPMSolverMultistepScheduler", "DPMSolverSinglestepScheduler", "UniPCMultistepScheduler",
    "DEISMultistepScheduler", "SASolverScheduler",
)

#: Schedulers both libraries ship that drive neither kind of model here, and why (the refusal says it).
CANNOT_DRIVE: Dict[str, str] = {
    "AmusedScheduler": "it unmasks image tokens of a VQ transformer (aMUSEd), not a denoiser",
    "VQDiffusionScheduler": "it denoises discrete VQ tokens, not a denoiser's output",
    "ConsistencyDecoderScheduler": "it drives the consistency decoder of a VAE, not a denoiser",
    "DDIMInverseScheduler": "it inverts an image into noise (DDIM inversion); it does not sample",
    "DPMSolverMultistepInverseScheduler": "it inverts an image into noise; it does not sample",
    "DDPMWuerstchenScheduler": "it drives Wuerstchen's continuous-time prior, not a UNet on 0..999 timesteps",
    "RePaintScheduler": "it inpaints: its step() needs an original image and a mask",
    "SCMScheduler": "it drives sCM (TrigFlow) models such as SANA-Sprint",
    "ScoreSdeVeScheduler": "a variance-exploding score SDE: it has no step(), only step_pred/step_correct",
}

#: Short names: alias -> (class name, options).
ALIASES: Dict[str, Tuple[str, Dict[str, Any]]] = {
    "ddim": ("DDIMScheduler", {}),
    "ddpm": ("DDPMScheduler", {}),
    "pndm": ("PNDMScheduler", {}),
    "ipndm": ("IPNDMScheduler", {}),
    "euler": ("EulerDiscreteScheduler", {}),
    "euler-a": ("EulerAncestralDiscreteScheduler", {}),
    "heun": ("HeunDiscreteScheduler", {}),
    "dpm2": ("KDPM2DiscreteScheduler", {}),
    "dpm2-a": ("KDPM2AncestralDiscreteScheduler", {}),
    "lms": ("LMSDiscreteScheduler", {}),
    "dpm++-2m": ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++"}),
    "dpm++-2m-karras": ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++",
                                                        "use_karras_sigmas": True}),
    "dpm++-2m-sde": ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++"}),
    "dpm++-2s": ("DPMSolverSinglestepScheduler", {}),
    "dpm++-sde": ("DPMSolverSDEScheduler", {}),
    "unipc": ("UniPCMultistepScheduler", {}),
    "deis": ("DEISMultistepScheduler", {}),
    "lcm": ("LCMScheduler", {}),
    "tcd": ("TCDScheduler", {}),
    "sa-solver": ("SASolverScheduler", {}),
    "edm-euler": ("EDMEulerScheduler", {}),
    "edm-dpm++-2m": ("EDMDPMSolverMultistepScheduler", {}),
    "cosine-dpm++": ("CosineDPMSolverMultistepScheduler", {}),
    "cm": ("CMStochasticIterativeScheduler", {}),
    "unclip": ("UnCLIPScheduler", {}),
}

#: ``--scheduler all`` on a noise-prediction model: each shared scheduler, with options that
#: exercise its noise and variants.
MATRIX: Tuple[Tuple[str, Dict[str, Any]], ...] = (
    ("DDIMScheduler", {}),
    ("DDIMScheduler", {"eta": 1.0}),
    ("DDIMParallelScheduler", {"eta": 1.0}),
    ("DDPMScheduler", {}),
    ("DDPMParallelScheduler", {}),
    ("PNDMScheduler", {}),
    ("PNDMScheduler", {"skip_prk_steps": True}),
    ("IPNDMScheduler", {}),
    ("EulerDiscreteScheduler", {}),
    ("EulerDiscreteScheduler", {"s_churn": 1.0}),
    ("EulerAncestralDiscreteScheduler", {}),
    ("HeunDiscreteScheduler", {}),
    ("KDPM2DiscreteScheduler", {}),
    ("KDPM2AncestralDiscreteScheduler", {}),
    ("LMSDiscreteScheduler", {}),
    ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++"}),
    ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver", "final_sigmas_type": "sigma_min"}),
    ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++"}),
    ("DPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver", "final_sigmas_type": "sigma_min"}),
    ("DPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++", "use_karras_sigmas": True}),
    ("DPMSolverSinglestepScheduler", {"algorithm_type": "dpmsolver++"}),
    ("DPMSolverSinglestepScheduler", {"algorithm_type": "sde-dpmsolver++"}),
    ("DPMSolverSDEScheduler", {}),
    ("UniPCMultistepScheduler", {}),
    ("DEISMultistepScheduler", {}),
    ("LCMScheduler", {}),
    ("TCDScheduler", {"eta": 0.3}),
    ("SASolverScheduler", {}),
    ("EDMEulerScheduler", {}),
    ("EDMEulerScheduler", {"s_churn": 1.0}),
    ("EDMDPMSolverMultistepScheduler", {"algorithm_type": "dpmsolver++"}),
    ("EDMDPMSolverMultistepScheduler", {"algorithm_type": "sde-dpmsolver++"}),
    ("CosineDPMSolverMultistepScheduler", {}),
    ("CMStochasticIterativeScheduler", {}),
    ("UnCLIPScheduler", {"beta_schedule": "squaredcos_cap_v2"}),  # the only schedule it supports
)

#: step() parameters the pipeline or loop fills in itself: not options.
_STEP_OWN = ("self", "model_output", "timestep", "sample", "generator", "return_dict", "variance_noise",
             "prev_timestep", "per_token_timesteps", "pred_original_sample", "use_clipped_model_output")


#: ``--scheduler all`` on a flow-matching model: every shared scheduler that drives one (a
#: recipe leaves out those its library pipeline cannot run, Recipe.scheduler_refusal).
FLOW_MATRIX: Tuple[Tuple[str, Dict[str, Any]], ...] = (
    ("FlowMatchEulerDiscreteScheduler", {}),
    ("FlowMatchHeunDiscreteScheduler", {}),
    ("DPMSolverMultistepScheduler", dict(FLOW_OPTIONS, algorithm_type="dpmsolver++")),
    ("DPMSolverMultistepScheduler", dict(FLOW_OPTIONS, algorithm_type="sde-dpmsolver++")),
    ("DPMSolverSinglestepScheduler", dict(FLOW_OPTIONS, algorithm_type="dpmsolver++")),
    ("UniPCMultistepScheduler", dict(FLOW_OPTIONS)),
    ("DEISMultistepScheduler", dict(FLOW_OPTIONS)),
    ("SASolverScheduler", dict(FLOW_OPTIONS)),
)

#: Options whose noise no generator draws (so two sides cannot share it), and why.
UNSHARED_NOISE: Dict[Tuple[str, str], str] = {
    # scheduling_flow_match_euler_discrete.py step(): noise = torch.randn_like(sample) (mint.randn_like in mindone)
    ("FlowMatchEulerDiscreteScheduler", "stochastic_sampling"): "its step draws with randn_like from the "
    "framework's global RNG, not from the generator, so the two sides cannot share that noise",
}

#: ``--scheduler all`` on CogVideoX: both its samplers (DDIM draws no noise, DPM one or two draws a step).
COGVIDEOX_MATRIX: Tuple[Tuple[str, Dict[str, Any]], ...] = (("CogVideoXDDIMScheduler", {}),
                                                            ("CogVideoXDPMScheduler", {}))

MATRICES = {NOISE: MATRIX, FLOW: FLOW_MATRIX, COGVIDEOX: COGVIDEOX_MATRIX}


def known_names() -> List[str]:
    return sorted(set(DRIVEN) | set(CANNOT_DRIVE))


def kind_of(cls_name: str, config: Mapping[str, Any]) -> Optional[str]:
    """:data:`NOISE`, :data:`FLOW`, :data:`COGVIDEOX`, or None for a scheduler that drives none here.

    ``config``: the scheduler config it is built with (its options included): the multistep
    solvers drive a flow model with :data:`FLOW_OPTIONS`.
    """
    if cls_name in FLOW_SCHEDULERS:
        return FLOW
    if cls_name in COGVIDEOX_SCHEDULERS:
        return COGVIDEOX if config.get("prediction_type", "v_prediction") == "v_prediction" else None
    if cls_name in FLOW_CAPABLE and config.get("prediction_type") == "flow_prediction":
        return FLOW if config.get("use_flow_sigmas") else None
    if cls_name in NOISE_SCHEDULERS:
        return NOISE if config.get("prediction_type", "epsilon") in ("epsilon", "v_prediction", "sample") else None
    return None


def config_for(cls_name: str, base: Mapping[str, Any], kind: str,
               options: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """The config ``cls_name`` is built with from a folder's ``base`` config to drive a model of
    ``kind``: ``base``, then :data:`FLOW_OPTIONS` for a flow-capable solver on a flow-matching
    model (``dpm++-2m`` or ``unipc`` on SD3, Flux, Wan) unless ``base`` already makes flow sigmas,
    then ``options``."""
    flow = kind == FLOW and cls_name in FLOW_CAPABLE and kind_of(cls_name, base) != FLOW
    return {**base, **(FLOW_OPTIONS if flow else {}), **(options or {})}


def resolve(name: Any) -> Tuple[str, Dict[str, Any]]:
    """A scheduler name (class name any case, with or without "Scheduler", or an alias) -> (class, options)."""
    if not isinstance(name, str) or not name:
        raise UsageTypeError(f"scheduler must be a scheduler class name such as 'EulerDiscreteScheduler', got {name!r}")
    key = name.strip().lower()
    if key in ALIASES:
        cls, options = ALIASES[key]
        return cls, dict(options)
    for cls in known_names():
        if key in (cls.lower(), cls.lower()[: -len("scheduler")]):
            return cls, {}
    raise UsageError(f"unknown scheduler {name!r}; accepted: {', '.join(DRIVEN)} "
                     f"(any case, 'Scheduler' optional), 'all', or an alias: {', '.join(ALIASES)}")


def check_fits(cls_name: str, config: Mapping[str, Any], kind: str, pipeline: str,
               accepted: Optional[Callable[[], List[str]]] = None) -> None:
    """Refuse, before any work, a scheduler that cannot drive ``pipeline``'s denoiser (of ``kind``);
    ``accepted``: the schedulers to name instead (default: every one of the kind)."""
    found = kind_of(cls_name, config)
    if found == kind:
        return
    accepted = accepted() if accepted else [name for name in DRIVEN
                                            if kind_of(name, {}) == kind or (kind == FLOW and name in FLOW_CAPABLE)]
    if cls_name in CANNOT_DRIVE:
        why = CANNOT_DRIVE[cls_name]
    elif cls_name in FLOW_CAPABLE and kind == FLOW:
        why = (f"it drives a flow-matching model only with the options "
               f"{', '.join(f'{k}={json.dumps(v)}' for k, v in FLOW_OPTIONS.items())}")
    elif cls_name in COGVIDEOX_SCHEDULERS:
        why = f"it drives {KINDS[COGVIDEOX]}"
    elif found is None:
        why = f"its config has prediction_type {config.get('prediction_type')!r}, which xrand does not run"
    else:
        why = f"it drives {KINDS[found]}"
    raise UsageError(f"scheduler {cls_name} cannot drive {pipeline}, {KINDS[kind]}: {why}; accepted: "
                     f"{', '.join(accepted)}")


def parse_option(text: Any, what: str = "scheduler option", example: str = "use_karras_sigmas=true") -> Tuple[str, Any]:
    """``KEY=VALUE`` -> (key, value), the value parsed as JSON when it parses (``true``, ``1e-3``, ``"x"``)."""
    if not isinstance(text, str) or "=" not in text or not text.partition("=")[0].strip():
        raise UsageError(f"{what} {text!r}: expected KEY=VALUE, e.g. {example}")
    key, _, raw = text.partition("=")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def check_options(options: Any, what: str = "scheduler_options", keys: str = "option names") -> Dict[str, Any]:
    """A dict of names to JSON values (plain data: settings travel as JSON), as a new dict."""
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) and k for k in options):
        raise UsageTypeError(f"{what} must be a dict of {keys} to values, got {options!r}")
    try:
        json.dumps(dict(options))
    except (TypeError, ValueError):
        raise UsageTypeError(f"{what} must hold JSON values (numbers, strings, booleans, "
                             f"lists), got {options!r}") from None
    return dict(options)


def step_parameters(cls: type) -> List[str]:
    """The options a scheduler's ``step`` takes (``eta``, ``s_churn``...)."""
    return [p for p in inspect.signature(cls.step).parameters if p not in _STEP_OWN]


def split_options(cls: type, options: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Options -> (config options for ``from_config``, ``step`` arguments); unknown keys are refused."""
    config_keys = [k for k in inspect.signature(cls.__init__).parameters if k not in ("self", "kwargs")]
    step_keys = step_parameters(cls)
    config, step = {}, {}
    for key, value in options.items():
        if key in config_keys:
            config[key] = value
        elif key in step_keys:
            step[key] = value
        else:
            raise UsageError(f"{cls.__name__} has no option {key!r}; accepted: config keys "
                             f"{', '.join(config_keys)}; step arguments {', '.join(step_keys) or 'none'}")
    return config, step


def scheduler_class(library: Any, cls_name: str) -> type:
    """The class named ``cls_name`` in a diffusion library (diffusers or mindone.diffusers)."""
    import importlib

    # mindone.diffusers exports some schedulers (TCDScheduler) only from its schedulers package
    cls = getattr(library, cls_name, None) or getattr(importlib.import_module(library.__name__ + ".schedulers"),
                                                      cls_name, None)
    if cls is None:
        raise UsageError(f"{library.__name__} has no {cls_name}; accepted: "
                         f"{', '.join(DRIVEN)}")
    return cls


def build(library: Any, cls_name: str, config: Mapping[str, Any]) -> Any:
    """``Cls.from_config(config)`` from ``library``; a config the scheduler refuses is a usage error."""
    try:
        return scheduler_class(library, cls_name).from_config(dict(config))
    except (ValueError, NotImplementedError) as exc:  # e.g. algorithm_type='nope' refused by the scheduler
        raise UsageError(f"{cls_name} refused its config: {exc}") from exc


def check_shared_noise(cls_name: str, config: Mapping[str, Any]) -> None:
    """Refuse a config whose scheduler would draw noise outside the generator (:data:`UNSHARED_NOISE`)."""
    for (name, key), why in UNSHARED_NOISE.items():
        if name == cls_name and config.get(key):
            raise UsageError(f"{cls_name} with {key}={json.dumps(config[key])}: {why}; leave {key} off")


def check_steps(cls_name: str, config: Mapping[str, Any], steps: int) -> None:
    """Step counts a scheduler refuses with an unhelpful error of its own."""
    if cls_name == "PNDMScheduler" and not config.get("skip_prk_steps") and steps < 4:
        # diffusers' scheduling_pndm.py set_timesteps: the Runge-Kutta warm-up takes pndm_order (4) timesteps
        raise UsageError(f"PNDMScheduler with Runge-Kutta steps needs at least 4 steps, got {steps}; "
                         "use more steps or the option skip_prk_steps=true")


def config_dict(scheduler: Any) -> Dict[str, Any]:
    """A scheduler's config as plain JSON values (what a side actually ran)."""
    return json.loads(json.dumps({k: v for k, v in dict(scheduler.config).items() if not k.startswith("_")},
                                 default=str))


def describe(cls_name: str, options: Optional[Mapping[str, Any]]) -> str:
    """``"EulerDiscrete s_churn=1"``: a scheduler and its options in one short line."""
    short = cls_name[: -len("Scheduler")] if cls_name.endswith("Scheduler") else cls_name
    return " ".join([short] + [f"{k}={json.dumps(v)}" for k, v in sorted((options or {}).items())])


def scheduler_label(name: str, options: Optional[Dict[str, Any]] = None) -> str:
    """A sweep's name for one scheduler entry: the class name, then its options as sorted JSON
    (``'DDIMScheduler {"eta": 1.0}'``); the class name alone when it has none."""
    return f"{name} {json.dumps(options, sort_keys=True)}" if options else name


def split_label(label: str) -> Tuple[str, Dict[str, Any]]:
    """:func:`scheduler_label`'s inverse: (class name, options); an entry's dtype is left out."""
    name, _, options = split_entry(label)[0].partition(" ")
    return name, (json.loads(options) if options else {})


#: Between a scheduler label and the dtype in a sweep over dtypes (``'DDIMScheduler @ bfloat16'``).
DTYPE_MARK = " @ "


def entry_label(label: str, dtype: Optional[str] = None) -> str:
    """A sweep entry: a scheduler label, and the dtype in a sweep over dtypes."""
    return label if dtype is None else f"{label}{DTYPE_MARK}{dtype}"


def split_entry(label: str) -> Tuple[str, Optional[str]]:
    """:func:`entry_label`'s inverse: (scheduler label, dtype or None)."""
    scheduler, mark, dtype = label.rpartition(DTYPE_MARK)
    return (scheduler, dtype) if mark and dtype.isidentifier() else (label, None)


def row_label(row: Dict[str, Any]) -> str:
    """The entry label of a results.jsonl row (its ``scheduler``, ``options`` and, in a sweep
    over dtypes, ``dtype``)."""
    return entry_label(scheduler_label(str(row["scheduler"]), row.get("options") or None), row.get("dtype"))
