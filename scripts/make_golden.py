"""Regenerate tests/golden/torch_cpu.json: torch CPU randn output for a few call sequences.

Run with torch installed: ``python scripts/make_golden.py``. Values are stored exactly, as the
hex of the little-endian bytes torch returns (bfloat16 as its 2-byte pattern), so the tests can
check the pure-NumPy engine on machines without torch.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from xrand.streams.torch_cpu import parse_torch_state, torch_kernel  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "golden" / "torch_cpu.json"

# (seed, [(shape, dtype), ...]) : one generator per case, the calls made in order
CASES = [
    (0, [((2, 3, 4), "float32"), ((5,), "float32"), ((100,), "float32"), ((1,), "float32")]),
    (2**64 - 1, [((1,), "float64"), ((33,), "float64"), ((7,), "float64"), ((16,), "float64")]),
    (42, [((37,), "float16"), ((3,), "float16"), ((64,), "float16"), ((1, 1, 18), "float16")]),
    (2**32 + 5, [((50,), "bfloat16"), ((9,), "bfloat16"), ((1, 4, 4), "bfloat16"), ((15,), "bfloat16")]),
    (1234, [((1,), "float32"), ((5,), "float16"), ((20,), "float64"), ((3,), "bfloat16"),
            ((1000,), "float32"), ((0,), "float32"), ((2,), "float64")]),
    (7, [((4099,), "float32"), ((4, 16), "float16")]),
]


def little_endian_hex(x: torch.Tensor) -> str:
    a = (x.view(torch.int16) if x.dtype == torch.bfloat16 else x).numpy()
    return a.astype(a.dtype.newbyteorder("<")).tobytes().hex()


def state_summary(generator: torch.Generator) -> dict:
    state = parse_torch_state(generator.get_state())
    key = np.array(state["key"], dtype="<u4").tobytes()
    cached = state["cached_normal"]
    return {"pos": state["pos"], "key_sha256": hashlib.sha256(key).hexdigest(),
            "cached_normal": None if cached is None else float(cached).hex()}


def main() -> None:
    cases = []
    for seed, calls in CASES:
        generator = torch.Generator("cpu").manual_seed(seed)
        out = []
        for shape, dtype in calls:
            x = torch.randn(shape, generator=generator, dtype=getattr(torch, dtype))
            out.append({"shape": list(shape), "dtype": dtype, "hex": little_endian_hex(x)})
        cases.append({"seed": seed, "calls": out, "final_state": state_summary(generator)})
    golden = {
        "about": "torch.randn on torch.Generator('cpu').manual_seed(seed), calls in order; "
                 "hex = little-endian bytes of the output",
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "kernel": torch_kernel(),
        "machine": platform.machine(),
        "date": datetime.date.today().isoformat(),
        "cases": cases,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
