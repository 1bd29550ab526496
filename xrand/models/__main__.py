"""``python -m xrand.models NAME FOLDER [--seed N]``: write one tiny random-weight family folder.

NAME is a key of :data:`xrand.models.TINY_MODELS` (sd, sd-inpaint, sdxl, sd3, flux, pixart, wan, ltx).
Prints the folder, the pipeline classes that load it and the arguments a tiny run needs.
Exit status 2 with one line for bad input, as the ``xrand`` command.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ..checks import UsageError
from . import TINY_MODELS, build_tiny


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xrand.models",
                                     description="Write a tiny random-weight pipeline folder, offline.")
    parser.add_argument("name", help=f"one of {', '.join(TINY_MODELS)}")
    parser.add_argument("folder", help="an empty or new folder")
    parser.add_argument("--seed", type=int, default=0, help="fixes every weight (default 0)")
    args = parser.parse_args(argv)
    try:
        folder = build_tiny(args.name, args.folder, seed=args.seed)
    except UsageError as exc:
        print(f"python -m xrand.models: error: {exc}", file=sys.stderr)
        return 2
    model = TINY_MODELS[args.name]
    print(f"{folder}: {', '.join(model.pipelines)}; a tiny run's call arguments: "
          f"{', '.join(f'{k}={v!r}' for k, v in model.call.items())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
