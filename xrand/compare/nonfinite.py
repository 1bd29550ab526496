"""NaN and Inf: where a side's values first stop being finite, said before any other number.

Each side watches its prompt embeddings, every denoiser output, the latents after every step and
the decoded output (:class:`.boundary.Boundary`, :func:`.sides.run`), and keeps the first place
it saw one: ``{"component", "step", "call" (a denoiser output's call), "kind" ("NaN" or "Inf"),
"count"}``. With ``--layers``, MindSpore's pass over the denoiser at the layers step names the
first module whose output is not finite and says whether its inputs still were (``module``,
``type``, ``inputs_finite``, from :mod:`.layers`).
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional

import numpy as np

NAMES = {"torch": "torch", "mindspore": "MindSpore"}


def nonfinite_count(values: Iterable[np.ndarray]) -> Dict[str, int]:
    """``{"NaN": n, "Inf": m}`` over the arrays (empty where every value is finite)."""
    nan = inf = 0
    for v in values:
        v = np.asarray(v)
        if v.dtype.kind == "f" and not np.isfinite(v).all():
            isnan = int(np.isnan(v).sum())
            nan, inf = nan + isnan, inf + int((~np.isfinite(v)).sum()) - isnan
    return {k: n for k, n in (("NaN", nan), ("Inf", inf)) if n}


def first_seen(component: str, values: Iterable[np.ndarray], **where: Any) -> Optional[Dict[str, Any]]:
    """The record of ``component`` at ``where`` if its values are not all finite, else None."""
    counts = nonfinite_count(values)
    if not counts:
        return None
    return {"component": component, **where, "kind": "NaN" if "NaN" in counts else "Inf",
            "count": sum(counts.values())}


def nonfinite_text(nonfinite: Mapping[str, Optional[Mapping[str, Any]]]) -> str:
    """'MindSpore's output is Inf from step 3: its denoiser output at call 2 (6 values), made by
    down_blocks.0.resnets.0 (ResnetBlock2D) from finite inputs' for each side that saw one; ''."""
    said = []
    for framework, seen in nonfinite.items():
        if not seen:
            continue
        name = NAMES.get(framework, framework)
        step = f"from step {seen['step'] + 1}" if seen.get("step") is not None else "after the last step"
        where = f"its {seen['component']}" + (f" at call {seen['call']}" if seen.get("call") is not None else "")
        line = f"{name}'s output is {seen['kind']} {step}: {where} ({seen['count']} values)"
        if seen.get("module") is not None:
            inputs = "from finite inputs" if seen["inputs_finite"] else "from inputs already not finite"
            line += f", made by {seen['module'] or '(denoiser)'} ({seen['type']}) {inputs}"
        elif seen["component"] == "denoiser output" and seen.get("call") is not None:
            line += f"; --layers --layers-step {seen['call']} names the module"
        said.append(line)
    return "; ".join(said)


__all__ = ["first_seen", "nonfinite_count", "nonfinite_text"]
