"""Writing result files: whole or not at all (a temporary name renamed into place), as JSON or text,
readable as the user's umask says (as ``open`` would create them)."""
from __future__ import annotations

import json
import math
import os
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np

from .checks import UsageError


def umask() -> int:
    """The process's file-creation mask (read without changing it where Linux says it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and put back at once
    os.umask(mask)
    return mask


@contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary name beside ``path``; rename it into place only if the block succeeds.

    The file gets the mode ``open`` would give it (0666 less the umask): mkstemp's is 0600,
    which a colleague or a CI artifact upload could not read. It is set when the block is done,
    since a writer may replace the file it was given (safetensors 0.8 writes a new one).
    """
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def check_out_folder(path: str, flag: str = "--out") -> str:
    """Refuse, before any work, an output folder that cannot be written: a file in its place, a
    parent that cannot be created, no permission. Leaves nothing behind (the folders it makes to
    try are removed)."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} exists and is not a folder; give a folder (it is created if missing)")
    made = []
    folder = os.path.abspath(path)
    while not os.path.exists(folder):
        made.append(folder)
        folder = os.path.dirname(folder)
    try:
        for name in reversed(made):
            os.mkdir(name)
        with tempfile.TemporaryFile(prefix=".xrand-probe.", dir=path):
            pass
    except OSError as exc:
        raise UsageError(f"{flag} {path!r} cannot be written ({exc.strerror or exc}); "
                         "give a folder you can write to") from None
    finally:
        for name in made:
            try:
                os.rmdir(name)
            except OSError:
                pass
    return path


def check_out_file(path: str, flag: str = "--out") -> str:
    """Refuse, before any work, an output file that cannot be written: a folder in its place, or a
    folder to put it in that cannot be made or written."""
    if os.path.isdir(path):
        raise UsageError(f"{flag} {path!r} is a folder; give a file name, e.g. {os.path.join(path, 'side.safetensors')!r}")
    check_out_folder(os.path.dirname(os.path.abspath(path)), flag)
    return path


def json_safe(value: Any) -> Any:
    """``value`` with NumPy scalars made Python numbers and non-finite floats made strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return json_safe(value.item())
    return value


def write_json(path: str, data: Any) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            json.dump(json_safe(data), f, indent=2)


def write_text(path: str, text: str) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w") as f:
            f.write(text)


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
