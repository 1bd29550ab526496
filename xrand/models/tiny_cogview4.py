"""A tiny random-weight CogView4 folder (``CogView4Pipeline``), built offline.

Components: a CogView4Transformer2DModel (2 layers, 4 heads of 4, patch 2), a GLM-4 text encoder
(GlmModel: 1 layer, 32 wide; its second-to-last hidden states the caption) with a tokenizer as
GLM's (:func:`.tokenizers.write_lm_tokenizer`), an AutoencoderKL (32/64, 4 latent channels) and
CogView4's FlowMatchEulerDiscreteScheduler (dynamic shifting, linear time shift).

A tiny run: ``height=32, width=32, max_sequence_length=32``. Noise: one draw of (batch, 4, 16, 16).
"""
from __future__ import annotations

from pathlib import Path

from .folders import PathLike, new_model_folder, save, seeded_torch
from .tokenizers import lm_config_ids, write_lm_tokenizer

IMAGE_SIZE = 32
MAX_SEQUENCE_LENGTH = 32
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, max_sequence_length=MAX_SEQUENCE_LENGTH)

TEXT_WIDTH = 32
TRANSFORMER = dict(patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=4,
                   num_attention_heads=4, text_embed_dim=TEXT_WIDTH, time_embed_dim=8, condition_dim=4,
                   sample_size=IMAGE_SIZE // 2)
VAE = dict(
    sample_size=IMAGE_SIZE, in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
    block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
    up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=32,
)
TEXT_ENCODER = dict(hidden_size=TEXT_WIDTH, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=8, max_position_embeddings=512, attn_implementation="eager",
                    # mindone 0.5.0's GlmModel calls DynamicCache.get_max_length (models/glm/modeling_glm.py,
                    # _update_causal_mask), which transformers 4.57 no longer has: no cache, as an encoder needs
                    use_cache=False)
# CogView4-6B's scheduler_config.json
SCHEDULER = dict(base_image_seq_len=256, base_shift=0.25, max_shift=0.75, num_train_timesteps=1000,
                 shift_terminal=None, time_shift_type="linear", use_dynamic_shifting=True)


def build(folder: PathLike, seed: int = 0, control: bool = False) -> Path:
    """Write a random-weight ``CogView4Pipeline`` folder (safetensors) and return its path; with
    ``control``, a ``CogView4ControlPipeline`` one, whose transformer takes the control image's
    latents beside the sample's (twice the input channels)."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import (AutoencoderKL, CogView4ControlPipeline, CogView4Pipeline, CogView4Transformer2DModel,
                           FlowMatchEulerDiscreteScheduler)
    from transformers import AutoTokenizer, GlmConfig, GlmModel

    tokenizer = AutoTokenizer.from_pretrained(str(write_lm_tokenizer(folder / "tokenizer", "glm")))
    with seeded_torch(seed):
        transformer = CogView4Transformer2DModel(**dict(TRANSFORMER, in_channels=TRANSFORMER["in_channels"] * 2)
                                                 if control else TRANSFORMER)
        vae = AutoencoderKL(**VAE)
        text_encoder = GlmModel(GlmConfig(**lm_config_ids(folder / "tokenizer"), **TEXT_ENCODER))
    pipeline = CogView4ControlPipeline if control else CogView4Pipeline
    return save(pipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer,
                         scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER)), folder)


def build_control(folder: PathLike, seed: int = 0) -> Path:
    """A ``CogView4ControlPipeline`` folder (:func:`build` with ``control``)."""
    return build(folder, seed, control=True)
