"""Write tests/golden/torch_cuda_<GPU>.json: torch.randn on a real NVIDIA GPU, for the torch-cuda stream.

Run on a machine with a CUDA GPU and torch: ``python scripts/make_golden_cuda.py [--out FILE]``.
For each case a fresh CUDA generator (``torch.Generator("cuda").manual_seed(seed)``, or the
default one after ``torch.manual_seed(seed)``) draws its calls in order. Per call the file keeps
the sha256 of the output's bytes, the output at up to 256 spread positions as exact little-endian
hex (bfloat16 as its 2-byte pattern), and the generator's state after it (seed and Philox offset,
``get_state()`` hex), with the GPU's name, SM count and threads per SM as torch reads them.

The same run also draws every call with xrand's torch-cuda stream on this GPU's geometry and
prints, per call, the largest difference from the GPU's values and the share that are equal bit
for bit: the file's ``xrand_here`` keeps those numbers for the record (the tests recompute their
own from the positions kept).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from xrand.streams.torch_cuda import TorchCUDAStream, device_geometry  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "tests" / "golden"
KEPT = 256  # positions kept per call

# (seed, how the generator is made, [(shape, dtype), ...]): the calls made in order. Shapes from a
# few values to past one wave of threads (270,336 on a 132-SM H100), where the SM count decides
# which thread writes which value; latents of SD (4x64x64), SDXL (4x128x128), Flux and Wan
# (16 channels); every dtype diffusers draws in.
CASES = [
    (0, "generator", [((3,), "float32"), ((5,), "float32"), ((100,), "float32"), ((1,), "float32")]),
    (10, "manual_seed", [((3,), "float32"), ((4, 4), "float32")]),
    (42, "generator", [((1, 4, 64, 64), "float32"), ((1, 4, 64, 64), "float32")]),
    (1234, "generator", [((2, 4, 128, 128), "float32"), ((1, 16, 136, 136), "float32")]),
    (2**32 + 5, "generator", [((1, 16, 128, 128), "float16"), ((3, 5), "bfloat16"), ((1, 16, 96, 160), "bfloat16")]),
    (2**64 - 1, "generator", [((33,), "float64"), ((1, 4, 64, 64), "float64"), ((300_001,), "float64")]),
    (7, "generator", [((4099,), "float32"), ((0,), "float32"), ((1, 16, 5, 60, 104), "bfloat16"),
                      ((600_000,), "float32")]),
]


def bits(x: torch.Tensor) -> np.ndarray:
    """The output's bit patterns, flat, as little-endian unsigned integers (bfloat16: its 2 bytes)."""
    a = (x.view(torch.int16) if x.dtype == torch.bfloat16 else x).cpu().numpy().reshape(-1)
    return a.view(f"u{a.itemsize}").astype(f"<u{a.itemsize}")


def stream_bits(values: np.ndarray, dtype: str) -> np.ndarray:
    """xrand's values as :func:`bits` gives torch's (its bfloat16 values are float32 holding them)."""
    flat = np.ascontiguousarray(values).reshape(-1)
    if dtype == "bfloat16":
        return (flat.astype(np.float32).view(np.uint32) >> 16).astype("<u2")
    return flat.view(f"u{flat.itemsize}").astype(f"<u{flat.itemsize}")


def as_float(b: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "bfloat16":
        return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return b.view({"float16": np.float16, "float32": np.float32, "float64": np.float64}[dtype]).astype(np.float64)


def positions(n: int) -> list:
    """Up to KEPT positions: the head, the tail and evenly spread ones between."""
    if n <= KEPT:
        return list(range(n))
    return sorted(set(range(32)) | set(range(n - 32, n)) | set(np.linspace(0, n - 1, KEPT - 64).astype(int).tolist()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", default=None, help="the file to write (default tests/golden/torch_cuda_<GPU>.json)")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    geometry = device_geometry("cuda")
    cases, worst = [], {}
    for seed, how, calls in CASES:
        if how == "manual_seed":
            torch.manual_seed(seed)
            generator = None
        else:
            generator = torch.Generator("cuda").manual_seed(seed)
        stream = TorchCUDAStream(seed, **geometry)
        out = []
        for shape, dtype in calls:
            x = torch.randn(shape, generator=generator, device="cuda", dtype=getattr(torch, dtype))
            torch.cuda.synchronize()
            gpu, ours = bits(x), stream_bits(stream.normal(shape, dtype), dtype)
            state = (generator if generator is not None else torch.cuda.default_generators[0]).get_state()
            diff = np.abs(as_float(gpu, dtype) - as_float(ours, dtype))
            here = {"max_abs": float(diff.max()) if diff.size else 0.0,
                    "equal_share": float(np.mean(gpu == ours)) if gpu.size else 1.0,
                    "state_equal": bytes(state.tolist()) == stream.torch_state()}
            kept = positions(gpu.size)
            out.append({"shape": list(shape), "dtype": dtype, "sha256": hashlib.sha256(gpu.tobytes()).hexdigest(),
                        "positions": kept, "hex": [gpu[i:i + 1].tobytes().hex() for i in kept],
                        "state": bytes(state.tolist()).hex(), "xrand_here": here})
            worst[dtype] = max(worst.get(dtype, 0.0), here["max_abs"])
            print(f"seed {seed} {how} {shape} {dtype}: max |gpu - xrand| {here['max_abs']:.3g}, "
                  f"equal {here['equal_share']:.4f}, state equal {here['state_equal']}")
        cases.append({"seed": seed, "generator": how, "calls": out})
    name = props.name.replace(" ", "-")
    golden = {
        "about": "torch.randn(shape, generator=torch.Generator('cuda').manual_seed(seed), device='cuda') (or after "
                 "torch.manual_seed(seed), the default CUDA generator), calls in order, on a real GPU; hex = "
                 "little-endian bytes at the kept positions; state = get_state() after the call",
        "made_by": "scripts/make_golden_cuda.py",
        "gpu": props.name, "sm_count": geometry["sm_count"], "max_threads_per_sm": geometry["max_threads_per_sm"],
        "torch": torch.__version__, "cuda": torch.version.cuda, "numpy": np.__version__,
        "machine": platform.machine(), "date": datetime.date.today().isoformat(),
        "xrand_worst_max_abs": worst, "cases": cases,
    }
    path = Path(args.out) if args.out else GOLDEN / f"torch_cuda_{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {path} ({path.stat().st_size} bytes); worst per dtype {worst}")


if __name__ == "__main__":
    main()
