"""The command line's flag for each :class:`.settings.Settings` field, written once.

:data:`FLAGS` is read three ways: :func:`add_arguments` puts the flags on a parser (``xrand
compare``, ``run``, ``sweep``), :func:`settings_values` turns the parsed flags into Settings'
fields, and :func:`settings_args` turns settings back into flags (the ``xrand compare ...``
command a report page shows and report.json keeps as ``reproduce``).
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import MISSING, dataclass, fields
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ..checks import UsageError
from .lora import format_lora, parse_lora
from .recipes import pipelines
from .schedulers import parse_option
from .settings import DTYPES, Settings


@dataclass(frozen=True)
class Flag:
    """One setting's flag. ``pairs``: a repeatable ``KEY=VALUE`` flag that makes a dict, its
    values parsed as JSON when they parse (``"json"``) or kept as text (``"text"``); ``example``
    is what its error shows. ``path``: a file or folder, written as an absolute path."""

    field: str
    flag: str
    help: str
    type: Callable[[str], Any] = str
    metavar: Optional[str] = None
    pairs: Optional[str] = None
    example: str = ""
    path: bool = False
    action: str = "store"  # "append": a repeatable flag read by ``parse`` into a tuple; "store_true": a switch
    parse: Optional[Callable[[str], Any]] = None  # one ``append`` flag's text -> an item
    format: Optional[Callable[..., str]] = None  # an item (and whether paths go absolute) -> its flag's text

    def default(self) -> Any:
        """Settings' default for the field (None for the dicts: no flag given)."""
        default = next(f.default for f in fields(Settings) if f.name == self.field)
        return None if default is MISSING else default

    def read(self, value: Any) -> Any:
        """The field's value from what the parser gave (a list of ``KEY=VALUE`` for pairs)."""
        if self.action == "append" and self.pairs is None:
            return tuple(self.parse(text) for text in value or [])
        if self.pairs is None:
            return value
        out: Dict[str, Any] = {}
        for text in value or []:
            if self.pairs == "json":
                key, item = parse_option(text, self.flag[2:].replace("-", " "), self.example)  # "call option"
            else:
                key, sep, item = (part.strip() for part in text.partition("="))
                if not sep or not key or not item:
                    raise UsageError(f"{self.flag} {text!r}: expected {self.metavar}, e.g. {self.example}")
            if key in out:
                raise UsageError(f"{self.flag} {key} is given twice ({out[key]!r} and {item!r}); give it once")
            out[key] = item
        return out

    def write(self, value: Any, absolute: bool = False) -> List[str]:
        """The flags that give the field ``value`` (none for None or an empty dict); a path made
        absolute when it exists here (a hub id stays as it is)."""
        if value is None or value == {} or value == () or value is False:
            return []
        if self.action == "store_true":
            return [self.flag]
        if self.action == "append" and self.pairs is None:
            return [part for item in value for part in (self.flag, self.format(item, absolute))]
        if self.pairs is not None:
            return [part for key, item in sorted(value.items())
                    for part in (self.flag, f"{key}={json.dumps(item) if self.pairs == 'json' else item}")]
        if self.path and absolute and os.path.exists(value):
            value = os.path.abspath(value)
        return [self.flag, repr(value) if isinstance(value, float) else str(value)]


#: Every Settings field's flag, in the order of ``--help`` and of a written command.
FLAGS: Sequence[Flag] = (
    Flag("model", "--model", "local diffusers folder or hub id (default: the embedded digits model)", path=True),
    Flag("variant", "--variant", "load the folder's weights of this variant, e.g. fp16 for "
         "unet/diffusion_pytorch_model.fp16.safetensors, as from_pretrained(variant=NAME) (default: the plain files)",
         metavar="NAME"),
    Flag("config", "--config", "--model is one file of every weight in the original layout (MODEL.safetensors, "
         "loaded by from_single_file); FOLDER is a diffusers folder of the same architecture giving the configs "
         "(offline)", metavar="FOLDER", path=True),
    Flag("loras", "--lora", "load this LoRA (repeatable; the adapter is named after the file) with each library's "
         "load_lora_weights, weighed by SCALE (default 1) through set_adapters", metavar="FILE[:SCALE]",
         action="append", parse=parse_lora, format=format_lora, path=True),
    Flag("fuse_lora", "--fuse-lora", "merge the LoRAs into the weights (fuse_lora, then unload_lora_weights)",
         action="store_true"),
    Flag("pipeline", "--pipeline", "pipeline class ({pipelines}; default: the folder's model_index.json)"),
    Flag("scheduler", "--scheduler", "scheduler class name (any case) or alias such as euler-a, dpm++-2m-sde; 'all' "
         "(compare, sweep) runs every shared scheduler; sweep takes NAME,NAME... too (default: the folder's)"),
    Flag("scheduler_options", "--scheduler-option", "scheduler config option or step() argument, VALUE parsed as "
         "JSON when it parses, e.g. use_karras_sigmas=true (repeatable)", metavar="KEY=VALUE", pairs="json",
         example="use_karras_sigmas=true"),
    Flag("steps", "--steps", "denoising steps (default {default})", type=int),
    Flag("seed", "--seed", "seed of the xrand generator (default {default})", type=int),
    Flag("batch_size", "--batch-size", "images per run (default {default})", type=int),
    Flag("eta", "--eta", "eta for schedulers whose step takes it (DDIM, TCD) in [0, 1] (default 0)", type=float),
    Flag("stream", "--stream", "noise stream: torch-cpu, torch-cuda, pcg64 (default {default})"),
    Flag("dtype", "--dtype", "model dtype: {dtypes} (default {default})"),
    Flag("noise", "--noise", "where the noise comes from: shared (default: one xrand stream on both sides) or "
         "native (each library's own generator from the seed, as its docs tell users: "
         "torch.Generator(\"cpu\").manual_seed(SEED) for diffusers, np.random.Generator(np.random.PCG64(SEED)) for "
         "mindone; compare skips the noise floor)"),
    Flag("component_dtypes", "--component-dtype", "load one component of the folder (vae, text_encoder...; not the "
         "denoiser) in its own dtype, float32, float16 or bfloat16, the same on both sides, its inputs cast to it; "
         "e.g. --dtype bfloat16 --component-dtype vae=float32 (repeatable)", metavar="NAME=DTYPE", pairs="text",
         example="vae=float32"),
    Flag("prompt", "--prompt", "text prompt (text-to-image pipelines)"),
    Flag("negative_prompt", "--negative-prompt", "negative prompt (text-to-image pipelines)"),
    Flag("guidance_scale", "--guidance-scale", "classifier-free guidance scale (text-to-image; default: the "
         "pipeline's)", type=float),
    Flag("height", "--height", "image height (text-to-image; default: the model's)", type=int),
    Flag("width", "--width", "image width (text-to-image; default: the model's)", type=int),
    # the inputs of the pipeline families beyond text to image (each pipeline says which it takes)
    Flag("prompt_2", "--prompt-2", "prompt for the second text encoder (SDXL, SD3, Flux; default: --prompt)"),
    Flag("negative_prompt_2", "--negative-prompt-2", "negative prompt for the second text encoder (SDXL, SD3, Flux)"),
    Flag("prompt_3", "--prompt-3", "prompt for SD3's T5 encoder (default: --prompt)"),
    Flag("negative_prompt_3", "--negative-prompt-3", "negative prompt for SD3's T5 encoder"),
    Flag("image", "--image", "input image (image to image, inpainting, Flux Kontext)", metavar="FILE", path=True),
    Flag("mask", "--mask", "inpainting mask (white: repaint)", metavar="FILE", path=True),
    Flag("strength", "--strength", "how far image to image and inpainting noise the input, in (0, 1]", type=float),
    Flag("frames", "--frames", "frames of a video (WanPipeline's num_frames; 4k + 1)", type=int),
    Flag("control_image", "--control-image", "a ControlNet's control image (the ControlNet pipelines' image, "
         "Flux's control_image); its conditioning scale and guidance start/end through --call-option "
         "controlnet_conditioning_scale=X, control_guidance_start=X, control_guidance_end=X", metavar="FILE",
         path=True),
    Flag("video", "--video", "input video for video to video: an animated GIF, PNG or WebP, its frames in order",
         metavar="FILE", path=True),
    Flag("call_options", "--call-option", "any other keyword of the pipeline's call, VALUE parsed as JSON when it "
         "parses, e.g. max_sequence_length=64 or use_resolution_binning=false (repeatable)", metavar="KEY=VALUE",
         pairs="json", example="max_sequence_length=64"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Every setting's flag on ``parser``; a flag not given parses to Settings' default."""
    for f in FLAGS:
        default = f.default()
        text = f.help.format(default=default, pipelines=", ".join(pipelines()), dtypes=", ".join(DTYPES))
        if f.action == "store_true":
            parser.add_argument(f.flag, dest=f.field, action="store_true", help=text)
            continue
        repeated = f.pairs is not None or f.action == "append"
        parser.add_argument(f.flag, dest=f.field, type=f.type, metavar=f.metavar,
                            action="append" if repeated else "store", default=None if repeated else default,
                            help=text)


def path_flags() -> Dict[str, str]:
    """The flags whose values are files or folders (flag -> Settings field): on another machine
    they may live at other paths."""
    return {f.flag: f.field for f in FLAGS if f.path}


def settings_values(args: argparse.Namespace) -> Dict[str, Any]:
    """Settings' fields from parsed flags (each ``KEY=VALUE`` list read into its dict)."""
    return {f.field: f.read(getattr(args, f.field)) for f in FLAGS}


def settings_args(settings: Mapping[str, Any], absolute: bool = False) -> List[str]:
    """The flags that give these settings (a dict of Settings' fields; a field that is absent or
    None is left out, so the command takes its default); ``absolute``: paths that exist here
    written as absolute paths, so that the command runs the same from any folder."""
    return [part for f in FLAGS for part in f.write(settings.get(f.field), absolute)]


__all__ = ["FLAGS", "Flag", "add_arguments", "path_flags", "settings_args", "settings_values"]
