"""NumPy's PCG64 stream, the one mindone.diffusers uses on MindSpore.

mindone draws ``np.random.Generator(PCG64(seed)).standard_normal(shape)`` in float64 and casts
(mindone/diffusers/utils/mindspore_utils.py ``randn``), so every dtype here is the float64 draw
cast down; NumPy's own float32 ziggurat would give other numbers.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import numpy as np

from .base import Stream
from ..checks import UsageError
from ..numeric import cast_float64


# Values drawn and cast at a time when the target is not float64: the float64 draw of a large
# tensor would otherwise need twice the output's memory on top of it (and 512 KiB stays in cache).
CHUNK = 1 << 16


class PCG64Stream(Stream):
    name = "pcg64"

    def seed(self, seed: int) -> None:
        self._gen = np.random.Generator(np.random.PCG64(seed))

    def seed_from_sequence(self, sequence: np.random.SeedSequence) -> None:
        """``PCG64(sequence)``: children equal ``np.random.Generator(PCG64(seed)).spawn(n)``'s."""
        self._gen = np.random.Generator(np.random.PCG64(sequence))
        self.initial_seed = None

    def normal(self, shape: Tuple[int, ...], dtype: str) -> np.ndarray:
        n = math.prod(shape)
        if dtype == "float64" or n <= CHUNK:
            return cast_float64(self._gen.standard_normal(shape), dtype)
        # standard_normal in pieces continues one stream: the same values as a single call
        out = np.empty(n, dtype=np.float32 if dtype == "bfloat16" else dtype)
        buffer = np.empty(CHUNK)
        for start in range(0, n, CHUNK):
            piece = buffer[: min(CHUNK, n - start)]
            self._gen.standard_normal(out=piece)
            out[start:start + len(piece)] = cast_float64(piece, dtype)
        return out.reshape(shape)

    def get_state(self) -> Dict[str, Any]:
        state = self._gen.bit_generator.state
        inner = state["state"]
        return {
            "stream": self.name,
            "state": int(inner["state"]),
            "inc": int(inner["inc"]),
            "has_uint32": int(state["has_uint32"]),
            "uinteger": int(state["uinteger"]),
        }

    def set_state(self, state: Dict[str, Any]) -> None:
        try:
            if state["stream"] != self.name:
                raise UsageError(f"state is of stream {state['stream']!r}, not {self.name!r}")
            numpy_state = {
                "bit_generator": "PCG64",
                "state": {"state": int(state["state"]), "inc": int(state["inc"])},
                "has_uint32": int(state["has_uint32"]),
                "uinteger": int(state["uinteger"]),
            }
            for key in ("state", "inc"):
                if not 0 <= numpy_state["state"][key] < 2**128:
                    raise UsageError(f"{key} {numpy_state['state'][key]} is not a 128-bit unsigned integer")
            self._gen.bit_generator.state = numpy_state
        except (KeyError, TypeError) as exc:
            raise UsageError(
                f"malformed pcg64 state {state!r}: expected a dict with keys "
                "stream, state, inc, has_uint32, uinteger"
            ) from exc
