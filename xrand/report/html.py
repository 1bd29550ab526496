"""report.html: one self-contained page per result, to open from disk, attach to a pull request or
keep as a CI artifact.

Each page is rendered by Jinja2 from the result's JSON dict (``report.json``, ``matrix.json``,
``summary.json`` plus the sweep's rows) and the pictures' PNG bytes, which go inline as data URIs:
no network, no external CSS, scripts or fonts. The numbers on a page are the JSON's, only
formatted; what a page needs beyond that (a module's limit, the command) is derived from the
same dict. The templates are package data in ``xrand/report/templates``.

Keys each page reads (keep them stable):

- compare: ``verdict``, ``summary``, ``known_causes`` (optional), ``frameworks``,
  ``tolerance.value``, ``final`` (``rel_l2``, ``max_abs``, ``mean_abs``, ``psnr_db``;
  ``per_frame``: a list of such dicts, one per video frame, when present), ``initial_noise``,
  ``steps_ran`` (``count``, ``asked``, ``why``; optional), ``steps[]`` (``step``, ``timestep``,
  ``global``, ``local.sample``, ``local.model_output``), ``noise_floor`` (``rel_l2``, ``how``),
  ``settings`` (its ``ran.a`` / ``ran.b``), ``seconds``, ``environment.a`` / ``.b``, ``reproduce``
  (the command; an older report's ``command``, else derived), ``layers`` (``step``, ``timestep``,
  ``threshold``, ``culprit``, ``rule``, ``floor``, ``unmatched``, ``modules[]``: ``name``, ``type``,
  ``call``, ``rel_l2``, ``local_rel_l2``, ``max_abs``, ``floor_rel_l2``, ``limit`` when present).
- matrix: ``verdict``, ``summary``, ``settings``, ``tolerance.value``, ``command`` (optional),
  ``rows[]`` (``label``, ``scheduler``, ``options``, ``verdict``, ``noise_draws``, ``rel_l2``,
  ``max_abs``, ``max_local_rel_l2``, ``error``, ``note``, ``mindspore_mode``, ``mindspore_compile_cache``).
- sweep: ``verdict``, ``cells``, ``finished``, ``ran_now``, ``settings``, ``command`` (optional),
  ``schedulers.NAME`` (``cells``, ``finished``, ``passed``, ``failed``, ``errors``,
  ``pass_rate``, ``pass_rate_95``, ``rel_l2`` / ``psnr_db`` / ``ssim`` quantiles); each row of
  results.jsonl: ``seed``, ``scheduler``, ``options``, ``rel_l2``, ``max_abs``, ``psnr_db``,
  ``ssim``, ``passed``, ``seconds``, ``worker``, ``error``.
"""
from __future__ import annotations

import base64
import json
import math
import os
from typing import Any, Dict, Mapping, Optional, Sequence

import jinja2
import markupsafe

from ..files import atomic_path
from .command import compare_command, matrix_command, sweep_command
from .csv import limit_of

Pictures = Mapping[str, bytes]


# ----------------------------------------------------------------------------- formatting

def fmt(value: Any, spec: str = ".3g") -> str:
    """A number as the console prints it (``.3g``); None as a dash; non-finite as the JSON has it."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        return format(value, spec)
    return str(value)


def sort_key(value: Any) -> str:
    """What a table cell sorts by (``data-sort``): the full number, or empty for none."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str) and value in ("inf", "-inf", "nan"):
        return {"inf": "1e999", "-inf": "-1e999", "nan": ""}[value]
    return ""


def breakable(name: str) -> markupsafe.Markup:
    """A dotted module name that may wrap after each dot (``down_blocks.0.<wbr>resnets...``), so
    that a table of them fits a narrow window."""
    return markupsafe.escape(name).replace(".", markupsafe.Markup(".<wbr>"))


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def to_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


_ENV = jinja2.Environment(loader=jinja2.PackageLoader("xrand.report", "templates"), autoescape=True,
                          undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
_ENV.filters.update(fmt=fmt, sort_key=sort_key, data_uri=data_uri, to_json=to_json, breakable=breakable)


def _after_word(summary: str) -> str:
    """A summary line without its leading "PASS: " / "FAIL: " (the page shows the word apart)."""
    word, sep, rest = summary.partition(": ")
    return rest if sep and word in ("PASS", "FAIL") else summary


def _pictures(pictures: Pictures) -> Dict[str, str]:
    """Picture names (``comparison.png``) to data URIs; a missing picture is simply absent."""
    return {name: data_uri(png) for name, png in pictures.items() if png}


# ----------------------------------------------------------------------------- the pages

def layer_rows(layers: Mapping[str, Any]) -> Dict[str, Any]:
    """The layers table: each module call with its limit, how far over it is (local / limit) and
    whether it is flagged; the first and the worst flagged call (worst: largest local / limit)."""
    rows = []
    for i, m in enumerate(layers.get("modules") or []):
        limit = limit_of(m, layers)
        local = m.get("local_rel_l2")
        ratio = local / limit if isinstance(local, (int, float)) and limit > 0 else None
        label = (m["name"] or "(denoiser)") + (f"#{m['call']}" if m.get("call") else "")
        rows.append(dict(m, index=i, label=label, limit=limit, ratio=ratio,
                         over=bool(isinstance(local, (int, float)) and local > limit),
                         culprit=(m["name"] + (f"#{m['call']}" if m.get("call") else "")) == layers.get("culprit")))
    flagged = [r for r in rows if r["over"]]
    return {"rows": rows, "flagged": flagged, "first": flagged[0] if flagged else None,
            "worst": max(flagged, key=lambda r: r["ratio"]) if flagged else None}


def op_rows(ops: Mapping[str, Any]) -> Dict[str, Any]:
    """The ops table (``report.json``'s ``ops``): the console's summary line, and each row's two
    operators with their dtypes and settings."""
    from ..compare.ops import OpsReport, describe, dtypes

    report = OpsReport.from_dict(ops)
    rows = [dict(r.to_dict(), index=i + 1, over=r.over, torch_name=describe(r.torch), ms_name=describe(r.mindspore),
                 torch_dtypes=dtypes(r.torch), ms_dtypes=dtypes(r.mindspore),
                 shape="x".join(str(n) for n in ((r.torch or r.mindspore or {}).get("shape") or [])))
            for i, r in enumerate(report.rows)]
    return {"summary": report.summary(), "rows": rows, "first_over": report.first_over}


def frame_chart(frames: Sequence[Mapping[str, Any]], tolerance: float, floor: Optional[float],
                width: int = 640, height: int = 240) -> Dict[str, Any]:
    """Coordinates of an inline SVG chart of relative L2 per frame (log scale) with the tolerance
    and the floor as lines; exact zeros on the chart's bottom edge, labelled as such."""
    values = [f.get("rel_l2") for f in frames]
    positive = [v for v in values + [tolerance, floor] if isinstance(v, (int, float)) and v > 0 and math.isfinite(v)]
    low = 10 ** math.floor(math.log10(min(positive))) if positive else 1e-8
    high = 10 ** math.ceil(math.log10(max(positive))) if positive else 1.0
    high = high * 10 if high <= low else high
    left, right, top, bottom = 70, width - 10, 10, height - 30

    def y(v: float) -> float:
        if v <= 0:
            return float(bottom)
        return bottom - (math.log10(v) - math.log10(low)) / (math.log10(high) - math.log10(low)) * (bottom - top)

    def x(i: int) -> float:
        return left + (right - left) * (i / max(len(frames) - 1, 1))

    points = [(x(i), y(v), i, v) for i, v in enumerate(values) if isinstance(v, (int, float))]
    decades = [10.0 ** k for k in range(int(round(math.log10(low))), int(round(math.log10(high))) + 1)]
    return {"width": width, "height": height, "left": left, "right": right, "top": top, "bottom": bottom,
            "points": points, "polyline": " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in points),
            "tolerance": y(tolerance) if tolerance and tolerance > 0 else None,
            "floor": y(floor) if floor else None,
            "ticks": [(y(d), fmt(d, ".0e")) for d in decades], "exact": any(v == 0 for v in values if v is not None)}


def render_compare(report: Mapping[str, Any], pictures: Pictures) -> str:
    """The page of one comparison (``report.json``'s dict); ``pictures``: PNG bytes by file name
    (``comparison.png``, ``divergence.png``, ``frames.png``, ``layers.png``). A video's error per
    frame is frames.png, or a chart drawn from the JSON when the page has no such picture."""
    layers = report.get("layers")
    frames = report["final"].get("per_frame")
    floor = (report.get("noise_floor") or {}).get("rel_l2")
    return _ENV.get_template("compare.html.j2").render(
        r=report, pictures=_pictures(pictures), command=compare_command(report),
        settings={k: v for k, v in report["settings"].items() if k != "ran"}, summary=_after_word(report["summary"]),
        layers=layer_rows(layers) if layers else None,
        ops=op_rows(report["ops"]) if report.get("ops") else None,
        frames=frame_chart(frames, report["tolerance"]["value"], floor) if frames else None,
        floor_ratio=(report["final"]["rel_l2"] / floor) if floor else None)


def render_matrix(matrix: Mapping[str, Any], pictures: Pictures, absolute: bool = False) -> str:
    """The page of ``xrand compare --scheduler all`` (``matrix.json``'s dict); ``pictures``:
    ``matrix.png``; ``absolute``: the command's paths (:mod:`.command`)."""
    ran = [r for r in matrix["rows"] if isinstance(r.get("rel_l2"), (int, float))]
    worst = max(ran, key=lambda r: r["rel_l2"]) if ran else None
    return _ENV.get_template("matrix.html.j2").render(
        m=matrix, pictures=_pictures(pictures), command=matrix_command(matrix, absolute), worst=worst,
        summary=_after_word(matrix["summary"]),
        lockstep=any(r.get("max_local_rel_l2") is not None for r in matrix["rows"]))


def render_sweep(summary: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], pictures: Pictures,
                 absolute: bool = False) -> str:
    """The page of a sweep (``summary.json``'s dict and results.jsonl's rows); ``pictures``:
    ``sweep.png``; ``absolute``: the command's paths (:mod:`.command`)."""
    from ..pipelines.schedulers import row_label

    rows = sorted(rows, key=lambda r: (row_label(r), r["seed"]))
    ran = [r for r in rows if isinstance(r.get("rel_l2"), (int, float))]
    worst = max(ran, key=lambda r: r["rel_l2"]) if ran else None
    return _ENV.get_template("sweep.html.j2").render(
        s=summary, rows=[dict(r, label=row_label(r)) for r in rows], pictures=_pictures(pictures),
        command=sweep_command(summary, rows, absolute), worst=worst)


def write_html(path: str, html: str) -> None:
    """Write a page whole or not at all (a temporary name renamed into place)."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(html)


# ----------------------------------------------------------------------------- beside the JSON

def _read(out_dir: str, name: str) -> bytes:
    path = os.path.join(out_dir, name)
    if not os.path.isfile(path):
        return b""
    with open(path, "rb") as f:
        return f.read()


def _json(out_dir: str, name: str) -> Any:
    with open(os.path.join(out_dir, name)) as f:
        return json.load(f)


def write_compare_page(out_dir: str) -> Dict[str, str]:
    """report.html (and layers.csv when the report has layers) from ``out_dir``'s report.json and
    pictures, as written; their paths by name."""
    from .csv import write_layers_csv

    report = _json(out_dir, "report.json")
    paths = {"report.html": os.path.join(out_dir, "report.html")}
    if report.get("layers"):
        paths["layers.csv"] = os.path.join(out_dir, "layers.csv")
        write_layers_csv(paths["layers.csv"], report["layers"])
    pictures = {n: _read(out_dir, n) for n in ("comparison.png", "divergence.png", "frames.png", "layers.png")}
    write_html(paths["report.html"], render_compare(report, pictures))
    return paths


def write_matrix_page(out_dir: str) -> Dict[str, str]:
    """report.html from ``out_dir``'s matrix.json and matrix.png; its path by name. Written where
    the matrix ran: the command's paths are absolute."""
    path = os.path.join(out_dir, "report.html")
    write_html(path, render_matrix(_json(out_dir, "matrix.json"), {"matrix.png": _read(out_dir, "matrix.png")},
                                   absolute=True))
    return {"report.html": path}


def write_sweep_page(out_dir: str, rows: Optional[Sequence[Mapping[str, Any]]] = None) -> Dict[str, str]:
    """report.html from a sweep folder's summary.json, sweep.png and ``rows`` (by default its
    results.jsonl); its path by name. Written where the sweep runs: the command's paths are absolute."""
    if rows is None:
        rows = []
        path = os.path.join(out_dir, "results.jsonl")
        for line in open(path).read().splitlines() if os.path.isfile(path) else []:
            try:
                rows.append(json.loads(line))
            except ValueError:  # an empty line, or the half-written tail of an interrupted run
                continue
    path = os.path.join(out_dir, "report.html")
    write_html(path, render_sweep(_json(out_dir, "summary.json"), rows, {"sweep.png": _read(out_dir, "sweep.png")},
                                  absolute=True))
    return {"report.html": path}

