"""What one framework's stages leave for the other's: nested values whose tensors are kept by key.

A record is a tree (a denoiser call's inputs: tensors in dicts and tuples beside plain numbers,
as :mod:`.trees` walks them) whose tensors are stored apart. :class:`RecordWriter` stores each
tensor as it comes and returns the tree with every tensor replaced by a reference; a
:class:`RecordReader` gives the tensors back, one at a time, when they are read.

Held in memory (both frameworks in one process) the tensors stay in a dict. In a comparison
folder (one framework per process or machine) they go to ``records/NAME-00000.safetensors``
shards of at most :data:`SHARD_BYTES`, written as they fill, so a record is never held whole;
the tree goes to ``records/NAME.json``. Every file's sha256 and size are returned by
:meth:`RecordWriter.close` for the comparison's manifest, and checked by the reader before it
reads a file: a truncated or edited record is refused by name, never read as numbers.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import weakref
from typing import Any, Dict, Mapping, Optional

import numpy as np

from ..checks import UsageError
from ..files import atomic_path
from .trees import PLAIN, Captured

#: A shard is written once it holds this many bytes of tensors.
SHARD_BYTES = 64 << 20
RECORDS = "records"


def file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


@functools.lru_cache(maxsize=1024)
def _digest_of(path: str, size: int, mtime_ns: int) -> str:
    """A file's sha256, read once per version of it (the stages check a file first, then read it)."""
    return file_digest(path)


def file_entry(path: str) -> Dict[str, Any]:
    """What the manifest keeps of a written file: its sha256 and size."""
    return {"sha256": file_digest(path), "bytes": os.path.getsize(path)}


def check_file(folder: str, name: str, entry: Mapping[str, Any], made_by: str) -> str:
    """``folder/name``, if it is the file the manifest describes; UsageError naming it if it is
    missing, truncated or changed."""
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        raise UsageError(f"{path} is missing; the stage '{made_by}' writes it (run it again)")
    stat = os.stat(path)
    size = stat.st_size
    if size != entry["bytes"] or _digest_of(path, size, stat.st_mtime_ns) != entry["sha256"]:
        how = f"{size} bytes, {entry['bytes']} written" if size != entry["bytes"] else "its sha256 differs"
        raise UsageError(f"{path} is not the file the stage '{made_by}' wrote ({how}): truncated or edited; "
                         f"copy it again or run that stage again")
    return path


class RecordWriter:
    """One record being written (see the module). ``folder``: the comparison folder, or None to
    keep the tensors in memory."""

    def __init__(self, name: str, folder: Optional[str] = None) -> None:
        self.name, self.folder = name, folder
        self.arrays: Dict[str, np.ndarray] = {}  # the shard being filled (in memory: all of them)
        self.files: Dict[str, Dict[str, Any]] = {}
        self._shard_bytes = 0
        self._count = 0
        self._keys: Dict[int, tuple] = {}  # id(array) -> (weak reference, key): an array stored once

    def array(self, a: np.ndarray) -> str:
        """Store an array (once, however often it is given) and return its key."""
        hit = self._keys.get(id(a))
        if hit is not None and hit[0]() is a:
            return hit[1]
        key = f"{self._count}"
        self._count += 1
        self.arrays[key] = a
        try:
            self._keys[id(a)] = (weakref.ref(a), key)
        except TypeError:  # not weakly referable: stored each time it is given
            pass
        self._shard_bytes += a.nbytes
        if self.folder is not None and self._shard_bytes >= SHARD_BYTES:
            self._flush()
        return key

    def encode(self, value: Any) -> Any:
        """``value`` as JSON, each tensor (:class:`.trees.Captured` or NumPy array) stored and
        replaced by ``{"$a": key, "dtype": name}``; tuples and dicts tagged, so they come back as
        they were; any other object as ``{"$opaque": its type}`` (not convertible, as before)."""
        if isinstance(value, Captured):
            return {"$a": self.array(value.array), "dtype": value.dtype}
        if isinstance(value, (np.ndarray, np.generic)):
            return {"$n": self.array(np.asarray(value))}
        if isinstance(value, PLAIN):
            return value
        if isinstance(value, Mapping):
            return {"$d": [[k, self.encode(v)] for k, v in value.items()]}
        if isinstance(value, tuple):
            return {"$t": [self.encode(v) for v in value]}
        if isinstance(value, list):
            return [self.encode(v) for v in value]
        return {"$opaque": type(value).__name__}

    def _flush(self) -> None:
        if not self.arrays:
            return
        from safetensors.numpy import save_file

        name = f"{self.name}-{len(self.files):05d}.safetensors"
        path = os.path.join(self.folder, RECORDS, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with atomic_path(path) as tmp:
            save_file({k: np.asarray(a, order="C") for k, a in self.arrays.items()}, tmp)
        self.files[f"{RECORDS}/{name}"] = {**file_entry(path), "keys": [int(k) for k in self.arrays]}
        self.arrays, self._shard_bytes = {}, 0

    def close(self, tree: Any) -> Dict[str, Dict[str, Any]]:
        """Write what is left and the tree; return ``{file: {sha256, bytes}}`` of every file written
        (nothing in memory: the tree and the arrays stay with the writer)."""
        self.tree = tree
        if self.folder is None:
            return {}
        self._flush()
        path = os.path.join(self.folder, RECORDS, f"{self.name}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        shards = {name: entry.pop("keys") for name, entry in self.files.items()}
        with atomic_path(path) as tmp:
            with open(tmp, "w") as f:
                json.dump({"tree": tree, "shards": shards}, f)
        self.files[f"{RECORDS}/{self.name}.json"] = file_entry(path)
        return dict(self.files)


class RecordReader:
    """A record written by :class:`RecordWriter`: its tree, and :meth:`decode` to get values back
    with their tensors (read from the shards when they are asked for)."""

    def __init__(self, tree: Any, arrays: Optional[Mapping[str, np.ndarray]] = None,
                 shards: Optional[Dict[str, str]] = None) -> None:
        self.tree = tree
        self._arrays = arrays  # in memory
        self._shards = shards or {}  # key -> shard path
        self._open: Dict[str, Any] = {}

    @classmethod
    def of(cls, writer: RecordWriter) -> "RecordReader":
        """The record a writer kept in memory."""
        return cls(writer.tree, writer.arrays)

    @classmethod
    def open(cls, folder: str, name: str, files: Mapping[str, Mapping[str, Any]], made_by: str) -> "RecordReader":
        """The record ``name`` in a comparison folder, each of its files checked against ``files``
        (the manifest's) first."""
        for file_name, entry in files.items():
            check_file(folder, file_name, entry, made_by)
        with open(os.path.join(folder, RECORDS, f"{name}.json")) as f:
            data = json.load(f)
        shards = {str(key): os.path.join(folder, shard) for shard, keys in data["shards"].items() for key in keys}
        return cls(data["tree"], shards=shards)

    def array(self, key: str) -> np.ndarray:
        if self._arrays is not None:
            return self._arrays[key]
        from safetensors import safe_open

        path = self._shards[key]
        if path not in self._open:
            self._open[path] = safe_open(path, framework="numpy")
        return self._open[path].get_tensor(key)

    def decode(self, value: Any) -> Any:
        """A part of the tree as the value it was: tensors back as :class:`.trees.Captured` (or
        arrays), tuples as tuples."""
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        if not isinstance(value, dict):
            return value
        if "$a" in value:
            return Captured(self.array(value["$a"]), value["dtype"])
        if "$n" in value:
            return self.array(value["$n"])
        if "$d" in value:
            return {k: self.decode(v) for k, v in value["$d"]}
        if "$t" in value:
            return tuple(self.decode(v) for v in value["$t"])
        return Opaque(value["$opaque"])


class Opaque:
    """A value that was neither a tensor nor a plain value where it was recorded (not convertible)."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<a {self.type_name} recorded by type only>"


__all__ = ["RecordReader", "RecordWriter", "SHARD_BYTES", "check_file", "file_entry"]
