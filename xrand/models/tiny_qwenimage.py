"""A tiny random-weight Qwen-Image folder (``QwenImagePipeline``), built offline.

Components: a QwenImageTransformer2DModel (1 block, 2 heads of 16, patch 2, 3-axis rotary
embedding 8/4/4), a Qwen2.5-VL text encoder (2 layers, 16 wide; its hidden states the prompt's
embedding, the chat template's first 34 tokens dropped, as the pipeline does) with a Qwen2
tokenizer (:func:`.tokenizers.write_lm_tokenizer`), an AutoencoderKLQwenImage (Wan's causal 3-D
VAE, 4 latent channels, 4x spatial downsampling) and a FlowMatchEulerDiscreteScheduler.

A tiny run: ``height=32, width=32, max_sequence_length=16`` (``true_cfg_scale`` left at 4 with
no negative prompt: no guidance). Noise: one draw of (batch, 1, 4, 8, 8) (5-D), packed 2x2.
"""
from __future__ import annotations

from pathlib import Path

from .folders import PathLike, new_model_folder, save, seeded_torch
from .tokenizers import lm_config_ids, write_lm_tokenizer

IMAGE_SIZE = 32
MAX_SEQUENCE_LENGTH = 16
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, max_sequence_length=MAX_SEQUENCE_LENGTH)
TEXT_WIDTH = 16

TRANSFORMER = dict(patch_size=2, in_channels=16, out_channels=4, num_layers=1, attention_head_dim=16,
                   num_attention_heads=2, joint_attention_dim=TEXT_WIDTH, guidance_embeds=False,
                   axes_dims_rope=(8, 4, 4))
VAE = dict(base_dim=24, z_dim=4, dim_mult=[1, 2, 4], num_res_blocks=1, temperal_downsample=[False, True],
           latents_mean=[0.0] * 4, latents_std=[1.0] * 4)
TEXT_CONFIG = dict(hidden_size=TEXT_WIDTH, intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
                   num_key_value_heads=2, rope_scaling={"mrope_section": [1, 1, 2], "rope_type": "default",
                                                        "type": "default"}, rope_theta=1000000.0)
VISION_CONFIG = dict(depth=1, hidden_size=16, intermediate_size=16, num_heads=2, out_hidden_size=TEXT_WIDTH)


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``QwenImagePipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import (AutoencoderKLQwenImage, FlowMatchEulerDiscreteScheduler, QwenImagePipeline,
                           QwenImageTransformer2DModel)
    from transformers import AutoTokenizer, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    tokenizer = AutoTokenizer.from_pretrained(str(write_lm_tokenizer(folder / "tokenizer", "qwen2")))
    ids = lm_config_ids(folder / "tokenizer")
    config = Qwen2_5_VLConfig(text_config=dict(TEXT_CONFIG, **ids), vision_config=VISION_CONFIG,
                              hidden_size=TEXT_WIDTH, **ids)
    with seeded_torch(seed):
        transformer = QwenImageTransformer2DModel(**TRANSFORMER)
        vae = AutoencoderKLQwenImage(**VAE)
        text_encoder = Qwen2_5_VLForConditionalGeneration(config)
    return save(QwenImagePipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer,
                                  scheduler=FlowMatchEulerDiscreteScheduler()), folder)
