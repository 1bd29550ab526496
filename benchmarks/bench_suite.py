"""Figure 17: the test suite's wall time on this machine, and where it goes.

    python benchmarks/bench_suite.py

Runs the README's test command (``python -m pytest``: two pytest-xdist processes, each test file
whole in one) once in a fresh process with ``--durations=0``, from its start to its exit, and adds
up each file's setup, call and teardown seconds (as each process spent them: the two run side by
side, so a file's seconds include what the other process took from it). Target: within 6 minutes
on a 2-core machine.
"""
from __future__ import annotations

import collections
import re
import subprocess
import time

from bench_common import PYTHON, ROOT, Row, Section

TARGET_SECONDS = 6 * 60
DURATION = re.compile(r"^([0-9.]+)s (?:setup|call|teardown)\s+(tests/[^:]+)::", re.M)
OUTCOME = re.compile(r"^=* ?(\d+ (?:passed|failed).*?) in ([0-9.]+)s", re.M)  # -q: no "=" around it


def run(top: int = 12) -> Section:
    start = time.perf_counter()
    done = subprocess.run([PYTHON, "-m", "pytest", "--durations=0", "-q", "-p", "no:cacheprovider"], cwd=ROOT,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    per_file = collections.Counter()
    for seconds, path in DURATION.findall(done.stdout):
        per_file[path] += float(seconds)
    outcome = OUTCOME.search(done.stdout)
    section = Section(
        title="17. The test suite's wall time on 2 cores",
        method=__doc__.split("\n\n", 2)[2].strip(),
        columns=["run", "outcome", "pytest's seconds", "wall s (process start to exit)", "x target"],
    )
    summary = outcome.group(1) if outcome else f"pytest exit status {done.returncode}"
    section.rows.append(Row(["python -m pytest", f"{summary} (exit status {done.returncode})",
                             outcome.group(2) if outcome else "-", f"{wall:.0f}", f"{wall / TARGET_SECONDS:.2f}x"],
                            target=f"≤ {TARGET_SECONDS} s", met=done.returncode == 0 and wall <= TARGET_SECONDS))
    total = sum(per_file.values())
    section.notes.append(f"Both processes' seconds together: {total:.0f}; the {top} files that took most: " + ", ".join(
        f"{path.removeprefix('tests/')} {seconds:.0f} s" for path, seconds in per_file.most_common(top)) + ".")
    return section


if __name__ == "__main__":
    print(run().markdown())
