"""A tiny random-weight Stable Diffusion folder, built offline for tests and comparisons.

``build_tiny_sd(folder)`` writes what ``StableDiffusionPipeline.from_pretrained(folder)`` reads in
both diffusers and mindone.diffusers: a UNet2DConditionModel (32/64 channels, cross-attention 32),
an AutoencoderKL (32/64), a CLIPTextModel (hidden 32) and a byte-level CLIPTokenizer, with
safetensors weights (mindone reads no other format). Nothing is downloaded: the tokenizer's
vocabulary is CLIP's 256 byte symbols, their end-of-word forms and the two special tokens, with
no BPE merges, so any prompt tokenizes (one token per byte). The weights are random, drawn
from ``seed`` in a forked torch RNG (torch's global RNG is left as it was), so the same seed
writes the same weights on every machine.

    from xrand.models.tiny_sd import build_tiny_sd
    folder = build_tiny_sd("/tmp/tiny-sd", seed=0)
    pipe = diffusers.StableDiffusionPipeline.from_pretrained(folder)
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Dict, Union

from ..checks import UsageError, check_seed

#: Image side in pixels the folder is meant for (latents are half of it: the VAE has two blocks).
IMAGE_SIZE = 32
BOS, EOS = "<|startoftext|>", "<|endoftext|>"
MAX_TOKENS = 77  # CLIP's context length, as the pipelines pad every prompt to it

UNET = dict(
    sample_size=IMAGE_SIZE // 2, in_channels=4, out_channels=4, layers_per_block=1,
    block_out_channels=(32, 64), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=32, attention_head_dim=8,
    norm_num_groups=32,
)
VAE = dict(
    sample_size=IMAGE_SIZE, in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
    block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
    up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=32,
)
TEXT_ENCODER = dict(
    hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
    max_position_embeddings=MAX_TOKENS, layer_norm_eps=1e-5, projection_dim=32,
)
# Stable Diffusion 1.x's scheduler settings (its scheduler_config.json).
SCHEDULER = dict(
    beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
    skip_prk_steps=True, set_alpha_to_one=False, steps_offset=1,
)


def byte_vocab() -> Dict[str, int]:
    """CLIP's byte-level vocabulary without merges: 256 byte symbols, their ``</w>`` forms, BOS, EOS.

    The byte-to-symbol table is GPT-2's/CLIP's ``bytes_to_unicode``
    (transformers/models/clip/tokenization_clip.py): printable bytes map to themselves, the
    others to code points from 256 up.
    """
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    codes, extra = list(printable), 0
    for b in range(256):
        if b not in printable:
            codes.append(256 + extra)
            extra += 1
    order = printable + [b for b in range(256) if b not in printable]
    symbols = [chr(c) for _, c in sorted(zip(order, codes))]
    vocab = {s: i for i, s in enumerate(symbols)}
    vocab.update({s + "</w>": 256 + i for i, s in enumerate(symbols)})
    vocab[BOS], vocab[EOS] = 512, 513
    return vocab


def _write_tokenizer(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(byte_vocab(), ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    from transformers import CLIPTokenizer

    tokenizer = CLIPTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"),
                              model_max_length=MAX_TOKENS, pad_token=EOS)
    tokenizer.save_pretrained(str(folder))


def build_tiny_sd(folder: Union[str, "os.PathLike[str]"], seed: int = 0) -> Path:
    """Write a random-weight ``StableDiffusionPipeline`` folder (safetensors) and return its path.

    ``seed`` fixes every weight; the folder may exist but must not hold a model_index.json.
    Needs torch, diffusers and transformers. The images it makes are noise, but the same noise
    in both libraries, which is what a comparison needs.
    """
    seed = check_seed(seed)
    folder = Path(folder)
    if (folder / "model_index.json").exists():
        raise UsageError(f"{str(folder)!r} already holds a model (model_index.json); give an empty or new folder")
    import torch
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    _write_tokenizer(folder / "tokenizer")
    tokenizer = CLIPTokenizer.from_pretrained(str(folder / "tokenizer"))
    vocab = byte_vocab()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        unet = UNet2DConditionModel(**UNET)
        vae = AutoencoderKL(**VAE)
        text_encoder = CLIPTextModel(CLIPTextConfig(
            vocab_size=len(vocab), bos_token_id=vocab[BOS], eos_token_id=vocab[EOS], pad_token_id=vocab[EOS],
            **TEXT_ENCODER))
    pipe = StableDiffusionPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet, scheduler=PNDMScheduler(**SCHEDULER),
        safety_checker=None, feature_extractor=None, requires_safety_checker=False)
    pipe.save_pretrained(str(folder), safe_serialization=True)
    return folder
