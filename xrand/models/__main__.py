"""``python -m xrand.models NAME FOLDER [--seed N] [--variant V | --single-file FILE]``: write one
tiny random-weight family folder.

NAME is a key of :data:`xrand.models.TINY_MODELS` (sd, sd-inpaint, sdxl, sdxl-wide, sd3, flux, pixart, ...).
``--variant fp16`` writes the folder as hub repositories ship it (``save_pretrained(variant=
"fp16")``, float16 weights); ``--single-file FILE`` writes the folder and its weights as FILE,
one safetensors file in the original layout (Stable Diffusion 1.x: ``sd``, ``sd-inpaint``; SDXL:
``sdxl-wide``, whose second text encoder is wider than its first, as the layout needs).
Prints the folder, the pipeline classes that load it and the arguments a tiny run needs.
Exit status 2 with one line for bad input, as the ``xrand`` command.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from typing import List, Optional

from ..checks import UsageError
from ..pipelines.folder import check_variant
from . import TINY_MODELS, build_tiny


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xrand.models",
                                     description="Write a tiny random-weight pipeline folder, offline.")
    parser.add_argument("name", help=f"one of {', '.join(TINY_MODELS)}")
    parser.add_argument("folder", help="an empty or new folder")
    parser.add_argument("--seed", type=int, default=0, help="fixes every weight (default 0)")
    form = parser.add_mutually_exclusive_group()
    form.add_argument("--variant", metavar="V", help="save the weights as this variant in float16 (e.g. fp16): "
                                                     "*/*.V.safetensors, no plain weight files")
    form.add_argument("--single-file", metavar="FILE", help="also write the weights as FILE, one safetensors file "
                                                            "in the original layout (sd, sd-inpaint, sdxl-wide)")
    args = parser.parse_args(argv)
    try:
        folder = _build(args)
    except UsageError as exc:
        print(f"python -m xrand.models: error: {exc}", file=sys.stderr)
        return 2
    model = TINY_MODELS[args.name]
    if args.single_file:
        print(f"{args.single_file}: the weights of {folder} in one file; xrand compare --model {args.single_file} "
              f"--config {folder}")
    print(f"{folder}: {', '.join(model.pipelines)}; a tiny run's call arguments: "
          f"{', '.join(f'{k}={v!r}' for k, v in model.call.items())}")
    return 0


def _build(args: argparse.Namespace):
    from .checkpoints import SINGLE_FILE_MODELS, check_new_file, save_single_file, save_variant

    if args.single_file:
        if args.name not in SINGLE_FILE_MODELS:
            raise UsageError(f"--single-file writes the original layout of Stable Diffusion 1.x and SDXL (with text "
                             f"encoders of two widths): {', '.join(SINGLE_FILE_MODELS)}, "
                             f"not {args.name}")
        check_new_file(args.single_file)
    if args.variant is None:
        folder = build_tiny(args.name, args.folder, seed=args.seed)
        if args.single_file:
            save_single_file(folder, args.single_file)
        return folder
    check_variant(args.variant)
    with tempfile.TemporaryDirectory() as plain:
        return save_variant(build_tiny(args.name, plain, seed=args.seed), args.folder, args.variant)


if __name__ == "__main__":
    sys.exit(main())
