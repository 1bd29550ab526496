"""What ``xrand compare --scheduler all`` writes: matrix.json, matrix.md, matrix.png."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional

from ..compare.matrix import Matrix
from ..files import atomic_path, json_safe, write_json, write_text
from .html import write_matrix_page
from .pictures import plot_matrix

MATRIX_VERSION = 1


def matrix_dict(m: Matrix) -> Dict[str, Any]:
    from dataclasses import asdict

    return json_safe({
        "xrand_matrix": MATRIX_VERSION,
        "verdict": "pass" if m.passed else "fail",
        "summary": m.summary(),
        "settings": asdict(m.settings),
        "tolerance": {"metric": "rel_l2 of the final images", "value": m.tolerance},
        "rows": [dict(asdict(r), label=r.label) for r in m.rows],
        "left_out": m.left_out,
    })


def _number(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.2g}"


def matrix_markdown(m: Matrix) -> str:
    lines = [f"{m.summary()}", "",
             "| scheduler | options | noise draws during steps | final rel L2 | max \\|diff\\| | verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in m.rows:
        options = ", ".join(f"{k}={json.dumps(v)}" for k, v in sorted(r.options.items())) or "-"
        verdict = r.verdict.upper() + (f" ({r.error or r.note})" if r.error or r.note else "")
        draws = "-" if r.noise_draws is None else str(r.noise_draws)
        lines.append(f"| {r.scheduler} | {options} | {draws} | {_number(r.rel_l2)} | {_number(r.max_abs)} | "
                     f"{verdict} |")
    if m.left_out:
        lines += ["", "Left out, because the pipeline cannot run them:", ""]
        lines += [f"- {label}: {why}" for label, why in m.left_out.items()]
    return "\n".join(lines) + "\n"


def write_matrix(m: Matrix, out_dir: str) -> Dict[str, str]:
    os.makedirs(out_dir, exist_ok=True)
    paths = {name: os.path.join(out_dir, name) for name in ("matrix.json", "matrix.md", "matrix.png")}
    write_json(paths["matrix.json"], matrix_dict(m))
    write_text(paths["matrix.md"], matrix_markdown(m))
    with atomic_path(paths["matrix.png"]) as tmp:
        plot_matrix(m, tmp)
    paths.update(write_matrix_page(out_dir))  # report.html from the files above
    return paths
