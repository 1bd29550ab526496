"""Figure 13: the default `xrand compare` beside a busy process, with the thread counts xrand used
before it chose them by the load, and with its rule.

    python benchmarks/bench_threads.py [--repeats 2]

One busy process (`python -c "while True: pass"`) runs beside the comparison for the whole
figure. Each repeat runs the default comparison (the embedded digits model, its defaults: 50
steps, batch 4, the noise floor on) twice in fresh processes, in rotating order: "before", with
``OMP_NUM_THREADS`` set to the cores this process may use (the counts xrand ran before: torch's
default, the physical cores, and MindSpore's, the usable cores: both 2 on this machine), and
"after", with nothing set, so each side picks its threads by the rule of
``xrand/frameworks/threads.py`` (the usable cores less those other processes keep busy). A
warm-up comparison first puts MindSpore's graphs in the compile cache. The seconds, threads and
load are those report.json gives for each side. Reported only: no target.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
import time

from bench_common import PYTHON, ROOT, Row, Section, figure_main, fmt_mmm


def compare(out: str, env: dict) -> dict:
    """One default comparison in a fresh process; its report.json and the process's wall time."""
    start = time.perf_counter()
    done = subprocess.run([PYTHON, "-m", "xrand", "compare", "--quiet", "--out", out], capture_output=True,
                          text=True, cwd=str(ROOT), env=env, timeout=1800)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise RuntimeError(f"xrand compare failed (exit {done.returncode}): {done.stderr.strip()[-300:]}")
    with open(os.path.join(out, "report.json")) as f:
        return {"report": json.load(f), "wall": wall}


def run(repeats: int = 2) -> Section:
    cores = len(os.sched_getaffinity(0))
    section = Section(
        title="13. The default `xrand compare` beside one busy process: threads as before and by the load",
        method=__doc__.split("\n\n", 2)[2].strip() + f" {repeats} repeats.",
        columns=["threads", "torch s", "MindSpore s", "whole compare s (wall)", "torch / MindSpore threads",
                 "other processes' busy cores at torch's start", "load average (1 min) at torch's start"],
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    variants = {f"before (OMP_NUM_THREADS={cores})": dict(env, OMP_NUM_THREADS=str(cores)),
                "after (the rule)": env}
    busy = subprocess.Popen([PYTHON, "-c", "while True: pass"])
    results = {name: [] for name in variants}
    try:
        with tempfile.TemporaryDirectory(prefix="xrand-bench-threads-") as tmp:
            compare(os.path.join(tmp, "warm-up"), env)
            names = list(variants)
            for r in range(repeats):
                for name in names[r % 2:] + names[:r % 2]:
                    results[name].append(compare(os.path.join(tmp, f"{r}-{names.index(name)}"), variants[name]))
    finally:
        busy.kill()
        busy.wait()
    for name, runs in results.items():
        a = [x["report"]["environment"]["a"] for x in runs]
        b = [x["report"]["environment"]["b"] for x in runs]
        threads = sorted({f"{ea.get('torch_threads')} / {eb.get('mindspore_threads')}" for ea, eb in zip(a, b)})
        section.rows.append(Row([
            name, fmt_mmm([x["report"]["seconds"]["torch"] for x in runs]),
            fmt_mmm([x["report"]["seconds"]["mindspore"] for x in runs]), fmt_mmm([x["wall"] for x in runs], 1, 1),
            ", ".join(threads), fmt_mmm([e["other_processes_busy_cores"] for e in a], 1, 1),
            fmt_mmm([e["load_average"][0] for e in a], 1, 1)]))
    torch = {name: statistics.median(x["report"]["seconds"]["torch"] for x in runs) for name, runs in results.items()}
    before, after = torch.values()
    section.notes.append(f"torch's side, median: {before:.2f} s before, {after:.2f} s after ({before / after:.1f}x). "
                         "The threads each side chose, and why, are in report.json's environment "
                         f"(`threads_chosen`); the busy process is one of the other processes counted.")
    return section


if __name__ == "__main__":
    figure_main(run, __doc__.splitlines()[0])
