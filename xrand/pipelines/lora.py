"""LoRA adapters as users hold them: ``--lora FILE[:SCALE]`` (repeatable), loaded into a pipeline by
each library's own loader, as its docs tell (diffusers' "Load LoRAs for inference"; mindone.diffusers
bundles its own PEFT, diffusers needs the ``peft`` package):

    pipe.load_lora_weights(FOLDER, weight_name=FILE, adapter_name=NAME)   # once per file
    pipe.set_adapters([NAME, ...], adapter_weights=[SCALE, ...])
    pipe.fuse_lora(adapter_names=[NAME, ...]); pipe.unload_lora_weights()  # --fuse-lora only

An adapter is named after its file (``pixel-art.safetensors`` -> ``pixel-art``).
"""
from __future__ import annotations

import math
import os
from typing import Any, List, Sequence, Tuple

from ..checks import UsageError

Lora = Tuple[str, float]  # (file, scale)


def adapter_name(path: str) -> str:
    """The adapter's name: its file's name without ``.safetensors``."""
    return os.path.basename(path)[:-len(".safetensors")]


def parse_lora(text: str) -> Lora:
    """``FILE`` or ``FILE:SCALE`` (the command line's ``--lora``) -> (file, scale)."""
    path, colon, scale = text.rpartition(":")
    if text.endswith(".safetensors") or not colon:
        path, scale = text, "1"
    try:
        value = float(scale)
    except ValueError:
        raise UsageError(f"--lora {text!r}: SCALE must be a number, as in FILE.safetensors:0.8") from None
    return path, value


def format_lora(lora: Lora, absolute: bool = False) -> str:
    """``--lora``'s text for a (file, scale) pair (the file's path absolute with ``absolute``)."""
    path, scale = lora
    return f"{os.path.abspath(path) if absolute else path}:{scale:g}"


def check_loras(loras: Any) -> Tuple[Lora, ...]:
    """``loras``: (file, scale) pairs, each file a ``.safetensors`` that exists, each name once,
    each scale finite."""
    if not isinstance(loras, (list, tuple)):
        raise UsageError(f"loras must be a list of (FILE.safetensors, scale) pairs, got {loras!r}")
    checked: List[Lora] = []
    for entry in loras:
        if not isinstance(entry, (list, tuple)) or len(entry) != 2:
            raise UsageError(f"a LoRA is (FILE.safetensors, scale), got {entry!r}")
        path, scale = entry
        if not isinstance(path, str) or not path.endswith(".safetensors"):
            raise UsageError(f"--lora {path!r}: a LoRA is a .safetensors file (what save_lora_weights writes)")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
            raise UsageError(f"--lora {path}:{scale!r}: the scale must be a finite number")
        checked.append((path, float(scale)))
    names = [adapter_name(path) for path, _ in checked]
    for name in names:
        if names.count(name) > 1:
            raise UsageError(f"two LoRA files are named {name}.safetensors: an adapter is named after its file, "
                             "so give each a name of its own")
    return tuple(checked)


def check_lora_files(loras: Sequence[Lora]) -> None:
    """Each file exists (checked when a comparison is planned, on the machine that loads it)."""
    for path, _ in loras:
        if not os.path.isfile(path):
            raise UsageError(f"--lora {path!r}: no such file")


#: The first part of a LoRA tensor's name in the diffusers format (``save_lora_weights``): the
#: component it adapts, as each pipeline's ``load_lora_weights`` reads it (other formats, e.g.
#: kohya's ``lora_unet_*``, are converted by the loaders and not checked here).
LORA_COMPONENTS = ("unet", "transformer", "text_encoder", "text_encoder_2", "text_encoder_3")


def check_lora_targets(loras: Sequence[Lora], denoiser: str, pipeline: str) -> None:
    """A LoRA in the diffusers format adapts the pipeline's denoiser (``unet`` or ``transformer``)
    or its text encoders: a UNet's LoRA given to a transformer's pipeline (or the other way round)
    would load nothing, and is refused naming the file."""
    import json
    import struct

    for path, _ in loras:
        try:
            with open(path, "rb") as f:
                size = struct.unpack("<Q", f.read(8))[0]
                header = json.loads(f.read(size)) if size < os.path.getsize(path) else {}
        except (OSError, ValueError, struct.error) as exc:
            raise UsageError(f"--lora {path!r} is not a readable safetensors file ({type(exc).__name__})") from None
        parts = {name.split(".", 1)[0] for name in header if name != "__metadata__"}
        other = sorted(parts & {"unet", "transformer"} - {denoiser})
        if other and denoiser not in parts and parts <= set(LORA_COMPONENTS):
            raise UsageError(f"--lora {path!r} adapts a {other[0]} ({other[0]}.* tensors); "
                             f"{pipeline}'s denoiser is its {denoiser}: give a LoRA of {denoiser}.* tensors")


def use_loras(pipe: Any, loras: Sequence[Lora], fuse: bool) -> None:
    """Load each LoRA into ``pipe`` with its library's ``load_lora_weights``, weigh them with
    ``set_adapters`` and, with ``fuse``, merge them into the weights (``fuse_lora``) and drop the
    adapters' layers (``unload_lora_weights``)."""
    names = []
    for path, _ in loras:
        name = adapter_name(path)
        pipe.load_lora_weights(os.path.dirname(os.path.abspath(path)), weight_name=os.path.basename(path),
                               adapter_name=name)
        names.append(name)
    pipe.set_adapters(names, adapter_weights=[scale for _, scale in loras])
    if fuse:
        pipe.fuse_lora(adapter_names=names)
        pipe.unload_lora_weights()


__all__ = ["adapter_name", "check_lora_files", "check_lora_targets", "check_loras", "parse_lora", "use_loras"]
