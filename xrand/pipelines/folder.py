"""A diffusers model folder, read once: what it declares, its components' configs, its weights.

Everything a comparison needs to know about the folder before any model loads comes from one
:class:`ModelFolder` (made by :func:`read_folder`): the pipeline class ``model_index.json``
declares, each component's class and config, the scheduler config, and a digest of every file
but the weights (the graph cache's key). Each file is read once, here.

The weights come in the forms users hold: the folder's own files, a *variant* of them
(``unet/diffusion_pytorch_model.fp16.safetensors``, ``--variant fp16``), or a *single file* in
the original layout with the folder giving the configs (``--model FILE --config FOLDER``).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..cache import cache_dir, key_of
from ..checks import UsageError
from ..files import write_text

INDEX = "model_index.json"
#: Files that hold weights: not part of a folder's digest (weights are inputs, not structure).
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".ckpt", ".pt", ".pth", ".msgpack", ".h5")
_CONFIG_NAMES = ("config.json", "scheduler_config.json")
#: A variant's name as both libraries put it in a file name (``model.fp16.safetensors``).
VARIANT_NAME = re.compile(r"[A-Za-z0-9_-]+")
#: A shard's number in a weight file name (``model-00001-of-00002.safetensors``).
_SHARD = re.compile(r"-\d{5}-of-\d{5}")


@dataclass(frozen=True)
class ModelFolder:
    """A folder written by ``save_pretrained``, read once (:func:`read_folder`)."""

    path: str
    index: Mapping[str, Any]  # model_index.json
    configs: Mapping[str, Mapping[str, Any]]  # component -> its config.json or scheduler_config.json
    digest: str  # sha256 over every file but the weights
    weights: Tuple[str, ...] = field(default=(), repr=False)  # the safetensors files a load reads
    variant: Optional[str] = None  # the weights' variant (from_pretrained(variant=...)); None: the plain files
    # component -> the variants its weight files come in (None: plain files), to say what a folder holds
    variants: Mapping[str, Tuple[Optional[str], ...]] = field(default_factory=dict, repr=False)
    single_file: Optional[str] = None  # one file of every weight (from_single_file); path then gives the configs
    # the single file's tensors: name -> shape (read from its header, to check it fits the configs)
    file_shapes: Mapping[str, Tuple[int, ...]] = field(default_factory=dict, repr=False)

    def load_arguments(self) -> Dict[str, Any]:
        """What ``from_pretrained`` is told about the weights (the variant)."""
        return {} if self.variant is None else {"variant": self.variant}

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

    def named_weights(self) -> List[Tuple[str, str]]:
        """``(name, path)`` of each weight file a load reads: its path in the folder, or "single file"
        (a single file is known by its content, wherever it lies and whatever its name)."""
        return [("single file" if self.single_file else os.path.relpath(path, self.path), path)
                for path in self.weights]

    def fingerprint(self) -> str:
        """sha256 over the names and contents of the weights a load reads (:meth:`named_weights`):
        sides from two machines are matched by it."""
        if not self.weights:
            return f"folder:{self.digest}"
        digest = hashlib.sha256()
        for name, path in self.named_weights():
            digest.update(name.encode() + b"\0")
            digest.update(file_sha256(path).encode() + b"\0")
        return "sha256:" + digest.hexdigest()


def component_digests(folder: ModelFolder) -> Dict[str, str]:
    """Component -> sha256 over its weight files (names and contents): two machines' copies of a
    model folder are matched component by component."""
    digests: Dict[str, Any] = {}
    for relative, path in folder.named_weights():
        digest = digests.setdefault(relative.split(os.sep)[0], hashlib.sha256())
        digest.update(relative.encode() + b"\0" + file_sha256(path).encode() + b"\0")
    return {name: digest.hexdigest() for name, digest in sorted(digests.items())}


DIGESTS = "file-digests"  # the cache's subfolder (xrand.cache)


def file_sha256(path: str) -> str:
    """A weight file's sha256, hashed once per file version (:func:`_sha256`)."""
    real = os.path.realpath(path)
    stat = os.stat(real)
    return _sha256(real, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


@functools.lru_cache(maxsize=256)
def _sha256(path: str, device: int, inode: int, size: int, mtime_ns: int, ctime_ns: int) -> str:
    """The sha256 of the file version the arguments name: both sides of a comparison, and later
    runs, read it from xrand's cache (``file-digests``), kept there under the file's path, device,
    inode, size and modification and change times (any write changes the change time). An
    SD-1.5-sized folder's 3.9 GB take 2.3 s to hash."""
    kept = os.path.join(cache_dir(DIGESTS), key_of({"path": path, "device": device, "inode": inode, "size": size,
                                                    "mtime_ns": mtime_ns, "ctime_ns": ctime_ns}))
    try:
        with open(kept) as f:
            saved = f.read()
        if re.fullmatch("[0-9a-f]{64}", saved):
            return saved
    except OSError:  # not kept yet
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    try:
        os.makedirs(os.path.dirname(kept), exist_ok=True)
        write_text(kept, digest.hexdigest())
    except OSError:  # an unwritable cache: hashed again next time
        pass
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


def read_folder(model: Any, variant: Optional[str] = None, config: Optional[str] = None) -> ModelFolder:
    """Read a model folder once: model_index.json, every component's config, the digest of all
    but the weights, the weight files a load reads (``variant``'s where a component has them, as
    both libraries choose). ``config``: ``model`` is a single file and this the folder of its
    configs. ``UsageError`` naming what is missing or unreadable."""
    if config is not None:
        return _read_single_file(model, variant, config)
    if isinstance(model, str) and model.endswith(SINGLE_FILE_SUFFIXES):
        if not os.path.isfile(model):
            raise UsageError(f"model {model!r}: no such file")
        raise UsageError(f"model {model!r} is a single file: give --config FOLDER too, a diffusers folder of the "
                         "same architecture that gives the configs (Settings(config=...); xrand works offline)")
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
    found: Dict[str, Dict[Optional[str], List[str]]] = {}  # component -> variant -> its weight files
    for folder, dirs, files in sorted(os.walk(path)):
        dirs.sort()
        for name in sorted(files):
            file = os.path.join(folder, name)
            relative = os.path.relpath(file, path)
            if name.endswith(WEIGHT_SUFFIXES):
                if name.endswith(".safetensors") and os.path.dirname(relative):
                    part = relative.split(os.sep)[0]
                    found.setdefault(part, {}).setdefault(weights_variant(name), []).append(file)
                continue
            data = index_bytes if relative == INDEX else _read(file)
            digest.update(relative.encode() + b"\0" + hashlib.sha256(data).digest())
            part, _, leaf = relative.partition(os.sep)
            if leaf in _CONFIG_NAMES:
                try:
                    configs[part] = json.loads(data)
                except ValueError as exc:
                    raise UsageError(f"{file!r} is not valid JSON: {exc}") from None
    variants = {part: tuple(sorted(by, key=str)) for part, by in found.items()}
    held = sorted({v for by in found.values() for v in by if v is not None})
    if variant is not None and variant not in held:
        have = f"its variants: {', '.join(held)}" if held else "it holds plain weights only: leave out --variant"
        raise UsageError(f"model folder {model!r} has no {variant} variant of its weights "
                         f"(no *.{variant}.safetensors); {have}")
    # a component without the variant's files loads its plain ones, in both libraries
    weights = [file for by in found.values() for file in (by.get(variant) or by.get(None) or [])]
    return ModelFolder(path=path, index=index, configs=configs, digest=digest.hexdigest(),
                       weights=tuple(sorted(weights)), variant=variant, variants=variants)


#: What a single file of weights ends with (mindone reads safetensors only: see _read_single_file).
SINGLE_FILE_SUFFIXES = (".safetensors", ".ckpt")


def weights_variant(name: str) -> Optional[str]:
    """The variant of a weight file, as diffusers names them: ``model.fp16.safetensors``,
    ``model.fp16-00001-of-00002.safetensors`` and ``model-00001-of-00002.fp16.safetensors`` are
    ``fp16``; ``model.safetensors`` and its shards have none."""
    stem = name.rsplit(".", 1)[0]
    _, dot, rest = stem.partition(".")
    return _SHARD.sub("", rest) if dot else None


def check_variant(variant: Any) -> Optional[str]:
    """A variant name (``fp16``, ``non_ema``) or None."""
    if variant is not None and (not isinstance(variant, str) or not VARIANT_NAME.fullmatch(variant)):
        raise UsageError(f"variant must be the name in the weight files' names, e.g. fp16 for "
                         f"diffusion_pytorch_model.fp16.safetensors (letters, digits, _ and -), got {variant!r}")
    return variant


def _read_single_file(model: Any, variant: Optional[str], config: str) -> ModelFolder:
    """A single file of weights (``from_single_file``) with ``config``, the folder of its configs."""
    if variant is not None:
        raise UsageError(f"--variant {variant} names weight files in a folder; a single file (--model {model} "
                         f"--config {config}) is one file: leave out --variant")
    if not isinstance(model, str) or os.path.isdir(model):
        raise UsageError(f"--config {config!r} is the configs of a single file, but model {model!r} is not a file; "
                         "give --model FILE.safetensors, or leave out --config for a folder")
    if not os.path.isfile(model):
        raise UsageError(f"model {model!r}: no such file")
    if model.endswith(".ckpt"):  # mindone/diffusers/models/model_loading_utils.py load_state_dict
        raise UsageError(f"model {model!r}: mindone.diffusers reads a .ckpt as a MindSpore checkpoint, diffusers as "
                         "torch's pickle, so no .ckpt loads on both sides; save its state dict as .safetensors "
                         "(safetensors.torch.save_file) and give that")
    if not model.endswith(".safetensors"):
        raise UsageError(f"model {model!r} is not a .safetensors file; a single file of weights is "
                         "MODEL.safetensors (with --config FOLDER)")
    if not os.path.isdir(config):
        raise UsageError(f"--config {config!r} is not a folder; give the diffusers folder (model_index.json and "
                         "each component's config) of the single file's architecture")
    folder = read_folder(config)
    return ModelFolder(path=folder.path, index=folder.index, configs=folder.configs, digest=folder.digest,
                       weights=(model,), single_file=model, file_shapes=_tensor_shapes(model))


def _tensor_shapes(path: str) -> Dict[str, Tuple[int, ...]]:
    """A safetensors file's tensor names and shapes, from its header (no tensor is read)."""
    try:
        with open(path, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(size)) if size < os.path.getsize(path) else None
        return {name: tuple(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}
    except (OSError, ValueError, struct.error, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"model {path!r} is not a readable safetensors file ({type(exc).__name__})") from None


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
        if os.path.isfile(os.path.join(where, "config.json")) and not folder.single_file and \
                not any(w.startswith(where + os.sep) for w in folder.weights):
            raise UsageError(_no_weights(folder, part))
    if denoiser_classes and declared.get(denoiser) not in denoiser_classes:
        raise UsageError(f"model folder {folder.path!r} has a {declared.get(denoiser)} as its {denoiser}; "
                         f"{pipeline} takes {' or '.join(denoiser_classes)} (the folder is a {folder.pipeline} "
                         "folder)")
    extra = [part for part in declared if part not in required and part not in optional]
    if extra:
        raise UsageError(f"model folder {folder.path!r} is a {folder.pipeline} folder: it has "
                         f"{', '.join(extra)}, which {pipeline} does not take; choose the folder's own pipeline "
                         f"or leave out --pipeline")


def _no_weights(folder: ModelFolder, part: str) -> str:
    """Why a component has no weights to load: only variants of them (name them), or none at all."""
    variants = [v for v in folder.variants.get(part, ()) if v is not None]
    if variants:
        return (f"model folder {folder.path!r} holds {part}/ weights only as variants ({', '.join(variants)}): give "
                f"--variant {variants[0]} (Settings(variant=...))")
    return f"model folder {folder.path!r} has no {part}/*.safetensors weights (mindone reads safetensors weights only)"
