"""Pipelines as recipes (:class:`.base.Recipe`), one per pipeline class, found by class name.

A new pipeline is one :class:`Recipe` registered with :func:`register_recipe` (the families
shipped here are registered below); nothing else in xrand names a pipeline's components. Most of
a recipe can be read from the pipeline class (:func:`.derived.derived_recipe`): a new one then
says only what differs.
"""
from __future__ import annotations

from typing import Dict, Tuple

from ...checks import UsageError, UsageTypeError
from .base import Recipe, flag
from .derived import DerivedRecipe, derived_recipe
from .families import derived_recipes
from .flux import FluxControlNetRecipe, FluxImg2ImgRecipe, FluxKontextRecipe, FluxRecipe
from .ltx import LTXRecipe
from .pixart import PixArtSigmaRecipe
from .stable_diffusion import (StableDiffusionControlNetRecipe, StableDiffusionImg2ImgRecipe,
                               StableDiffusionInpaintRecipe, StableDiffusionRecipe)
from .stable_diffusion_3 import StableDiffusion3Recipe
from .stable_diffusion_xl import (StableDiffusionXLControlNetRecipe, StableDiffusionXLImg2ImgRecipe,
                                  StableDiffusionXLInpaintRecipe, StableDiffusionXLRecipe)
from .unconditional import DDIMRecipe, DDPMRecipe
from .wan import WanRecipe

#: pipeline class name -> its recipe.
RECIPES: Dict[str, Recipe] = {}


def register_recipe(recipe: Recipe) -> Recipe:
    """Make ``recipe`` the one for its ``pipeline`` class name (replacing any before); returns it."""
    if not isinstance(recipe, Recipe) or not isinstance(recipe.pipeline, str) or not recipe.pipeline:
        raise UsageTypeError(f"register_recipe takes a Recipe instance with a pipeline class name, got {recipe!r}")
    RECIPES[recipe.pipeline] = recipe
    return recipe


for _recipe in (DDIMRecipe(), DDPMRecipe(), StableDiffusionRecipe(), StableDiffusionImg2ImgRecipe(),
                StableDiffusionInpaintRecipe(), StableDiffusionXLRecipe(), StableDiffusionXLImg2ImgRecipe(),
                StableDiffusionXLInpaintRecipe(), StableDiffusion3Recipe(), FluxRecipe(), FluxImg2ImgRecipe(),
                FluxKontextRecipe(), PixArtSigmaRecipe(), WanRecipe(), LTXRecipe(), StableDiffusionControlNetRecipe(),
                StableDiffusionXLControlNetRecipe(), FluxControlNetRecipe()) + derived_recipes():
    register_recipe(_recipe)


def pipelines() -> Tuple[str, ...]:
    return tuple(RECIPES)


def canonical_pipeline(name: object) -> str:
    """A pipeline class name in any case -> the registered name; UsageError naming the accepted ones."""
    match = {p.lower(): p for p in RECIPES}.get(str(name).lower()) if isinstance(name, str) else None
    if match is None:
        raise UsageError(f"unknown pipeline {name!r}; accepted: {', '.join(RECIPES)}")
    return match


def recipe(pipeline: str) -> Recipe:
    return RECIPES[canonical_pipeline(pipeline)]


__all__ = ["RECIPES", "DerivedRecipe", "Recipe", "canonical_pipeline", "derived_recipe", "flag", "pipelines", "recipe",
           "register_recipe"]
