"""Writing result files: whole or not at all (a temporary name renamed into place), as JSON or text."""
from __future__ import annotations

import json
import math
import os
import tempfile
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np


@contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary name beside ``path``; rename it into place only if the block succeeds."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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
