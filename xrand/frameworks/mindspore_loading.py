"""Loading a model on MindSpore with its weights held once (:func:`weights_read_once`).

mindone.diffusers reads a model's ``.safetensors`` file with ``safetensors.numpy.load_file``
(mindone/safetensors/mindspore.py ``load_file``; mindone.transformers too where MindSpore's
``load_checkpoint`` refuses the file), which memory-maps the file and copies every tensor out
of the map before closing it: until the last tensor is copied the process holds the file's
pages and the copies, twice the weights (an SD-1.5-sized UNet: 7.2 GB resident for 3.4 GB of
weights). :func:`read_safetensors` copies each tensor out and lets the map's pages of it go at
once (``madvise(MADV_DONTNEED)``; the kernel's page cache keeps them), so only the arrays are
resident; the values, dtypes, shapes and names are the same as ``load_file``'s.
"""
from __future__ import annotations

import contextlib
import json
import mmap
import os
from typing import Dict, Iterator, Union

import numpy as np

_HEADER_BYTES = 8  # the file starts with the header's length, a little-endian uint64


def read_safetensors(filename: Union[str, os.PathLike]) -> Dict[str, np.ndarray]:
    """Every tensor of a ``.safetensors`` file as a NumPy array (names sorted, as safetensors 0.4
    orders them; later versions keep the file's order: the state dict is the same), each copied
    into an array of its own, the file's pages given back after each.

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
            if any(np.empty(shape, dtype).nbytes != end - begin or start + end > size
                   for dtype, shape, (begin, end) in tensors.values()):
                raise ValueError("offsets that do not match the shapes")
        except (ValueError, KeyError, TypeError):
            return _load_file(filename)
        result = {}
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            for name in sorted(tensors):
                dtype, shape, (begin, end) = tensors[name]
                if begin == end:
                    result[name] = np.empty(shape, dtype)
                    continue
                # A bytearray, not np.empty: NumPy advises huge pages for a large array, and
                # faulting those in stalls in the kernel's compaction (an SD-1.5-sized UNet's
                # file: 4.7 to 7.6 s against 1.5 s, transparent_hugepage/defrag = madvise).
                buffer = bytearray(end - begin)
                # copied out of the map as load_file copies (read() is slower), then the map's
                # pages let go, so at most one tensor's pages stay resident besides the arrays
                file_bytes = np.frombuffer(mapped, np.uint8, end - begin, start + begin)
                np.copyto(np.frombuffer(buffer, np.uint8), file_bytes)
                del file_bytes
                result[name] = np.frombuffer(buffer, dtype).reshape(shape)
                page = (start + begin) // mmap.PAGESIZE * mmap.PAGESIZE
                mapped.madvise(mmap.MADV_DONTNEED, page, start + end - page)
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
