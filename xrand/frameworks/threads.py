"""How many threads a side's kernels run: the cores this process may use, less those other
processes keep busy.

torch's CPU threads wait for each other by spinning: with one thread more than there are free
cores, every parallel operator waits for a thread that another process holds. On 2 cores at load
average 3, diffusers' DDIM on the digits model took 55-66 s with torch's default 2 threads and
1.9-2.1 s with 1 (a user's report); benchmarks/RESULTS.md figure 13 has xrand compare beside a
busy process. So each side measures, at its start, the cores other processes keep busy
(:func:`measure`) and runs that many fewer threads (:func:`rule`).
The two frameworks' sides run one after the other, never at once, so each gets the same rule.

The count is the user's where they fixed it (``OMP_NUM_THREADS``), or the caller's (:func:`fix`: a
sweep worker's fixed count). The thread count can change a reduction's last bits (torch split a
2-step run of a tiny UNet 6.6e-7 apart between 1 and 2 threads): the report names each side's.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import time
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Tuple

#: The user's thread count, where they fixed it.
THREADS_VARIABLE = "OMP_NUM_THREADS"
#: How long :func:`measure` watches the other processes (its share of a side is this, once).
SAMPLE_SECONDS = 0.1
#: A measurement less than this many seconds after the last one (a side after a short one) takes
#: the other processes' busy time since then and waits for nothing.
RECENT_SECONDS = 1.0

_fixed: Optional[Tuple[int, str]] = None  # (count, why), set by fix()
_last: Optional[Tuple[int, float, Tuple[int, int], float]] = None  # the last measurement's end: (pid, when, ticks, own)


@dataclass(frozen=True)
class Load:
    """The machine at one moment: ``cores`` this process may use, the cores ``others`` (other
    processes) kept busy over the last :data:`SAMPLE_SECONDS` (None where /proc/stat is not
    readable, and where this process may use one CPU: one thread whatever the load, so not
    watched), and the load average over 1, 5 and 15 minutes (this process included)."""

    cores: int
    others: Optional[float]
    average: Tuple[float, float, float]

    def report(self) -> Dict[str, object]:
        """As a side's environment records it."""
        return {"load_average": [round(v, 2) for v in self.average],
                "other_processes_busy_cores": None if self.others is None else round(self.others, 2)}


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _busy_ticks(cpus: Optional[set]) -> Optional[Tuple[int, int]]:
    """(busy, total) clock ticks of ``cpus`` since boot, from /proc/stat (None where unreadable)."""
    try:
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu") and line[3:4].isdigit()]
    except OSError:
        return None
    busy = total = 0
    for fields in lines:
        if cpus is not None and int(fields[0][3:]) not in cpus:
            continue
        user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
        busy += user + nice + system + irq + softirq + steal  # steal: the hypervisor gave the core away
        total += user + nice + system + idle + iowait + irq + softirq + steal
    return (busy, total) if total else None


_helpers: set = set()  # the processes of this command that run beside it (:func:`helper`)


def _own_seconds() -> float:
    """This command's CPU seconds: this process's (every thread), its children's that ended, and
    its helpers' that still run (another process's seconds, but the command's own work)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + sum(map(_seconds_of, _helpers))


def _seconds_of(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


@contextlib.contextmanager
def helper(pid: int) -> Iterator[None]:
    """While the block runs, process ``pid`` (a child of this one, which the block waits for) is
    this command's own work, not another process's load: what it keeps busy leaves this process's
    threads as they were (MindSpore's process importing its libraries while torch's side runs)."""
    _helpers.add(pid)
    try:
        yield
    finally:
        _helpers.discard(pid)


def measure(seconds: float = SAMPLE_SECONDS) -> Load:
    """The machine now: the cores other processes keep busy, watched for ``seconds`` on the CPUs
    this process may use (their busy time in /proc/stat less this process's own), or since the last
    measurement where that ended ``seconds`` to :data:`RECENT_SECONDS` ago. On one CPU it watches
    nothing (a side runs one thread there whatever the others do) and returns at once."""
    global _last
    cores = usable_cores()
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    average = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    if cores == 1:
        return Load(cores, None, tuple(average))
    if _last is not None and _last[0] == os.getpid() and seconds <= time.monotonic() - _last[1] <= RECENT_SECONDS:
        _, _, before, own = _last
    else:
        before, own = _busy_ticks(cpus), _own_seconds()
        if before is not None:
            time.sleep(seconds)
    others = None
    after, now = _busy_ticks(cpus), _own_seconds()
    if before is not None and after is not None and after[1] > before[1]:
        tick = os.sysconf("SC_CLK_TCK")
        elapsed = (after[1] - before[1]) / tick / len(cpus or range(cores))
        others = max(0.0, ((after[0] - before[0]) / tick - (now - own)) / elapsed)
    _last = None if after is None else (os.getpid(), time.monotonic(), after, now)
    return Load(cores, others, tuple(average))


def rule(cores: int, others: Optional[float], most: Optional[int] = None) -> int:
    """The threads for a side: the ``cores`` less those ``others`` keep busy (rounded), at least 1
    and at most ``most`` (the framework's own default, where it has one)."""
    free = cores if others is None else cores - int(others + 0.5)
    return max(1, min(free, most or cores))


def fix(count: Optional[int], why: str = "") -> None:
    """Every side of this process runs ``count`` threads from now on (None: the rule again)."""
    global _fixed
    _fixed = None if count is None else (int(count), why)


def choose(load: Load, most: Optional[int] = None) -> Tuple[int, str]:
    """``(threads, why)`` for a side starting at ``load``: the fixed count, ``OMP_NUM_THREADS``, or
    :func:`rule`."""
    if _fixed is not None:
        return _fixed
    given = os.environ.get(THREADS_VARIABLE, "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given), f"{THREADS_VARIABLE}={given}"
    count = rule(load.cores, load.others, most)
    if load.cores == 1:
        return count, "1 usable core (one thread whatever the load)"
    if load.others is None:
        return count, f"{load.cores} usable cores (the other processes' load is unknown here)"
    return count, f"{load.cores} usable cores, other processes kept {load.others:.1f} busy"


def _process_environment(name: str) -> Optional[str]:
    """``name`` in this process's C environment, which a new process inherits (``os.environ`` is
    Python's copy, taken at start, and misses what a library set since with ``setenv``)."""
    try:
        getenv = ctypes.CDLL(None).getenv
    except (OSError, AttributeError):
        return os.environ.get(name)
    getenv.restype = ctypes.c_char_p
    value = getenv(name.encode())
    return None if value is None else value.decode(errors="replace")


@contextlib.contextmanager
def users_thread_count_inherited() -> Iterator[None]:
    """While a new process starts: its ``OMP_NUM_THREADS`` as the user set it, or unset.

    Importing MindSpore (2.10) sets OMP_NUM_THREADS=1 in the C environment where it was unset, and a
    process started after inherits that (multiprocessing's spawn, subprocess without ``env=``), where
    :func:`choose` takes it for the user's count: MindSpore's stages of ``compare --only mindspore``
    ran 1 thread on 2 cores, their report saying "OMP_NUM_THREADS=1"."""
    inherited, given = _process_environment(THREADS_VARIABLE), os.environ.get(THREADS_VARIABLE)
    if inherited == given:
        yield
        return
    if given is None:
        os.unsetenv(THREADS_VARIABLE)
    else:
        os.putenv(THREADS_VARIABLE, given)
    try:
        yield
    finally:
        if inherited is not None:
            os.putenv(THREADS_VARIABLE, inherited)


__all__: List[str] = ["Load", "RECENT_SECONDS", "SAMPLE_SECONDS", "choose", "fix", "helper", "measure", "rule",
                      "usable_cores", "users_thread_count_inherited"]
