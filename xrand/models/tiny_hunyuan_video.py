"""A tiny random-weight HunyuanVideo text-to-video folder (``HunyuanVideoPipeline``), built offline.

Components: a HunyuanVideoTransformer3DModel (1 dual-stream and 1 single-stream block, 1 token
refiner block, 2 heads of 10, patch 1x1x1, rotary axes 2/4/4, guidance embedding), a Llama text
encoder (LlamaModel: 3 layers, 16 wide; the pipeline reads its third-to-last hidden states) with a
tokenizer as Llama 3's (:func:`.tokenizers.write_lm_tokenizer`), a CLIPTextModel (8 wide: its
pooled output is the pooled projection) with the byte-level CLIP tokenizer, an
AutoencoderKLHunyuanVideo (width 8, 4 latent channels, 8x spatial and 4x temporal compression) and
HunyuanVideo's FlowMatchEulerDiscreteScheduler (shift 7). Latents are 5-D:
(batch, 4, (num_frames - 1) / 4 + 1, height / 8, width / 8).

A tiny run: ``height=32, width=32, num_frames=5, max_sequence_length=32`` (height and width
multiples of 16, pipeline_hunyuan_video.py check_inputs). The pipeline wraps the prompt in its
chat template and drops the template's first 95 tokens (its ``crop_start``) from the Llama
output. Guidance is the embedded kind (``guidance_scale`` 6 goes into the transformer; a second
pass only with a negative prompt and ``true_cfg_scale`` > 1). Noise: one float32 draw of
(batch, 4, 2, 4, 4) for 5 frames of 32x32.
"""
from __future__ import annotations

from pathlib import Path

from .folders import PathLike, new_model_folder, save, seeded_torch
from .tokenizers import CLIP_MAX_TOKENS, clip_text_config_ids, lm_config_ids, write_clip_tokenizer, write_lm_tokenizer

IMAGE_SIZE = 32
NUM_FRAMES = 5
MAX_SEQUENCE_LENGTH = 32
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, num_frames=NUM_FRAMES, max_sequence_length=MAX_SEQUENCE_LENGTH)

LLAMA_WIDTH = 16
CLIP_WIDTH = 8
TRANSFORMER = dict(
    in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=10, num_layers=1, num_single_layers=1,
    num_refiner_layers=1, patch_size=1, patch_size_t=1, guidance_embeds=True, text_embed_dim=LLAMA_WIDTH,
    pooled_projection_dim=CLIP_WIDTH, rope_axes_dim=(2, 4, 4),  # sums to attention_head_dim
)
VAE = dict(
    in_channels=3, out_channels=3, latent_channels=4, down_block_types=("HunyuanVideoDownBlock3D",) * 4,
    up_block_types=("HunyuanVideoUpBlock3D",) * 4, block_out_channels=(8, 8, 8, 8), layers_per_block=1,
    norm_num_groups=4, scaling_factor=0.476986, spatial_compression_ratio=8, temporal_compression_ratio=4,
    mid_block_add_attention=True,
)
# 3 layers: the pipeline takes hidden_states[-3] (num_hidden_layers_to_skip=2), the first layer's output
TEXT_ENCODER = dict(hidden_size=LLAMA_WIDTH, intermediate_size=32, num_hidden_layers=3, num_attention_heads=4,
                    num_key_value_heads=2, max_position_embeddings=512, attn_implementation="eager", use_cache=False)
TEXT_ENCODER_2 = dict(
    hidden_size=CLIP_WIDTH, intermediate_size=37, num_attention_heads=2, num_hidden_layers=2,
    max_position_embeddings=CLIP_MAX_TOKENS, layer_norm_eps=1e-5, projection_dim=CLIP_WIDTH, hidden_act="quick_gelu",
)
# hunyuanvideo-community/HunyuanVideo's scheduler_config.json
SCHEDULER = dict(num_train_timesteps=1000, shift=7.0)


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``HunyuanVideoPipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import (AutoencoderKLHunyuanVideo, FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline,
                           HunyuanVideoTransformer3DModel)
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer, LlamaConfig, LlamaModel, LlamaTokenizerFast

    tokenizer = LlamaTokenizerFast.from_pretrained(str(write_lm_tokenizer(folder / "tokenizer", "llama")))
    tokenizer_2 = CLIPTokenizer.from_pretrained(str(write_clip_tokenizer(folder / "tokenizer_2")))
    with seeded_torch(seed):
        transformer = HunyuanVideoTransformer3DModel(**TRANSFORMER)
        vae = AutoencoderKLHunyuanVideo(**VAE)
        text_encoder = LlamaModel(LlamaConfig(**lm_config_ids(folder / "tokenizer"), **TEXT_ENCODER))
        text_encoder_2 = CLIPTextModel(CLIPTextConfig(**clip_text_config_ids(), **TEXT_ENCODER_2))
    return save(HunyuanVideoPipeline(text_encoder=text_encoder, tokenizer=tokenizer, transformer=transformer, vae=vae,
                                     scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER),
                                     text_encoder_2=text_encoder_2, tokenizer_2=tokenizer_2), folder)
