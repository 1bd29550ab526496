"""torch's CPU generator, bit for bit, without torch: the ``torch-cpu`` stream.

``state``: seeding, the state dict and torch's state bytes; ``reference``: the NumPy kernels;
``compiled``: the numba kernels (imported only by the numba engines); ``stream``: the engines
and :class:`TorchCPUStream`.
"""
from .reference import libm_function
from .state import N, TORCH_STATE_SIZE, check_state, make_state, parse_torch_state, seed_key, torch_state_bytes
from .stream import ENGINES, KERNELS, TorchCPUStream, resolve_engine, torch_kernel

__all__ = [
    "ENGINES", "KERNELS", "N", "TORCH_STATE_SIZE", "TorchCPUStream", "check_state", "libm_function",
    "make_state", "parse_torch_state", "resolve_engine", "seed_key", "torch_kernel", "torch_state_bytes",
]
