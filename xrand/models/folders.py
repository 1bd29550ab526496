"""What every tiny-model builder shares: a folder that holds no model yet, weights drawn from a
seed without touching torch's global RNG, and saving as safetensors (mindone reads no other format)."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator, Union

from ..checks import UsageError, check_seed

PathLike = Union[str, "os.PathLike[str]"]


def new_model_folder(folder: PathLike, seed: int) -> tuple[Path, int]:
    """``(Path(folder), seed)`` once both are checked; a folder that already holds a model is refused."""
    seed = check_seed(seed)
    folder = Path(folder)
    if (folder / "model_index.json").exists():
        raise UsageError(f"{str(folder)!r} already holds a model (model_index.json); give an empty or new folder")
    return folder, seed


@contextlib.contextmanager
def seeded_torch(seed: int) -> Iterator[None]:
    """torch's CPU RNG seeded with ``seed`` inside the block and as it was after it, so the
    same seed writes the same weights on every machine and the caller's RNG stream goes on."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def save(pipeline, folder: Path) -> Path:
    """``pipeline.save_pretrained(folder)`` with safetensors weights; returns ``folder``."""
    pipeline.save_pretrained(str(folder), safe_serialization=True)
    return folder


# The T5 (SD3, Flux, PixArt) and UMT5 (Wan) text encoders of the tiny folders: 2 layers, 64 wide,
# T5 v1.1's gated GELU feed-forward, as the real encoders (T5-XXL v1.1, UMT5-XXL) have.
T5_WIDTH = 64
T5_ENCODER = dict(
    d_model=T5_WIDTH, d_kv=16, d_ff=64, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
    relative_attention_max_distance=16, feed_forward_proj="gated-gelu", dropout_rate=0.0,
)


def t5_encoder(tokenizer_folder: Path, umt5: bool = False):
    """A random-weight ``T5EncoderModel`` (or ``UMT5EncoderModel``) sized for the tokenizer in
    ``tokenizer_folder``; call it inside :func:`seeded_torch`."""
    from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

    from .tokenizers import t5_config_ids

    config_class, model_class = (UMT5Config, UMT5EncoderModel) if umt5 else (T5Config, T5EncoderModel)
    return model_class(config_class(**t5_config_ids(tokenizer_folder), **T5_ENCODER))


# The Gemma-2 text encoder of the tiny Sana and Lumina 2 folders: 1 layer, 8 wide.
GEMMA_WIDTH = 8
GEMMA2_ENCODER = dict(head_dim=16, hidden_size=GEMMA_WIDTH, intermediate_size=64, max_position_embeddings=512,
                      num_attention_heads=2, num_hidden_layers=1, num_key_value_heads=2, attn_implementation="eager")


def gemma2_encoder(tokenizer_folder: Path):
    """A random-weight ``Gemma2Model`` sized for the tokenizer in ``tokenizer_folder``; call it
    inside :func:`seeded_torch`."""
    from transformers import Gemma2Config, Gemma2Model

    from .tokenizers import lm_config_ids

    return Gemma2Model(Gemma2Config(**lm_config_ids(tokenizer_folder), **GEMMA2_ENCODER))
