"""Both sides in one process: load them once, then compare any number of plans.

Free running compares the two pipelines' own trajectories (global error, which the sampler may
amplify). Lockstep runs the MindSpore side once more, fed at every denoiser call and scheduler
step what the torch side recorded there (:mod:`.boundary`), so its per-step (local) error
isolates operator differences. ``--layers`` and the noise floor follow, each reading the plan.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, List, Union

from ..patch import patched
from ..pipelines.settings import Settings
from .floor import pipeline_floor
from .layers import check_module_names, layers_at_step
from .plan import Plan, make_plan
from .result import Comparison, compare_sides
from .sides import Everything, Loaded, fingerprinted, load, run


@dataclass
class Pair:
    """Both frameworks' pipelines loaded once; :func:`compare_loaded` runs any number of plans."""

    torch: Loaded
    mindspore: Loaded

    def sides(self) -> List[Loaded]:
        return [self.torch, self.mindspore]


def _planned(plan: Union[Plan, Settings], options: dict) -> Plan:
    """A plan as given, or one made from settings and ``make_plan``'s keyword options."""
    if isinstance(plan, Plan):
        if options:
            raise TypeError(f"options {sorted(options)} go to make_plan; this call got a Plan already")
        return plan
    return make_plan(plan, **options)


def load_pair(plan: Union[Plan, Settings], quiet: bool = True, **options: Any) -> Pair:
    """Load the plan's model and pipeline on torch and on MindSpore (the same weights)."""
    plan = _planned(plan, options)
    return Pair(torch=load(plan, "torch", quiet), mindspore=load(plan, "mindspore", quiet))


def compare_loaded(pair: Pair, plan: Union[Plan, Settings], **options: Any) -> Comparison:
    """One comparison (a matrix row, a sweep cell) on pipelines already loaded by :func:`load_pair`:
    free running, then what the plan asks for: lockstep, layers, the noise floor."""
    plan = _planned(plan, options)
    if plan.layers is not None and plan.layers.dump:  # before any run
        check_module_names(plan.recipe.denoiser_of(pair.torch.pipe), plan.layers.dump)
    record_calls = Everything() if plan.lockstep else {plan.layers.step} if plan.layers is not None else None
    with patched():  # once for every run: (un)patching scans every loaded module
        a = fingerprinted(run(pair.torch, plan, record_calls=record_calls, record_steps=plan.lockstep))
        b = fingerprinted(run(pair.mindspore, plan))
        local = None
        if plan.lockstep:
            start = time.perf_counter()
            local = run(pair.mindspore, plan, feed=a.recording).local_steps
            b.environment["lockstep_seconds"] = time.perf_counter() - start
        comparison = compare_sides(a, b, plan.tolerance, local)
        if plan.layers is not None:  # which module parts them
            comparison.layers = layers_at_step(pair.torch, pair.mindspore, plan, a.recording, a.timesteps)
        if plan.noise_floor:  # torch against itself
            comparison.noise_floor = pipeline_floor(pair.torch, plan, a.images)
    return comparison


def compare_frameworks(plan: Union[Plan, Settings], quiet: bool = True, **options: Any) -> Comparison:
    """Run diffusers on torch and mindone on MindSpore from one seed and compare them.

    ``plan``: a :class:`.plan.Plan`, or Settings with :func:`.plan.make_plan`'s options
    (``lockstep=True``, ``layers=LayerOptions()``, ``noise_floor=True``, ``tolerance``,
    ``mindspore_mode``: ``"graph"``, the default, compiled once per model and machine and then
    loaded from the graph cache, or ``"pynative"``, ``devices``).
    """
    plan = _planned(plan, options)
    return compare_loaded(load_pair(plan, quiet), plan)


__all__ = ["Pair", "compare_frameworks", "compare_loaded", "load_pair"]
