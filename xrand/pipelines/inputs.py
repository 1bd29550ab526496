"""A pipeline's input files (``--image``, ``--mask``, ``--control-image``, ``--video``): read,
checked and digested once per file version.

Both sides get the same picture: the file decoded by Pillow, an image as RGB (an alpha channel
or a palette would give the image processors other channel counts), a mask as one channel
(``L``; white repaints) and a ControlNet's control image as RGB, a video (an animated GIF, PNG or WebP) as its frames, each RGB.
What makes two runs comparable
is the file's content, not its path (side files travel between machines), so each file is known
by the sha256 of its bytes.
"""
from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass, field
from typing import Any

from ..checks import UsageError

#: The pipeline inputs a run's settings carry (``Settings.INPUTS``): text to image's, then those of
#: the families beyond it (a second and third prompt, an input image and mask, strength, frames, a
#: ControlNet's control image).
TEXT_INPUTS = ("prompt", "negative_prompt", "guidance_scale", "height", "width")
FAMILY_INPUTS = ("prompt_2", "negative_prompt_2", "prompt_3", "negative_prompt_3", "image", "mask", "strength",
                 "frames", "control_image", "video")
INPUTS = TEXT_INPUTS + FAMILY_INPUTS

#: Pillow's mode for each input file: what both libraries' image processors are given.
MODES = {"image": "RGB", "mask": "L", "control_image": "RGB", "video": "RGB"}
#: The inputs whose file holds frames (a list of pictures: what the video-to-video calls take).
FRAMES = ("video",)


@dataclass(frozen=True)
class InputFile:
    """One input file: its path, the sha256 of its bytes, its size in pixels and the decoded picture."""

    path: str
    digest: str
    size: tuple  # (width, height)
    picture: Any = field(repr=False)  # a video's: a tuple of frames

    def image(self) -> Any:
        """A copy of the picture (a video's frames, as a list) for one run (a pipeline gets its own object)."""
        if isinstance(self.picture, tuple):
            return [frame.copy() for frame in self.picture]
        return self.picture.copy()


def read_input(name: str, path: str) -> InputFile:
    """The file given as input ``name`` (``"image"``, ``"mask"``, ``"control_image"`` or ``"video"``), decoded;
    ``UsageError`` naming the file and why when it is missing or not a picture Pillow reads."""
    flag = "--" + name.replace("_", "-")
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise UsageError(f"{flag} {path!r} cannot be read: {exc.strerror or exc}; give an image file "
                         "(PNG, JPEG, WebP...)") from None
    return _read(name, os.path.realpath(path), path, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _read(name: str, real: str, path: str, size: int, mtime_ns: int) -> InputFile:
    """Read once per file version (both sides of a comparison and every run read the same file)."""
    from PIL import Image, ImageSequence, UnidentifiedImageError

    flag = "--" + name.replace("_", "-")
    try:
        with open(real, "rb") as f:
            data = f.read()
        with Image.open(real) as opened:
            if name in FRAMES:  # every frame of an animated file (one for a still picture)
                picture = tuple(frame.convert(MODES[name]) for frame in ImageSequence.Iterator(opened))
            else:
                picture = opened.convert(MODES[name])
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        raise UsageError(f"{flag} {path!r} is not an image file Pillow can read ({type(exc).__name__}); "
                         "give a PNG, JPEG or WebP file") from None
    size = picture[0].size if isinstance(picture, tuple) else picture.size
    return InputFile(path=path, digest="sha256:" + hashlib.sha256(data).hexdigest(), size=size,
                     picture=picture)
