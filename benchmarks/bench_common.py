"""Helpers the benchmark scripts share (not a benchmark itself): interleaved timing, statistics,
profiles, fresh-process runs, machine facts and the result tables that run.py writes out.
"""
from __future__ import annotations

import argparse
import cProfile
import inspect
import io
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
if str(ROOT) not in sys.path:  # this checkout's xrand, here and in the children (run_json)
    sys.path.insert(1, str(ROOT))


# ----------------------------------------------------------------------------- results

@dataclass
class Row:
    """One measured figure: its cells (matching the section's columns), target and verdict."""

    cells: List[str]
    target: str = ""
    met: Optional[bool] = None  # None: reported only, no target

    @property
    def verdict(self) -> str:
        return "-" if self.met is None else ("met" if self.met else "**missed**")


@dataclass
class Section:
    """One figure of RESULTS.md: how it was measured, a table, and notes (reasons for misses)."""

    title: str
    method: str
    columns: List[str]
    rows: List[Row] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    seconds: float = 0.0
    others_cpu: Optional[float] = None  # share of the CPU other processes used meanwhile

    def markdown(self) -> str:
        lines = [f"## {self.title}", "", self.method, ""]
        if self.rows:
            header = self.columns + ["target", "met"]
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "|".join(" --- " for _ in header) + "|")
            for row in self.rows:
                lines.append("| " + " | ".join(row.cells + [row.target or "-", row.verdict]) + " |")
            lines.append("")
        for note in self.notes:
            lines.extend([note, ""])
        share = "" if self.others_cpu is None else f"; other processes used {self.others_cpu:.0%} of the CPU meanwhile"
        lines.append(f"_{self.seconds:.0f} s{share}._")
        lines.append("")
        return "\n".join(lines)

    def missed(self) -> List[Row]:
        return [row for row in self.rows if row.met is False]


# ----------------------------------------------------------------------------- timing

def mmm(values: Sequence[float]) -> tuple:
    """(min, median, max)."""
    return min(values), statistics.median(values), max(values)


def fmt_mmm(values: Sequence[float], scale: float = 1.0, digits: int = 2) -> str:
    """``min / median / max`` of ``values * scale``."""
    return " / ".join(f"{v * scale:.{digits}f}" for v in mmm(values))


def calls_for(fn: Callable[[], Any], seconds: float) -> int:
    """How many calls of ``fn`` take about ``seconds`` (after one warm-up call)."""
    fn()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds / 10 and n < 10**6:
        fn()
        n += 1
    per_call = (time.perf_counter() - start) / max(n, 1)
    return max(1, round(seconds / per_call))


def interleaved(methods: Dict[str, Callable[[], Any]], repeats: int, calls: Dict[str, int],
                before: Optional[Callable[[], Any]] = None) -> Dict[str, List[float]]:
    """Seconds per call of each method. Every repeat times each method once (``calls[name]``
    calls in a row), A, B, C, ... with the starting method rotating between repeats, so that
    machine noise falls on all methods alike. ``before``, if given, runs untimed before each
    method's timing (to leave the machine in the same state for all).
    """
    names = list(methods)
    times: Dict[str, List[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            fn, n = methods[name], calls[name]
            if before is not None:
                before()
            start = time.perf_counter()
            for _ in range(n):
                fn()
            times[name].append((time.perf_counter() - start) / n)
    return times


def ratios(numerator: Sequence[float], denominator: Sequence[float]) -> List[float]:
    """Per-repeat ratios: both times of a pair were taken in the same repeat, moments apart."""
    return [a / b for a, b in zip(numerator, denominator)]


def profile_top(fn: Callable[[], Any], calls: int = 1, limit: int = 10, also_cumulative: str = "") -> str:
    """The ``limit`` functions where ``fn`` spends most of its own time (cProfile, tottime);
    with ``also_cumulative`` (a regular expression on file:line(function)), also the matching
    functions by cumulative time."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    text = _shares(profiler) + "\n\n" + stats_table(profiler, "tottime", limit)
    if also_cumulative:
        text += f"\n\nBy cumulative time, functions matching `{also_cumulative}`:\n\n"
        text += stats_table(profiler, "cumulative", also_cumulative)
    return text


def _shares(profiler: cProfile.Profile, top: int = 3) -> str:
    """One line: the functions with the most own time, as shares of all profiled time."""
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (cc, nc, tottime, cumtime, callers)
    total = sum(v[2] for v in stats.values()) or 1.0
    ranked = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:top]
    names = [f"`{name if file == '~' else os.path.basename(file) + ':' + name}` {v[2] / total:.0%}"
             for (file, _, name), v in ranked]
    return f"Most own time ({total:.3f} s profiled): " + ", ".join(names) + "."


def stats_table(profiler: Any, sort: str, restriction: Any) -> str:
    """pstats of a profiler (or a saved profile's path) as a markdown code block, paths shortened."""
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats(sort).print_stats(restriction)
    text = out.getvalue()
    # keep the table only, with shorter paths
    table = text[text.find("   ncalls"):] if "   ncalls" in text else text
    prefixes = {str(ROOT), os.path.dirname(os.__file__)} | {p for p in sys.path if p.endswith("site-packages")}
    for prefix in sorted(prefixes, key=len, reverse=True):
        table = table.replace(prefix + "/", "")
    return "```\n" + table.rstrip() + "\n```"


# ----------------------------------------------------------------------------- processes

def run_json(argv: Sequence[str], timeout: float = 600, env: Optional[Dict[str, str]] = None,
             ok: Sequence[int] = (0,)) -> Dict[str, Any]:
    """Run ``python *argv`` in a fresh process; its last stdout line starting with ``{`` is JSON.
    ``ok``: the exit statuses that count as success (``xrand compare`` exits 1 for a FAIL verdict)."""
    full_env = dict(os.environ, **(env or {}))
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), full_env.get("PYTHONPATH")) if p)
    result = subprocess.run([PYTHON, *argv], capture_output=True, text=True, timeout=timeout, cwd=str(ROOT),
                            env=full_env)
    lines = [line for line in result.stdout.strip().splitlines() if line.startswith("{")]
    if result.returncode not in ok or not lines:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"child process failed (exit {result.returncode}):\n{tail}")
    return json.loads(lines[-1])


def run_child(code: str, timeout: float = 600, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """Run ``code`` in a fresh Python; its last JSON line, as a dict."""
    return run_json(["-c", code], timeout=timeout, env=env)


def tree_rss(pid: int) -> int:
    """Resident memory (bytes) of process ``pid`` and all its descendants; 0 for one that ended."""
    total = 0
    try:
        with open(f"/proc/{pid}/status") as f:
            total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                total += sum(tree_rss(int(child)) for child in f.read().split())
    except (OSError, StopIteration):  # a process that ended meanwhile
        pass
    return total


# ----------------------------------------------------------------------------- machine

def cpu_model() -> str:
    """The CPU's model name, with family / model / stepping where the name is vague."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
                if not line.strip():
                    break  # the first processor is enough
    except OSError:
        return platform.processor() or platform.machine()
    ids = ", ".join(f"{k} {info[k]}" for k in ("cpu family", "model", "stepping") if k in info)
    return f"{info.get('model name', platform.machine())} ({ids})" if ids else info.get("model name", "?")


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def machine_facts() -> Dict[str, str]:
    """CPU, cores, torch's CPU capability, versions; the frameworks are imported here."""
    import numpy as np

    import xrand

    facts = {
        "CPU": cpu_model(),
        "cores": f"{os.cpu_count()} logical ({len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '?'} usable)",
        "OS": platform.platform(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "xrand": xrand.__version__,
    }
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["CPU capability (torch.backends.cpu.get_cpu_capability())"] = torch.backends.cpu.get_cpu_capability()
        facts["torch threads"] = str(torch.get_num_threads())
    except ImportError:
        facts["torch"] = "not installed"
    for dist in ("mindspore", "mindone", "diffusers", "numba"):
        facts[dist] = _version(dist)
    return facts


class CpuShare:
    """How much of the machine's CPU other processes used between start() and stop().

    /proc/stat counts busy time of every process; this process and its finished children
    count their own (os.times). The difference is what others took while we measured.
    """

    def __init__(self) -> None:
        self._start = None

    @staticmethod
    def _busy_and_total() -> Optional[tuple]:
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        steal = fields[7] if len(fields) > 7 else 0
        tick = os.sysconf("SC_CLK_TCK")
        total = sum(fields[:8])
        return (total - idle - steal) / tick, total / tick, steal / tick

    @staticmethod
    def _mine() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def start(self) -> "CpuShare":
        self._start = (self._busy_and_total(), self._mine())
        return self

    def stop(self) -> Optional[float]:
        """Share of all CPU time (every core) that other processes used, or None off Linux."""
        end = self._busy_and_total()
        (begin, mine_begin) = self._start
        if begin is None or end is None:
            return None
        busy = end[0] - begin[0]
        total = end[1] - begin[1]
        steal = end[2] - begin[2]
        others = busy - (self._mine() - mine_begin) + steal
        return max(0.0, others / total) if total > 0 else None


def load_average() -> str:
    try:
        return " / ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "?"


def figure_main(run: Callable[..., "Section"], description: str,
                child: Optional[Callable[[List[str]], None]] = None) -> None:
    """The command line of a figure module: ``--repeats`` (default: ``run``'s own), then the table.

    A figure measured in fresh processes passes ``child``: ``--child ARGS...`` calls it with ARGS.
    """
    if child is not None and "--child" in sys.argv:
        child(sys.argv[sys.argv.index("--child") + 1:])
        return
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--repeats", type=int, default=inspect.signature(run).parameters["repeats"].default)
    print(run(parser.parse_args().repeats).markdown())
