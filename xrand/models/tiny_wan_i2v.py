"""A tiny random-weight Wan 2.1 image-to-video folder (``WanImageToVideoPipeline``), built offline.

Wan 2.1 I2V's form: the tiny Wan folder's UMT5 encoder, VAE and scheduler (:mod:`.tiny_wan`), a
CLIP vision encoder (2 layers, 32 wide, 32x32 pictures in 8x8 patches; its next-to-last hidden
states are the image embedding) with its CLIPImageProcessor (32 pixels), and a
WanTransformer3DModel that takes 36 channels (16 of noise, 4 of the first-frame mask, 16 of the
VAE's latents of the image followed by black frames) and the image embedding through added
key/value projections.

A tiny run: the tiny Wan call with ``max_sequence_length=512`` (the attention takes the text as
the context's last 512 tokens, whatever the call's length) and an image (any size: the pipeline resizes it to height x width).
Noise: one float32 draw of the latents, (batch, 16, 2, 4, 4) for 5 frames of 32x32; the VAE's
encoding of the image is its mode (no draw); UniPC draws none.
"""
from __future__ import annotations

from pathlib import Path

from .folders import T5_WIDTH, PathLike, new_model_folder, save, seeded_torch, t5_encoder
from .tiny_wan import CALL as WAN_CALL
from .tiny_wan import SCHEDULER, TRANSFORMER, VAE
from .tokenizers import write_t5_tokenizer

CLIP_WIDTH = 32
IMAGE_ENCODER = dict(hidden_size=CLIP_WIDTH, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
                     image_size=32, patch_size=8, projection_dim=CLIP_WIDTH)
# both libraries' WanAttnProcessor take the text as the last 512 tokens of the context, the image
# embedding as those before (transformer_wan.py): the prompt must be padded to 512 tokens
CALL = dict(WAN_CALL, max_sequence_length=512)
I2V_TRANSFORMER = dict(TRANSFORMER, in_channels=36, image_dim=CLIP_WIDTH, added_kv_proj_dim=24)


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``WanImageToVideoPipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import AutoencoderKLWan, UniPCMultistepScheduler, WanImageToVideoPipeline, WanTransformer3DModel
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel, T5TokenizerFast

    tokenizer = T5TokenizerFast.from_pretrained(str(write_t5_tokenizer(folder / "tokenizer")))
    processor = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    with seeded_torch(seed):
        transformer = WanTransformer3DModel(**I2V_TRANSFORMER)
        vae = AutoencoderKLWan(**VAE)
        text_encoder = t5_encoder(folder / "tokenizer", umt5=True)
        image_encoder = CLIPVisionModel(CLIPVisionConfig(**IMAGE_ENCODER))
    return save(WanImageToVideoPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae,
                                        scheduler=UniPCMultistepScheduler(**SCHEDULER), image_processor=processor,
                                        image_encoder=image_encoder, transformer=transformer), folder)


__all__ = ["CALL", "T5_WIDTH", "build"]
