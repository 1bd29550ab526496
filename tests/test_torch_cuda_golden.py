"""The torch-cuda stream against torch.randn on a real GPU: tests/golden/torch_cuda_<GPU>.json,
written by scripts/make_golden_cuda.py on the GPU (its torch, CUDA and date are in the file).

Per call the file keeps the GPU's output at up to 256 positions, bit for bit, and the generator's
state after it. The state (seed and Philox offset) must be the GPU's exactly; float32 values within
the bound docs/torch-cuda.md derives (the Box-Muller radius, at most 6.8, times 7e-7), float64 within
a few ulp, and float16 / bfloat16 the GPU's bits or their neighbours (the float32 value before the
cast differs in its last bits).
"""
import json
from pathlib import Path

import numpy as np
import pytest

from xrand.streams.torch_cuda import TorchCUDAStream

FILES = sorted((Path(__file__).parent / "golden").glob("torch_cuda_*.json"))
FLOAT32 = 6.8 * 7e-7
FLOAT64 = 2e-15
FLOATS = {"float16": np.float16, "float32": np.float32, "float64": np.float64}


def golden(path):
    return json.loads(path.read_text())


def calls(path):
    data = golden(path)
    return [(data, case["seed"], case["calls"][: i + 1]) for case in data["cases"] for i in range(len(case["calls"]))]


def bits(values, dtype):
    """xrand's values as the file keeps the GPU's: little-endian bit patterns (bfloat16: 2 bytes)."""
    flat = np.ascontiguousarray(values).reshape(-1)
    if dtype == "bfloat16":
        return (flat.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return flat.view(f"u{flat.itemsize}")


def gpu_bits(call):
    size = 2 if call["dtype"] in ("float16", "bfloat16") else {"float32": 4, "float64": 8}[call["dtype"]]
    return np.array([int.from_bytes(bytes.fromhex(h), "little") for h in call["hex"]], dtype=f"u{size}")


def as_float(b, dtype):
    if dtype == "bfloat16":
        return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return b.view(FLOATS[dtype]).astype(np.float64)


def drawn(data, seed, made, **geometry):
    """The stream's draws of ``made`` in order, on the file's GPU unless ``geometry`` says otherwise;
    the last call's values (flat) and the stream."""
    stream = TorchCUDAStream(seed, **(geometry or {"sm_count": data["sm_count"],
                                                   "max_threads_per_sm": data["max_threads_per_sm"]}))
    for call in made:
        values = stream.normal(tuple(call["shape"]), call["dtype"])
    return values.reshape(-1), stream


def test_a_golden_file_from_a_real_gpu_is_here():
    assert FILES, "tests/golden/torch_cuda_*.json: run scripts/make_golden_cuda.py on a CUDA machine"
    for path in FILES:
        data = golden(path)
        assert data["made_by"] == "scripts/make_golden_cuda.py" and data["torch"] and data["gpu"]


@pytest.mark.parametrize("data, seed, made", [c for path in FILES for c in calls(path)],
                         ids=lambda v: None if isinstance(v, (dict, int)) else
                         f"{'x'.join(map(str, v[-1]['shape']))}-{v[-1]['dtype']}-call{len(v)}")
def test_the_stream_gives_the_gpus_values_and_state(data, seed, made):
    call = made[-1]
    values, stream = drawn(data, seed, made)
    assert stream.torch_state().hex() == call["state"]  # seed and Philox offset, exactly
    kept = np.asarray(call["positions"], dtype=np.int64)
    ours, gpu = bits(values, call["dtype"])[kept], gpu_bits(call)
    difference = np.abs(as_float(ours, call["dtype"]) - as_float(gpu, call["dtype"]))
    if call["dtype"] == "float32":
        assert difference.max(initial=0) <= FLOAT32
    elif call["dtype"] == "float64":
        assert difference.max(initial=0) <= FLOAT64
    else:  # the same bits, or the next pattern up or down
        assert np.abs(ours.astype(np.int64) - gpu.astype(np.int64)).max(initial=0) <= 1


def test_past_one_wave_of_threads_the_values_depend_on_the_sm_count():
    """The file's draw of more values than one wave of threads (270,336 on a 132-SM H100) is the
    GPU's only with the GPU's SM count: with an H100 PCIe's 114 SMs other values land there."""
    for path in FILES:
        data = golden(path)
        threads = data["sm_count"] * data["max_threads_per_sm"]
        for _, seed, made in calls(path):
            call = made[-1]
            if call["dtype"] != "float32" or np.prod(call["shape"]) <= threads:
                continue
            kept = np.asarray(call["positions"])
            gpu = as_float(gpu_bits(call), "float32")
            here, _ = drawn(data, seed, made)
            other, _ = drawn(data, seed, made, sm_count=data["sm_count"] - 18,
                             max_threads_per_sm=data["max_threads_per_sm"])
            assert np.abs(here[kept] - gpu).max() <= FLOAT32 < np.abs(other[kept] - gpu).max()
            return
    pytest.fail("no float32 draw past one wave of threads in the golden files")
