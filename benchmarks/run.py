"""Run every benchmark and write benchmarks/RESULTS.md.

    .venv/bin/python benchmarks/run.py [--only 1,3] [--out benchmarks/RESULTS.md]

Figures (one file each, also runnable alone):
  1 bench_randn_tensor.py  xrand.randn_tensor against diffusers' and mindone's randn_tensor
  2 bench_streams.py       stream engines against torch.randn and NumPy, per value
  3 bench_memory.py        peak memory of a 64M-value draw, per engine, fresh processes
  4 bench_import.py        `import xrand` time beyond NumPy, and what it imports
  5 bench_ddim.py          DDIM seconds per step, torch vs MindSpore, compare_frameworks overhead
  6 bench_sd.py            tiny Stable Diffusion seconds per step, torch vs MindSpore, compare overhead
  7 bench_layers.py        compare --layers against one lockstep step of the same model
  8 bench_sweep.py         xrand sweep cells per minute, 1 and 2 local workers, Ray's overhead
  9 bench_families.py      seconds per step of each pipeline family (SD img2img/inpaint, SDXL, SD3, Flux,
                           Flux Kontext, PixArt-Sigma, Wan, LTX), torch vs MindSpore
 10 bench_scale.py         an SD-1.5-sized model through xrand compare: time and peak memory per stage
                           (only with --only 10: about 20 minutes, a 4.1 GB folder)
 11 bench_precision.py     seconds per step in float32, float16 and bfloat16 (digits, tiny SD), torch vs MindSpore
 12 bench_sweep.py         xrand sweep on the SD-1.5-sized model: 1 and 2 local workers, memory
                           (only with --only 12: about 10 minutes, the 4.1 GB folder of figure 10)
 13 bench_threads.py       the default xrand compare beside a busy process: threads as before and by the load
 14 bench_lockstep.py      a lockstep step against a free-running step on MindSpore's side, per family
 15 bench_floor.py         the float64 floor on the SD-1.5-sized model: widened per call against cast whole
                           (only with --only 15: about 5 minutes, the 4.1 GB folder of figure 10)
 16 bench_cost.py          the whole default xrand compare against torch's own pipeline alone (digits and the
                           SD-1.5-sized model; only with --only 16: about 12 minutes, the folder of figure 10)
 17 bench_suite.py         the test suite's wall time on this machine and the files it goes to
                           (only with --only 17: the suite's own time, about 6 minutes)

About 5 minutes on 2 cores. Timings interleave the compared calls; each figure records how
much CPU other processes took meanwhile, so a shared machine shows in the results. With
``--only``, the figures that were not re-run keep their sections (and summary rows) from the
existing RESULTS.md, and the header says which run each came from.
"""
from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_common import CpuShare, Section, load_average, machine_facts  # noqa: E402

FIGURES = {
    1: ("bench_randn_tensor", {}),
    2: ("bench_streams", {}),
    3: ("bench_memory", {}),
    4: ("bench_import", {}),
    5: ("bench_ddim", {}),
    6: ("bench_sd", {}),
    7: ("bench_layers", {}),
    8: ("bench_sweep", {}),
    9: ("bench_families", {}),
    10: ("bench_scale", {}),
    11: ("bench_precision", {}),
    12: ("bench_sweep:run_sd15_sized", {}),
    13: ("bench_threads", {}),
    14: ("bench_lockstep", {}),
    15: ("bench_floor", {}),
    16: ("bench_cost", {}),
    17: ("bench_suite", {}),
}
#: Figures run only when --only names them (10, 12, 15, 16: 20, 10, 5 and 12 minutes, a 4.1 GB model folder;
#: 17: the test suite, 6 minutes).
ON_REQUEST = {10, 12, 15, 16, 17}


def run_figure(number: int) -> Section:
    where, kwargs = FIGURES[number]
    module_name, _, function = where.partition(":")
    print(f"figure {number}: {where} ...", flush=True)
    share = CpuShare().start()
    start = time.perf_counter()
    try:
        section = getattr(__import__(module_name), function or "run")(**kwargs)
    except Exception:
        section = Section(title=f"{number}. {module_name} failed", method="```\n" + traceback.format_exc() + "```",
                          columns=[])
    section.seconds = time.perf_counter() - start
    section.others_cpu = share.stop()
    print(f"  done in {section.seconds:.0f} s", flush=True)
    return section


def summary(sections) -> str:
    lines = ["## Summary", "", "| figure | targets met | missed |", "| --- | --- | --- |"]
    for section in sections:
        judged = [row for row in section.rows if row.met is not None]
        missed = section.missed()
        what = "; ".join(" ".join(c for c in row.cells[:2] if c) for row in missed) or "-"
        lines.append(f"| {section.title} | {len(judged) - len(missed)} of {len(judged)} | {what} |")
    return "\n".join(lines) + "\n"


def earlier_figures(path: Path, rerun) -> tuple:
    """(header lines, {number: section text}, {number: summary row}) of figures an earlier run wrote."""
    if not path.exists():
        return [], {}, {}
    text = path.read_text()
    head = text.split("## Machine")[0].splitlines()
    headers = [line for line in head if line.startswith(("Written by", "- Figures ", "  "))]
    parts = re.split(r"(?m)^(?=## \d+\. )", text)
    sections = {int(m.group(1)): part.rstrip() + "\n" for part in parts[1:]
                if (m := re.match(r"## (\d+)\. ", part)) and int(m.group(1)) not in rerun}
    rows = {int(m.group(1)): line for line in text.splitlines()
            if (m := re.match(r"\| (\d+)\. ", line)) and int(m.group(1)) in sections}
    return headers, sections, rows


def _still_kept(header: str, kept) -> bool:
    """Whether an earlier run's header line speaks of a figure still kept ("Figures 5, 6: ..." or a whole run)."""
    header = header.removeprefix("- ").strip()
    if "from earlier runs" in header:
        return False
    m = re.match(r"Figures ([\d, ]+):", header)
    return m is None or any(int(n) in kept for n in m.group(1).split(","))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated figure numbers (default: all but figure 10)")
    parser.add_argument("--out", default=str(HERE / "RESULTS.md"))
    args = parser.parse_args()
    numbers = sorted(int(n) for n in args.only.split(",")) if args.only else sorted(set(FIGURES) - ON_REQUEST)

    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = load_average()
    share = CpuShare().start()
    start = time.perf_counter()
    facts = machine_facts()
    sections = [run_figure(n) for n in numbers]
    total = time.perf_counter() - start
    others = share.stop()

    shared = others is not None and others > 0.05
    lines = [
        "# xrand benchmarks", "",
        f"Written by `.venv/bin/python benchmarks/run.py{' --only ' + args.only if args.only else ''}` "
        f"on {started:%Y-%m-%d %H:%M} UTC, on {facts['CPU']}, in {total / 60:.1f} min. How each figure is measured "
        "is said under it; "
        "times are min / median / max over repeats, the compared calls interleaved within each repeat, and "
        "every verdict uses the median.", "",
        "## Machine", "",
        "| | |", "| --- | --- |",
    ]
    lines += [f"| {key} | {value} |" for key, value in facts.items()]
    lines += [
        f"| load average before (1 / 5 / 15 min) | {load_before} |",
        f"| load average after | {load_average()} |",
        "| CPU taken by other processes during the run | "
        + ("unknown" if others is None else f"{others:.0%} of all cores' time") + " |", "",
    ]
    if shared:
        lines += [f"**The machine was shared**: other processes used {others:.0%} of the CPU while these figures "
                  "were taken (per figure below), so absolute times are inflated and noisier; interleaving keeps "
                  "the ratios fair but not noise-free.", ""]
    kept_headers, kept, kept_rows = earlier_figures(Path(args.out), numbers) if args.only else ([], {}, {})
    if kept:  # the header says which run each figure comes from
        lines[2:3] = [f"- Figures {', '.join(map(str, numbers))}: " + lines[2][0].lower() + lines[2][1:],
                      f"- Figure(s) {', '.join(map(str, sorted(kept)))} kept from earlier runs, which said:"] + \
                     [f"  {h.removeprefix('- ').strip()}" for h in kept_headers if _still_kept(h, kept)]
        machine = lines.index("## Machine") + 2
        lines[machine:machine] = ["The newest run's machine; the CPU of each earlier run is named in its line above.", ""]
    table = summary(sections).splitlines()
    rows = {int(m.group(1)): row for row in table[4:] if (m := re.match(r"\| (\d+)\. ", row))}
    lines += table[:4] + [row for _, row in sorted({**kept_rows, **rows}.items())] + [""]
    new = {int(section.title.split(".")[0]): section.markdown() for section in sections}
    lines += [text for _, text in sorted({**kept, **new}.items())]
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out} ({total / 60:.1f} min)")


if __name__ == "__main__":
    main()
