"""Both sides in one process: load them once, then compare any number of plans.

Free running compares the two pipelines' own trajectories (global error, which the sampler may
amplify). Lockstep runs the MindSpore side once more, fed at every denoiser call and scheduler
step what the torch side recorded there (:mod:`.boundary`), so its per-step (local) error
isolates operator differences. ``--layers`` and the noise floor follow, each reading the plan.
Every comparison runs the stages of :mod:`.stages` in their one order; here both pipelines are
held and what the stages leave stays in memory.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Union

from ..pipelines.settings import Settings
from .plan import Plan, make_plan
from .result import Comparison
from .sides import Loaded, load
from .stages import Asks, Held, Store, run_stages


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
    return run_stages(Store(plan, Asks.of(plan)), Held(pair.torch, pair.mindspore)).comparison


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
