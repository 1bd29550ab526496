"""A diffusers model folder, read once: what it declares, its components' configs, its weights.

Everything a comparison needs to know about the folder before any model loads comes from one
:class:`ModelFolder` (made by :func:`read_folder`): the pipeline class ``model_index.json``
declares, each component's class and config, the scheduler config, and a digest of every file
but the weights (the graph cache's key). Each file is read once, here.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Tuple

from ..checks import UsageError

INDEX = "model_index.json"
#: Files that hold weights: not part of a folder's digest (weights are inputs, not structure).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".ckpt", ".pt", ".pth", ".msgpack", ".h5")
_CONFIG_NAMES = ("config.json", "scheduler_config.json")


@dataclass(frozen=True)
class ModelFolder:
    """A folder written by ``save_pretrained``, read once (:func:`read_folder`)."""

    path: str
    index: Mapping[str, Any]  # model_index.json
    configs: Mapping[str, Mapping[str, Any]]  # component -> its config.json or scheduler_config.json
    digest: str  # sha256 over every file but the weights
    weights: Tuple[str, ...] = field(default=(), repr=False)  # every component's safetensors files

    @property
    def pipeline(self) -> str:
        """The pipeline class the folder declares."""
        return self.index["_class_name"]

    def components(self) -> Dict[str, str]:
        """Component name -> class name, for the components the folder declares (not null ones)."""
        return {name: value[1] for name, value in self.index.items()
                if not name.startswith("_") and isinstance(value, (list, tuple)) and len(value) == 2
                and value[1] is not None}

    def config(self, component: str) -> Mapping[str, Any]:
        """A component's config (``{}`` when it has none)."""
        return self.configs.get(component, {})

    @property
    def scheduler_config(self) -> Dict[str, Any]:
        """``scheduler/scheduler_config.json``, its ``_class_name`` included."""
        return dict(self.config("scheduler"))

    @property
    def weights_bytes(self) -> int:
        """The size of the weight files."""
        return sum(os.path.getsize(path) for path in self.weights)

    def fingerprint(self) -> str:
        """sha256 over every component's safetensors weights (sides from two machines are matched by it)."""
        if not self.weights:
            return f"folder:{self.digest}"
        digest = hashlib.sha256()
        for path in self.weights:
            stat = os.stat(path)
            digest.update(os.path.relpath(path, self.path).encode() + b"\0")
            digest.update(_sha256(os.path.realpath(path), stat.st_size, stat.st_mtime_ns).encode() + b"\0")
        return "sha256:" + digest.hexdigest()


def component_digests(folder: ModelFolder) -> Dict[str, str]:
    """Component -> sha256 over its weight files (names and contents): two machines' copies of a
    model folder are matched component by component."""
    digests: Dict[str, Any] = {}
    for path in folder.weights:
        relative = os.path.relpath(path, folder.path)
        stat = os.stat(path)
        digest = digests.setdefault(relative.split(os.sep)[0], hashlib.sha256())
        digest.update(relative.encode() + b"\0" + _sha256(os.path.realpath(path), stat.st_size,
                                                           stat.st_mtime_ns).encode() + b"\0")
    return {name: digest.hexdigest() for name, digest in sorted(digests.items())}


@functools.lru_cache(maxsize=256)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    """Hashed once per file version: both sides of a comparison read the same weights."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def resolve_model(model: Any) -> str:
    """A folder path for ``model``: a folder as given, or a hub id's snapshot in the local
    Hugging Face cache (xrand works offline: nothing is downloaded)."""
    if not isinstance(model, str) or not model:
        raise UsageError(f"model must be a folder written by save_pretrained, got {model!r}")
    if os.path.isdir(model):
        return model
    looks_local = os.path.isabs(model) or model.startswith(".") or model.count("/") != 1 or os.path.exists(model)
    if not looks_local:
        try:
            from huggingface_hub import snapshot_download

            return snapshot_download(model, local_files_only=True)
        except Exception:  # not installed, or not in the cache: the message below says what to do
            pass
    raise UsageError(f"model {model!r} is not a folder{'' if looks_local else ' nor a model in the local Hugging Face cache'}"
                     "; give a folder written by save_pretrained (xrand works offline)")


def read_folder(model: Any) -> ModelFolder:
    """Read a model folder once: model_index.json, every component's config, the digest of all
    but the weights. ``UsageError`` naming what is missing or unreadable."""
    path = resolve_model(model)
    index_path = os.path.join(path, INDEX)
    try:
        with open(index_path, "rb") as f:
            index_bytes = f.read()
        index = json.loads(index_bytes)
        index["_class_name"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"model folder {model!r} has no readable {INDEX} with a _class_name "
                         f"({type(exc).__name__}); expected a folder written by save_pretrained") from None
    digest = hashlib.sha256()
    configs: Dict[str, Dict[str, Any]] = {}
    weights: List[str] = []
    for folder, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for name in sorted(files):
            file = os.path.join(folder, name)
            relative = os.path.relpath(file, path)
            if name.endswith(WEIGHT_SUFFIXES):
                if name.endswith(".safetensors") and os.path.dirname(relative):
                    weights.append(file)
                continue
            data = index_bytes if relative == INDEX else _read(file)
            digest.update(relative.encode() + b"\0" + hashlib.sha256(data).digest())
            part, _, leaf = relative.partition(os.sep)
            if leaf in _CONFIG_NAMES:
                try:
                    configs[part] = json.loads(data)
                except ValueError as exc:
                    raise UsageError(f"{file!r} is not valid JSON: {exc}") from None
    return ModelFolder(path=path, index=index, configs=configs, digest=digest.hexdigest(), weights=tuple(weights))


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def check_components(folder: ModelFolder, required: Tuple[str, ...], optional: Tuple[str, ...], pipeline: str,
                     denoiser: str, denoiser_classes: Tuple[str, ...]) -> None:
    """Refuse a folder that does not fit ``pipeline``: a required component missing (from
    model_index.json or on disk, or without safetensors weights), a component the pipeline does
    not take, or a denoiser of another class."""
    declared = folder.components()
    needs = f"{pipeline} needs {', '.join(required)}"
    for part in required:
        if part not in declared:
            raise UsageError(f"model folder {folder.path!r} declares no {part} in {INDEX}; {needs} "
                             f"(the folder is a {folder.pipeline} folder)")
        where = os.path.join(folder.path, part)
        if not os.path.isdir(where):
            raise UsageError(f"model folder {folder.path!r} has no {part}/; {needs} (a folder written by "
                             "save_pretrained)")
        if part == "scheduler" and "scheduler" not in folder.configs:
            raise UsageError(f"model folder {folder.path!r} has no scheduler/scheduler_config.json")
        if os.path.isfile(os.path.join(where, "config.json")) and \
                not any(w.startswith(where + os.sep) for w in folder.weights):
            raise UsageError(f"model folder {folder.path!r} has no {part}/*.safetensors weights "
                             "(mindone reads safetensors weights only)")
    if denoiser_classes and declared.get(denoiser) not in denoiser_classes:
        raise UsageError(f"model folder {folder.path!r} has a {declared.get(denoiser)} as its {denoiser}; "
                         f"{pipeline} takes {' or '.join(denoiser_classes)} (the folder is a {folder.pipeline} "
                         "folder)")
    extra = [part for part in declared if part not in required and part not in optional]
    if extra:
        raise UsageError(f"model folder {folder.path!r} is a {folder.pipeline} folder: it has "
                         f"{', '.join(extra)}, which {pipeline} does not take; choose the folder's own pipeline "
                         f"or leave out --pipeline")
