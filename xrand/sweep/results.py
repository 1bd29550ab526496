"""What a sweep keeps: its folder (``sweep.json``, ``results.jsonl``) and :class:`SweepResult`."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List

from ..checks import UsageError, differing
from ..files import json_safe, write_json
from .config import SWEEP_VERSION, Cell, row_label

RESULTS, MANIFEST = "results.jsonl", "sweep.json"


class ResultsFolder:
    """``DIR/sweep.json`` (the config), ``DIR/results.jsonl`` (a row per finished cell)."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.results = os.path.join(out, RESULTS)
        self.manifest = os.path.join(out, MANIFEST)

    def check(self, identity: Dict[str, Any]) -> None:
        """Refuse a folder that is not a folder, or that holds a sweep of other settings."""
        if os.path.exists(self.out) and not os.path.isdir(self.out):
            raise UsageError(f"--out {self.out!r} exists and is not a folder")
        if os.path.isfile(self.manifest):
            try:
                with open(self.manifest) as f:
                    written = json.load(f)["settings"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise UsageError(f"--out {self.out!r}: {MANIFEST} is unreadable ({exc}); use another folder") from None
            now = json.loads(json.dumps(json_safe(identity)))  # as JSON holds it (tuples: lists)
            diffs = [f"{key}: {x!r} in the folder, {y!r} now" for key, x, y in differing(written, now)]
            if diffs:
                raise UsageError(f"--out {self.out!r} holds a sweep with other settings ({'; '.join(diffs)}); "
                                 "use another folder or the same settings")
        elif os.path.isfile(self.results):
            raise UsageError(f"--out {self.out!r} has {RESULTS} but no {MANIFEST}; use another folder")

    def read(self) -> Dict[Cell, Dict[str, Any]]:
        """Rows by cell; a half-written last line (a killed run) is cut off the file."""
        rows: Dict[Cell, Dict[str, Any]] = {}
        if not os.path.isfile(self.results):
            return rows
        with open(self.results, "rb") as f:
            data = f.read()
        good_end = 0
        lines = data.split(b"\n")
        for number, line in enumerate(lines, 1):
            last = number == len(lines)
            if not line.strip():
                good_end += len(line) + (0 if last else 1)
                continue
            try:
                row = json.loads(line)
                cell = (int(row["seed"]), row_label(row))
            except (ValueError, KeyError, TypeError):
                if last or all(not rest.strip() for rest in lines[number:]):
                    break  # the half-written tail of an interrupted run
                raise UsageError(f"--out {self.out!r}: {RESULTS} line {number} is not a result row; "
                                 "use another folder") from None
            if last:  # a complete row but no newline: keep it, end the line
                rows[cell] = row
                good_end += len(line)
                with open(self.results, "ab") as f:
                    f.write(b"\n")
                good_end += 1
                break
            rows[cell] = row
            good_end += len(line) + 1
        if good_end < len(data):
            with open(self.results, "r+b") as f:
                f.truncate(good_end)
        return rows

    def start(self, identity: Dict[str, Any]) -> None:
        os.makedirs(self.out, exist_ok=True)
        if not os.path.isfile(self.manifest):
            write_json(self.manifest, {"xrand_sweep": SWEEP_VERSION, "settings": identity})

    def append(self, row: Dict[str, Any]) -> None:
        """One whole line in one write, flushed to the OS at once."""

        line = (json.dumps(json_safe(row)) + "\n").encode()
        fd = os.open(self.results, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


@dataclass
class SweepResult:
    cells: List[Cell]
    rows: Dict[Cell, Dict[str, Any]]
    ran: int
    interrupted: bool = False
    summary: Dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.interrupted and all(self.rows.get(c, {}).get("passed") for c in self.cells)
