"""The torch-cpu stream's state: mt19937 seeding, the plain-data state dict, torch's state bytes."""
from __future__ import annotations

import functools
import math
import numbers
import struct
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ...checks import UsageError, check_seed

N = 624  # mt19937 state words
_STATE_KEYS = ("stream", "seed", "key", "pos", "cached_normal")


def seed_key(seed: int) -> np.ndarray:
    """mt19937 init_genrand of the low 32 bits of ``seed`` (core/MT19937RNGEngine.h); read-only."""
    return _seed_key(check_seed(seed) & 0xFFFFFFFF)


@functools.lru_cache(maxsize=256)
def _seed_key(low: int) -> np.ndarray:  # cached: a pipeline run seeds a few generators, a sweep the same seeds again
    key = [low]
    for j in range(1, N):
        key.append((1812433253 * (key[-1] ^ (key[-1] >> 30)) + j) & 0xFFFFFFFF)
    out = np.array(key, dtype=np.uint32)
    out.flags.writeable = False
    return out


# ----------------------------------------------------------------------------- state

def check_state(state: Any) -> Tuple[int, np.ndarray, int, Optional[float]]:
    """``(seed, key, pos, cached_normal)`` of a state dict; ``ValueError`` naming what is wrong."""
    if not isinstance(state, dict):
        raise UsageError(f"torch-cpu state must be a dict with keys {', '.join(_STATE_KEYS)}, "
                         f"got {type(state).__name__}")
    missing = [k for k in _STATE_KEYS if k not in state]
    unknown = sorted(str(k) for k in state if k not in _STATE_KEYS)
    if missing or unknown:
        raise UsageError(f"malformed torch-cpu state: missing keys {missing}, unknown keys {unknown}; "
                         f"expected {', '.join(_STATE_KEYS)}")
    if state["stream"] != "torch-cpu":
        raise UsageError(f"state is of stream {state['stream']!r}, not 'torch-cpu'")
    seed = state["seed"]
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not 0 <= seed < 2**64:
        raise UsageError(f"state 'seed' must be an integer in [0, 2**64), got {seed!r}")
    try:
        key = np.asarray(state["key"])
    except (TypeError, ValueError, OverflowError):
        key = np.asarray(None)
    if key.shape != (N,) or key.dtype.kind not in "iu":
        raise UsageError(f"state 'key' must be a list of {N} integers in [0, 2**32), "
                         f"got {type(state['key']).__name__} of shape {key.shape} and dtype {key.dtype}")
    if key.min() < 0 or key.max() > 0xFFFFFFFF:
        raise UsageError(f"state 'key' must be a list of {N} integers in [0, 2**32), "
                         f"got values from {key.min()} to {key.max()}")
    pos = state["pos"]
    if isinstance(pos, bool) or not isinstance(pos, numbers.Integral) or not 1 <= pos <= N:
        raise UsageError(f"state 'pos' must be an integer in [1, {N}] (words of 'key' used), got {pos!r}")
    cached = state["cached_normal"]
    if cached is not None:
        if isinstance(cached, bool) or not isinstance(cached, numbers.Real) or not math.isfinite(cached):
            raise UsageError(f"state 'cached_normal' must be None or a finite float, got {cached!r}")
        cached = float(cached)
    return int(seed), key.astype(np.uint32), int(pos), cached


def make_state(seed: int, key: np.ndarray, pos: int, cached: Optional[float]) -> Dict[str, Any]:
    return {"stream": "torch-cpu", "seed": int(seed), "key": [int(k) for k in key],
            "pos": int(pos), "cached_normal": None if cached is None else float(cached)}


# CPUGeneratorImplState (CPUGeneratorImpl.cpp): legacy pod {u64 the_initial_seed; int left;
# int seeded; u64 next; u64 state[624]; double normal_x, normal_y, normal_rho; int
# normal_is_valid} (5048 bytes with padding), then float next_float_normal_sample and bool
# is_next_float_normal_sample_valid: 5056 bytes, little-endian on every torch platform.
TORCH_STATE_SIZE = 5056
_HEAD = struct.Struct("<QiiQ")
_NORMAL = struct.Struct("<dddi")
_KEY_AT, _NORMAL_AT = 24, 24 + 8 * N


def torch_state_bytes(state: Dict[str, Any]) -> bytes:
    """The bytes ``torch.Generator.set_state`` takes for ``state`` (no torch needed).

    torch's float cache is left empty: randn never reads it.
    """
    seed, key, pos, cached = check_state(state)
    buf = bytearray(TORCH_STATE_SIZE)
    # after a twist torch keeps left + next == 625; left == 1 means "twist before the next word"
    _HEAD.pack_into(buf, 0, seed, N + 1 - pos, 1, pos)
    buf[_KEY_AT:_NORMAL_AT] = key.astype("<u8").tobytes()
    _NORMAL.pack_into(buf, _NORMAL_AT, 0.0, 0.0 if cached is None else cached, 0.0, cached is not None)
    return bytes(buf)


def parse_torch_state(data: Any) -> Dict[str, Any]:
    """The state dict of ``torch.Generator.get_state()`` bytes (a uint8 tensor, array or bytes).

    torch's float cache is dropped: randn never reads it.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        data = np.asarray(data.numpy() if hasattr(data, "numpy") else data, dtype=np.uint8).tobytes()
    data = bytes(data)
    if len(data) != TORCH_STATE_SIZE:
        raise UsageError(f"a torch CPU generator state has {TORCH_STATE_SIZE} bytes, got {len(data)}")
    seed, left, seeded, nxt = _HEAD.unpack_from(data, 0)
    if seeded != 1 or not 0 < left <= N or nxt > N:
        raise UsageError(f"invalid mt19937 state (seeded={seeded}, left={left}, next={nxt}); "
                         f"torch needs seeded=1, 0 < left <= {N}, next <= {N}")
    if left > 1 and left + nxt != N + 1:
        raise UsageError(f"mt19937 state with left={left}, next={nxt} was not made by torch "
                         f"(after a twist left + next == {N + 1})")
    key = np.frombuffer(data, dtype="<u8", count=N, offset=_KEY_AT)
    if int(key.max()) > 0xFFFFFFFF:
        raise UsageError("mt19937 state words must be below 2**32")
    _, normal_y, _, valid = _NORMAL.unpack_from(data, _NORMAL_AT)
    return make_state(seed, key, N if left == 1 else nxt, normal_y if valid else None)
