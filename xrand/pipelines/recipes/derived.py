"""Recipes read from the pipeline class: what its signatures and sources say, so that a new
pipeline's recipe names only what differs (a measured CPU gap, a size rule, its timestep keywords).

:func:`derive` reads the class (diffusers', or mindone.diffusers' where diffusers is not
installed; both ship it under one name) once, when a recipe first needs it:

- components from ``__init__``: its parameters without a default and its ``_optional_components``;
  optional are those ``_optional_components`` but the denoiser and, for a prompted pipeline, its
  text encoders and tokenizers (xrand always gives the prompt, never its embeddings);
- the denoiser: the first of ``transformer``, ``unet``, ``prior``, ``decoder``; its classes from
  the parameter's annotation;
- the scheduler kind from the scheduler class ``__init__`` declares (a flow-matching class: flow;
  CogVideoX's samplers: cogvideox;
  ``KarrasDiffusionSchedulers`` or a noise scheduler: noise; a solver that drives both: undecided);
- inputs: the ``__call__`` keywords that are :data:`..inputs.INPUTS`, a ControlNet pipeline's
  ``image`` as its ``control_image`` where its call has no ``control_image`` (Stable Diffusion's
  and SDXL's; ``call_names`` then gives the input the call's name); required: the prompt,
  ``image`` for image-to-image, inpainting and editing classes (by their names: their calls give
  ``image`` a default of None), ``video`` for video-to-video ones, ``mask`` for inpainting, a ControlNet pipeline's control image;
- the size multiple from ``check_inputs`` (``height % 16 != 0``, or ``% (self.vae_scale_factor * 2)``
  read from the folder's VAE; another expression is undecided);
- the batch keyword, whether the call takes ``eta``, and which schedulers its own call runs as
  given: every one of its kind, unless it converts its scheduler in ``__init__``
  (``DDIMScheduler.from_config(scheduler.config)``) or, on a noise model, never calls
  ``scale_model_input`` (DDPMPipeline): then only the one it declares.

``tests/test_derived_recipes.py`` checks the derivation against every hand-written recipe.
"""
from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from ...checks import UsageError
from .. import schedulers
from ..inputs import INPUTS
from .base import Recipe

#: Components that predict, in the order they are looked for.
DENOISERS = ("transformer", "unet", "prior", "decoder")
#: Class-name words of pipelines whose call cannot run without an input image / a mask.
IMAGE_WORDS = ("Img2Img", "Inpaint", "ImageToVideo", "Edit", "VideoToVideo")
MASK_WORDS = ("Inpaint",)
VIDEO_WORDS = ("VideoToVideo",)
#: Fields :func:`derive` decides (or lists as undecided), and the method that supersedes a field
#: when a recipe overrides it.
FIELDS = ("components", "optional_components", "denoiser", "denoiser_classes", "scheduler_kind", "inputs",
          "required_inputs", "call_names", "size_multiple", "batch_argument", "takes_eta", "native_schedulers")
SUPERSEDED_BY = {"size_multiple": "size_multiple_of"}


@dataclass(frozen=True)
class Derivation:
    """What a pipeline class says about its recipe (``values``), and what it leaves open
    (``undecided``: field -> why)."""

    pipeline: str
    values: Mapping[str, Any]
    undecided: Mapping[str, str]


def pipeline_class(name: str) -> type:
    """The pipeline class ``name`` from diffusers, or from mindone.diffusers where diffusers is absent."""
    from ...frameworks import framework
    from ...frameworks.quiet import silenced

    for fw in map(framework, ("torch", "mindspore")):
        if not fw.installed():
            continue
        with silenced():  # the lazy attribute imports the pipeline's modules (chatty)
            cls = getattr(fw.import_library(), name, None)
        if cls is not None:
            return cls
    raise UsageError(f"neither diffusers nor mindone.diffusers here ships {name}; a derived recipe reads its "
                     "components and inputs from the class")


_UNIONS = (typing.Union, getattr(types, "UnionType", typing.Union))


def _class_names(annotation: Any) -> Tuple[str, ...]:
    """The class names an annotation allows (a Union's members, Optional's inner class)."""
    if annotation is inspect.Parameter.empty:
        return ()
    if typing.get_origin(annotation) in _UNIONS:  # Optional[X], Union[X, Y], X | None (diffusers 0.39)
        return tuple(n for a in typing.get_args(annotation) if a is not type(None) for n in _class_names(a))
    name = getattr(annotation, "__name__", None)
    return (name,) if name else ()


def _scheduler_kind(declared: Tuple[str, ...]) -> Tuple[Optional[str], str]:
    """(kind, why undecided) from the scheduler classes ``__init__`` declares."""
    kinds = set()
    for name in declared:
        if name in schedulers.FLOW_SCHEDULERS:
            kinds.add(schedulers.FLOW)
        elif name in schedulers.COGVIDEOX_SCHEDULERS:
            kinds.add(schedulers.COGVIDEOX)
        elif name in schedulers.FLOW_CAPABLE:
            return None, f"it declares {name}, which drives a noise or a flow model (the folder's config says which)"
        elif name == "KarrasDiffusionSchedulers" or name in schedulers.NOISE_SCHEDULERS:
            kinds.add(schedulers.NOISE)
        else:
            return None, f"it declares {name}, which is of none of xrand's scheduler kinds"
    if len(kinds) != 1:
        return None, f"it declares {' or '.join(declared) or 'no scheduler class'}"
    return kinds.pop(), ""


def _source(function: Any) -> str:
    try:
        return inspect.getsource(function)
    except (OSError, TypeError):
        return ""


@functools.lru_cache(maxsize=None)
def derive(pipeline: str) -> Derivation:
    """Read the recipe fields of the pipeline class named ``pipeline`` (cached per name)."""
    cls = pipeline_class(pipeline)
    init = {k: p for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self"
            and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    library_optional = [name for name in getattr(cls, "_optional_components", ()) or () if name in init]
    parts = [name for name, p in init.items() if p.default is inspect.Parameter.empty or name in library_optional]
    call = [k for k, p in inspect.signature(cls.__call__).parameters.items() if k != "self"
            and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    call_defaults = inspect.signature(cls.__call__).parameters
    values: Dict[str, Any] = {}
    undecided: Dict[str, str] = {}

    call_names = dict(Recipe.call_names)
    controlnet = "controlnet" in init
    if controlnet and "control_image" not in call:  # the SD and SDXL ControlNet calls' image is the control image
        call_names["control_image"] = "image"
    values["call_names"] = call_names
    names = {v: k for k, v in call_names.items()}
    inputs = tuple(names.get(k, k) for k in call if names.get(k, k) in INPUTS)
    values["inputs"] = inputs
    prompted = "prompt" in inputs
    denoiser = next((name for name in DENOISERS if name in parts), None)
    if denoiser is None:
        undecided["denoiser"] = f"its __init__ takes none of {', '.join(DENOISERS)}"
        undecided["denoiser_classes"] = undecided["denoiser"]
    else:
        values["denoiser"] = denoiser
        values["denoiser_classes"] = _class_names(init[denoiser].annotation)

    def needed(name: str) -> bool:
        return name == denoiser or (prompted and name.startswith(("text_encoder", "tokenizer")))

    values["optional_components"] = tuple(n for n in parts if n in library_optional and not needed(n))
    values["components"] = tuple(n for n in parts if n not in values["optional_components"])

    kind, why = _scheduler_kind(_class_names(init["scheduler"].annotation) if "scheduler" in init else ())
    if kind is None:
        undecided["scheduler_kind"] = why
    else:
        values["scheduler_kind"] = kind

    required = [name for name in inputs if call_defaults[call_names.get(name, name)].default
                is inspect.Parameter.empty]
    if prompted:
        required.append("prompt")
    if "image" in inputs and any(word in pipeline for word in IMAGE_WORDS):
        required.append("image")
    if "video" in inputs and any(word in pipeline for word in VIDEO_WORDS):
        required.append("video")
    if "mask" in inputs and any(word in pipeline for word in MASK_WORDS):
        required.append("mask")
    if controlnet and "control_image" in inputs:
        required.append("control_image")
    values["required_inputs"] = tuple(dict.fromkeys(n for n in inputs if n in required))

    sizes = re.findall(r"height % (.+?) != 0", _source(getattr(cls, "check_inputs", None)))
    vae_times = re.fullmatch(r"\(?self\.vae_scale_factor(?: \* (\d+))?\)?", sizes[0]) if sizes else None
    if len(set(sizes)) == 1 and sizes[0].isdigit():
        values["size_multiple"] = int(sizes[0])
    elif len(set(sizes)) == 1 and vae_times:
        fixed = re.search(r"self\.vae_scale_factor = (\d+)\n", _source(cls.__init__))  # Lumina 2's is 8, whatever the VAE
        times = int(vae_times.group(1) or 1)  # else the folder's VAE decides (DerivedRecipe.size_multiple_of)
        values["size_multiple"] = int(fixed.group(1)) * times if fixed else ("vae_scale_factor", times)
    elif sizes:
        undecided["size_multiple"] = f"check_inputs asks height % {sizes[0]}"
    elif {"height", "width"} & set(inputs):
        undecided["size_multiple"] = "check_inputs does not say"
    else:  # the size comes from an input image, or there is none to choose
        values["size_multiple"] = Recipe.size_multiple

    values["batch_argument"] = next((k for k in ("num_images_per_prompt", "num_videos_per_prompt", "batch_size")
                                     if k in call), "batch_size")
    values["takes_eta"] = "eta" in call
    declared = _class_names(init["scheduler"].annotation) if "scheduler" in init else ()
    converts = ".from_config(scheduler.config)" in _source(cls.__init__)
    skips_scaling = "scale_model_input" not in _source(cls.__call__)
    values["native_schedulers"] = ("converts", declared[:1]) if converts else ("skips_scaling", declared[:1]) \
        if skips_scaling else None
    return Derivation(pipeline, values, undecided)


class _Derived:
    """A recipe field read from the pipeline class (:func:`derive`) when first used."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, recipe: Any, owner: type) -> Any:
        if recipe is None:
            return self
        derivation = derive(recipe.pipeline)
        if self.name in derivation.undecided:
            raise UsageError(f"the recipe of {recipe.pipeline} must say its {self.name}: "
                             f"{derivation.undecided[self.name]}")
        value = derivation.values[self.name]
        if self.name == "native_schedulers" and value is not None:
            # a converting pipeline runs only its own scheduler; one that skips scale_model_input
            # runs only its own on a noise model (a flow scheduler's input needs no scaling)
            why, declared = value
            return declared if why == "converts" or recipe.scheduler_kind == schedulers.NOISE else None
        return value


class DerivedRecipe(Recipe):
    """A recipe whose fields (:data:`FIELDS`) are read from its pipeline class; a subclass sets
    ``pipeline`` and only what differs (a class attribute replaces the derived value)."""

    components = _Derived()
    optional_components = _Derived()
    denoiser = _Derived()
    denoiser_classes = _Derived()
    scheduler_kind = _Derived()
    inputs = _Derived()
    required_inputs = _Derived()
    call_names = _Derived()
    size_multiple = _Derived()
    batch_argument = _Derived()
    takes_eta = _Derived()
    native_schedulers = _Derived()

    def size_multiple_of(self, folder: Any) -> int:
        multiple = self.size_multiple
        if isinstance(multiple, tuple):  # ("vae_scale_factor", n): n pixels per latent
            from .conditional import vae_scale_factor

            return vae_scale_factor(folder) * multiple[1]
        return multiple

    def undecided(self) -> Dict[str, str]:
        """What the pipeline class left open and this recipe does not say (field -> why): empty
        for a recipe that can run."""
        derivation = derive(self.pipeline)
        return {name: why for name, why in derivation.undecided.items()
                if isinstance(_class_attribute(type(self), name), _Derived)
                and not _overrides(type(self), SUPERSEDED_BY.get(name))}


def _class_attribute(cls: type, name: str) -> Any:
    return next(vars(c)[name] for c in cls.__mro__ if name in vars(c))


def _overrides(cls: type, method: Optional[str]) -> bool:
    return method is not None and _class_attribute(cls, method) not in (vars(Recipe)[method],
                                                                         vars(DerivedRecipe).get(method))


def derived_recipe(pipeline: str, base: type = DerivedRecipe, **given: Any) -> Recipe:
    """A recipe of ``pipeline`` read from its class, with ``given`` fields (or methods) in place of
    the derived ones; ``base``: a recipe class whose methods it keeps (derived fields come first)."""
    bases = (base,) if issubclass(base, DerivedRecipe) else (DerivedRecipe, base)
    # a method of base that supersedes a derived field (SD3's size rule) comes before DerivedRecipe's
    kept = {method: vars(c)[method] for method in SUPERSEDED_BY.values() for c in reversed(base.__mro__)
            if method in vars(c) and c not in (Recipe, DerivedRecipe) and not issubclass(c, DerivedRecipe)}
    return type(f"{pipeline}Recipe", bases, {"pipeline": pipeline, **kept, **given})()
