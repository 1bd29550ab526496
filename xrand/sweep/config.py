"""The input of a sweep: ``--seeds`` and ``--scheduler`` parsing, scheduler labels, and :class:`SweepConfig`."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..cache import installed_version
from ..checks import UsageError, UsageTypeError, check_choice, check_seed
from ..pipelines.schedulers import (entry_label, row_label, scheduler_label, split_entry,  # noqa: F401 (labels)
                                    split_label)

SWEEP_VERSION = 1
ENGINES = ("local", "ray")
MAX_CELLS = 1_000_000

Cell = Tuple[int, str]  # (seed, entry label: the scheduler's class name, its options as JSON if any, the dtype
#                         in a sweep over dtypes: 'DDIMScheduler @ bfloat16')


def parse_seeds(text: Any) -> List[int]:
    """``"0-99"`` (inclusive), ``"1,5,9"`` or both (``"0-3,10"``); order kept, repeats dropped."""
    if not isinstance(text, str):
        raise UsageTypeError(f"--seeds must be a string such as '0-99' or '1,5,9', got {text!r}")
    seeds: Dict[int, None] = {}
    if not text.strip():
        raise UsageError(f"--seeds {text!r} is empty; expected A-B (inclusive) or a comma list, e.g. 0-99 or 1,5,9")
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        try:
            low = check_seed(int(first), "seed")
            high = check_seed(int(last), "seed") if dash else low
        except (ValueError, TypeError):
            raise UsageError(f"--seeds {text!r}: {part.strip()!r} is not a seed or a range A-B of seeds "
                             "(integers in [0, 2**64)); expected e.g. 0-99 or 1,5,9") from None
        if high < low:
            raise UsageError(f"--seeds {text!r}: the range {part.strip()!r} ends before it starts; "
                             f"expected A-B with A <= B, e.g. {high}-{low}")
        if len(seeds) + high - low + 1 > MAX_CELLS:
            raise UsageError(f"--seeds {text!r} names more than {MAX_CELLS:,} seeds")
        seeds.update(dict.fromkeys(range(low, high + 1)))
    return list(seeds)


def parse_schedulers(text: Optional[str], plan: Any, user: Optional[Dict[str, Any]] = None) -> List[str]:
    """``--scheduler`` of a sweep -> scheduler labels, with ``user`` (``--scheduler-option``) in each.

    ``None``: the model folder's own scheduler. ``"all"``: every entry of the scheduler matrix of
    the plan's pipeline with its options (as ``xrand compare --scheduler all``). Otherwise a comma
    list of the names and aliases ``xrand compare --scheduler`` takes; an alias's options come
    first, ``--scheduler-option`` values over them. Every named entry is planned as compare plans
    it (:meth:`xrand.compare.plan.Plan.cell`), so one that does not fit is refused before any
    work; an entry of ``all`` that refuses the settings (PNDM's Runge-Kutta steps under 4 steps)
    gives error rows, as in ``xrand compare --scheduler all``.
    """
    from ..pipelines import schedulers

    user = dict(user or {})
    if text is not None and not isinstance(text, str):
        raise UsageTypeError(f"--scheduler must be a string such as 'ddim,euler-a' or 'all', got {text!r}")
    if text is not None and text.strip().lower() == "all":
        if user:
            raise UsageError("--scheduler-option cannot be combined with --scheduler all (each entry has its own "
                             "options)")
        entries = [(name, dict(options)) for name, options in schedulers.MATRICES[plan.recipe.scheduler_kind]]
    elif text is None:
        entries = [(plan.scheduler.cls, {})]
    else:
        names = [name.strip() for name in text.split(",")]
        if not all(names):
            raise UsageError(f"--scheduler {text!r}: an empty name; expected NAME[,NAME...] or all, "
                             "e.g. ddim,euler-a")
        entries = [schedulers.resolve(name) for name in names]
    every = text is not None and text.strip().lower() == "all"
    labels: Dict[str, None] = {}
    for name, options in entries:
        options = {**options, **user}
        if not every:
            plan.cell(scheduler=name, scheduler_options=options)  # refused here if it cannot run
        labels[scheduler_label(name, options)] = None
    return list(labels)


def parse_dtypes(text: Any) -> List[str]:
    """``--dtype`` of a sweep: one dtype, or a comma list (``"float32,bfloat16"``: dtype becomes a
    cell dimension); order kept, repeats dropped."""
    from ..pipelines.settings import DTYPES

    if not isinstance(text, str):
        raise UsageTypeError(f"--dtype must be a string such as 'float32' or 'float32,bfloat16', got {text!r}")
    names = [name.strip() for name in text.split(",")]
    for name in names:
        if name not in DTYPES:
            raise UsageError(f"--dtype {text!r}: unknown dtype {name!r}; accepted: {', '.join(DTYPES)}, "
                             "one or a comma list (e.g. float32,bfloat16)")
    return list(dict.fromkeys(names))


def check_workers(workers: Any) -> int:
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise UsageTypeError(f"--workers must be a positive integer, got {workers!r}")
    if workers < 1:
        raise UsageError(f"--workers must be a positive integer, got {workers}")
    return workers


def check_engine(engine: Any) -> str:
    return check_choice(engine, ENGINES, "engine")


@dataclass
class SweepConfig:
    """What every cell of one sweep shares; two sweeps with different configs never mix.

    ``plan``: the comparison every cell runs (:func:`xrand.compare.plan.make_plan`), with its seed
    and scheduler replaced by the cell's. ``scheduler_options``: ``--scheduler-option``, in every
    entry's label. ``load_scheduler``: the scheduler label both sides are loaded with (the sweep's
    first entry, as :func:`xrand.compare.matrix.run_matrix` loads with its first row).
    ``dtypes``: a sweep over dtypes (``--dtype float32,bfloat16``), each entry once per dtype;
    empty: the plan's dtype only, not a dimension.
    """

    plan: Any  # Plan
    scheduler_options: Dict[str, Any] = field(default_factory=dict)
    threads_per_worker: int = 1
    load_scheduler: Optional[str] = None
    dtypes: Tuple[str, ...] = ()

    def entries(self, schedulers: List[str]) -> List[str]:
        """The entry labels of these scheduler labels: each once per dtype in a sweep over dtypes."""
        return [entry_label(s, d) for s in schedulers for d in self.dtypes] if self.dtypes else list(schedulers)

    @property
    def settings(self) -> Any:
        return self.plan.settings

    def cell_plan(self, seed: int, scheduler: Optional[str]) -> Any:
        """The Plan of one cell: the sweep's, with the cell's seed, scheduler and dtype (its entry label)."""
        if scheduler is None:
            return self.plan.cell(seed=seed)
        label, dtype = split_entry(scheduler)
        name, options = split_label(label)
        return self.plan.cell(seed=seed, scheduler=name, scheduler_options=options, dtype=dtype)

    def describe(self) -> Dict[str, Any]:
        """The settings as plain values, flat: the compare settings (less the cell's seed and
        scheduler; ``scheduler_options`` are the ones given to every entry) and the sweep's own."""
        plan = self.plan
        out = {k: v for k, v in asdict(plan.settings).items() if k not in ("seed", "scheduler")}
        out.update(pipeline=plan.pipeline, scheduler_options=dict(self.scheduler_options))
        out.update(tolerance=plan.tolerance, mindspore_mode=plan.mindspore_mode,
                   torch_device=plan.devices.get("torch"), mindspore_device=plan.devices.get("mindspore"),
                   threads_per_worker=self.threads_per_worker)
        if self.dtypes:  # a dimension: each cell's dtype is in its row, each dtype's tolerance here
            from ..compare.plan import DEFAULT_TOLERANCE

            out.update(dtype=",".join(self.dtypes), tolerance={
                d: plan.tolerance if plan.tolerance_given else DEFAULT_TOLERANCE[d] for d in self.dtypes})
        return out

    def identity(self) -> Dict[str, Any]:
        """The settings that decide a cell's numbers, as written to sweep.json."""
        out = self.describe()
        out["model"] = self.plan.folder.fingerprint()
        out["versions"] = _versions()
        return out


def _versions() -> Dict[str, str]:
    from .._version import __version__

    return {"xrand": __version__, **{dist: installed_version(dist) or "not installed"
                                     for dist in ("torch", "diffusers", "mindspore", "mindone")}}
