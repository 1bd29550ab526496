"""Loading a model on MindSpore with its weights held once (:func:`weights_read_once`).

mindone.diffusers reads a model's ``.safetensors`` file with ``safetensors.numpy.load_file``
(mindone/safetensors/mindspore.py ``load_file``; mindone.transformers too where MindSpore's
``load_checkpoint`` refuses the file), which memory-maps the file and copies every tensor out of the map
before closing it: until the last tensor is copied the process holds the file's pages and the
copies, twice the weights (an SD-1.5-sized UNet: 7.2 GB resident for 3.4 GB of weights).
:func:`read_safetensors` reads each tensor straight into its array instead, so only the arrays
are resident; the values, dtypes, shapes and names are the same as ``load_file``'s.
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import Dict, Iterator, Union

import numpy as np

_HEADER_BYTES = 8  # the file starts with the header's length, a little-endian uint64


def read_safetensors(filename: Union[str, os.PathLike]) -> Dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file as a NumPy array, in ``load_file``'s order (names
    sorted), each read into an array of its own (no memory map).

    A file ``load_file`` would refuse (a dtype NumPy lacks, such as BF16, or a damaged header) is
    handed to ``load_file``, so it raises its own error.
    """
    from safetensors import numpy as safetensors_numpy

    with open(filename, "rb") as f:
        try:
            size = os.fstat(f.fileno()).st_size
            length = int.from_bytes(f.read(_HEADER_BYTES), "little")
            header = json.loads(f.read(length))
            header.pop("__metadata__", None)
            start = _HEADER_BYTES + length
            tensors = {name: (np.dtype(safetensors_numpy._TYPES[info["dtype"]]), tuple(info["shape"]),
                              info["data_offsets"]) for name, info in header.items()}
        except (ValueError, KeyError, TypeError):
            return _load_file(filename)
        result = {}
        for name in sorted(tensors):
            dtype, shape, (begin, end) = tensors[name]
            array = np.empty(shape, dtype)
            if array.nbytes != end - begin or start + end > size:
                return _load_file(filename)
            f.seek(start + begin)
            if array.nbytes and f.readinto(memoryview(array).cast("B")) != array.nbytes:
                return _load_file(filename)
            result[name] = array
    return result


def _load_file(filename: Union[str, os.PathLike]) -> Dict[str, np.ndarray]:
    from safetensors import numpy as safetensors_numpy

    return (_original_load_file or safetensors_numpy.load_file)(filename)


_original_load_file = None


@contextlib.contextmanager
def weights_read_once() -> Iterator[None]:
    """While loading: ``safetensors.numpy.load_file`` is :func:`read_safetensors` (the one door
    through which mindone reads a safetensors file)."""
    global _original_load_file
    from safetensors import numpy as safetensors_numpy

    if _original_load_file is not None:  # already inside (a pipeline loading its components)
        yield
        return
    _original_load_file = safetensors_numpy.load_file
    safetensors_numpy.load_file = read_safetensors
    try:
        yield
    finally:
        safetensors_numpy.load_file = _original_load_file
        _original_load_file = None


__all__ = ["read_safetensors", "weights_read_once"]
