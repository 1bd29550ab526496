"""A tiny random-weight FLUX.1-dev-like folder (``FluxPipeline``), built offline.

Components: a FluxTransformer2DModel (1 double-stream and 1 single-stream block, 2 heads of 16,
rotary axes 4/6/6, guidance embedding as FLUX.1-dev has), a CLIPTextModel (hidden 32: its pooled
output is the pooled projection), a T5 encoder (64 wide), a byte-level CLIP tokenizer and a T5
tokenizer, an AutoencoderKL with 16 latent channels and a ``shift_factor``, and FLUX.1-dev's
FlowMatchEulerDiscreteScheduler (dynamic shifting). Latents are packed 2x2 into tokens, so the
transformer's ``in_channels`` is 4 x 16 = 64 and the image side a multiple of 4 (VAE factor 2 x 2).

A tiny run: ``height=32, width=32, max_sequence_length=32`` (the pipeline's default size is
128 x VAE factor whatever the transformer, and its default 512 T5 tokens cost most of the time).
Guidance is the embedded kind (``guidance_scale`` 3.5 goes into the transformer; no second
pass). Noise: one draw of (batch, 16, 16, 16), then packed 2x2 into (batch, 64 tokens, 64).
"""
from __future__ import annotations

from pathlib import Path

from .folders import T5_WIDTH, PathLike, new_model_folder, save, seeded_torch, t5_encoder
from .tokenizers import CLIP_MAX_TOKENS, clip_text_config_ids, write_clip_tokenizer, write_t5_tokenizer

IMAGE_SIZE = 32
MAX_SEQUENCE_LENGTH = 32
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, max_sequence_length=MAX_SEQUENCE_LENGTH)

CLIP_WIDTH = 32
LATENT_CHANNELS = 16
TRANSFORMER = dict(
    patch_size=1, in_channels=4 * LATENT_CHANNELS, num_layers=1, num_single_layers=1, attention_head_dim=16,
    num_attention_heads=2, joint_attention_dim=T5_WIDTH, pooled_projection_dim=CLIP_WIDTH, guidance_embeds=True,
    axes_dims_rope=(4, 6, 6),  # sums to attention_head_dim
)
VAE = dict(
    sample_size=IMAGE_SIZE, in_channels=3, out_channels=3, latent_channels=LATENT_CHANNELS, layers_per_block=1,
    block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
    up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=32, use_quant_conv=False, use_post_quant_conv=False,
    shift_factor=0.1159, scaling_factor=0.3611,  # FLUX.1-dev's vae/config.json
)
TEXT_ENCODER = dict(
    hidden_size=CLIP_WIDTH, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
    max_position_embeddings=CLIP_MAX_TOKENS, layer_norm_eps=1e-5, projection_dim=CLIP_WIDTH, hidden_act="quick_gelu",
)
# FLUX.1-dev's scheduler_config.json
SCHEDULER = dict(num_train_timesteps=1000, shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                 base_image_seq_len=256, max_image_seq_len=4096)


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``FluxPipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import FluxPipeline

    return save(FluxPipeline(**components(folder, seed)), folder)


#: FLUX.1-Fill's and FLUX.1-Canny/Depth's transformers take more channels than they give back: the
#: packed latents (64) and the packed masked image's latents (64) and mask (the VAE's 2 x 2 pixels per
#: latent, packed 2x2: 16); the packed latents and the packed control image's latents (64).
FILL_IN_CHANNELS = 4 * LATENT_CHANNELS * 2 + 4 * 2 * 2
CONTROL_IN_CHANNELS = 4 * LATENT_CHANNELS * 2


def build_fill(folder: PathLike, seed: int = 0) -> Path:
    """A ``FluxFillPipeline`` folder: the tiny Flux folder with a transformer of
    :data:`FILL_IN_CHANNELS` input channels (FLUX.1-Fill-dev's shape)."""
    return _build_wider("FluxFillPipeline", FILL_IN_CHANNELS, folder, seed)


def build_control(folder: PathLike, seed: int = 0) -> Path:
    """A ``FluxControlPipeline`` folder (also ``FluxControlImg2ImgPipeline``'s and
    ``FluxControlInpaintPipeline``'s): a transformer of :data:`CONTROL_IN_CHANNELS` input channels
    (FLUX.1-Canny-dev's shape), the control image's latents beside the sample's."""
    return _build_wider("FluxControlPipeline", CONTROL_IN_CHANNELS, folder, seed)


def _build_wider(pipeline: str, in_channels: int, folder: PathLike, seed: int) -> Path:
    folder, seed = new_model_folder(folder, seed)
    import diffusers

    parts = components(folder, seed)
    with seeded_torch(seed + 1):
        parts["transformer"] = diffusers.FluxTransformer2DModel(**dict(
            TRANSFORMER, in_channels=in_channels, out_channels=4 * LATENT_CHANNELS))
    return save(getattr(diffusers, pipeline)(**parts), folder)


def components(folder: Path, seed: int) -> dict:
    """The pipeline's arguments: its components drawn from ``seed`` (the tokenizers written in ``folder``)."""
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, FluxTransformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer, T5TokenizerFast

    tokenizer = CLIPTokenizer.from_pretrained(str(write_clip_tokenizer(folder / "tokenizer")))
    tokenizer_2 = T5TokenizerFast.from_pretrained(str(write_t5_tokenizer(folder / "tokenizer_2")))
    with seeded_torch(seed):
        transformer = FluxTransformer2DModel(**TRANSFORMER)
        vae = AutoencoderKL(**VAE)
        text_encoder = CLIPTextModel(CLIPTextConfig(**clip_text_config_ids(), **TEXT_ENCODER))
        text_encoder_2 = t5_encoder(folder / "tokenizer_2")
    return dict(scheduler=FlowMatchEulerDiscreteScheduler(**SCHEDULER), vae=vae, text_encoder=text_encoder,
                tokenizer=tokenizer, text_encoder_2=text_encoder_2, tokenizer_2=tokenizer_2, transformer=transformer)
