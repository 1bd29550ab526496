"""A tiny random-weight Stable Diffusion XL folder (``StableDiffusionXLPipeline``), built offline.

Components: a UNet2DConditionModel with SDXL's added conditioning ("text_time": the second text
encoder's pooled embedding and six time ids), two CLIP text encoders (a ``CLIPTextModel`` and a
``CLIPTextModelWithProjection``, hidden 32 each, so cross-attention is 64 wide), two byte-level
CLIP tokenizers, an AutoencoderKL (32/64 channels, 4 latent channels) and SDXL's
EulerDiscreteScheduler settings.

A tiny run: ``height=32, width=32`` (the default: UNet sample 16 x VAE factor 2).
Noise: one draw of the latents, (batch, 4, 16, 16); Euler's ``step`` draws more only with
``s_churn`` > 0.
"""
from __future__ import annotations

from pathlib import Path

from .folders import PathLike, new_model_folder, save, seeded_torch
from .tokenizers import CLIP_MAX_TOKENS, clip_text_config_ids, write_clip_tokenizer

IMAGE_SIZE = 32
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE)

TEXT_WIDTH = 32  # each text encoder's hidden size; the UNet cross-attends to both, concatenated
TIME_EMBED = 8  # addition_time_embed_dim: each of the 6 time ids embedded this wide
UNET = dict(
    sample_size=IMAGE_SIZE // 2, in_channels=4, out_channels=4, layers_per_block=1,
    block_out_channels=(32, 64), down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
    up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), attention_head_dim=(2, 4), use_linear_projection=True,
    cross_attention_dim=2 * TEXT_WIDTH, addition_embed_type="text_time", addition_time_embed_dim=TIME_EMBED,
    # pooled text embedding (text_encoder_2's projection) + 6 time ids
    projection_class_embeddings_input_dim=TEXT_WIDTH + 6 * TIME_EMBED, norm_num_groups=32,
)
VAE = dict(
    sample_size=IMAGE_SIZE, in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
    block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
    up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=32, scaling_factor=0.13025,
)
TEXT_ENCODER = dict(
    hidden_size=TEXT_WIDTH, intermediate_size=37, num_attention_heads=4, num_hidden_layers=2,
    max_position_embeddings=CLIP_MAX_TOKENS, layer_norm_eps=1e-5, projection_dim=TEXT_WIDTH, hidden_act="gelu",
)
# stable-diffusion-xl-base-1.0's scheduler_config.json
SCHEDULER = dict(
    beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", num_train_timesteps=1000,
    steps_offset=1, timestep_spacing="leading", interpolation_type="linear", prediction_type="epsilon",
)


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``StableDiffusionXLPipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import StableDiffusionXLPipeline

    return save(StableDiffusionXLPipeline(**components(folder, seed)), folder)


def build_pix2pix(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``StableDiffusionXLInstructPix2PixPipeline`` folder: the UNet takes 8
    channels (noisy latents and the input image's latents)."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import StableDiffusionXLInstructPix2PixPipeline, UNet2DConditionModel

    parts = components(folder, seed)
    with seeded_torch(seed + 1):
        parts["unet"] = UNet2DConditionModel(**dict(UNET, in_channels=8))
    return save(StableDiffusionXLInstructPix2PixPipeline(**parts), folder)


#: text_encoder_2's width in the ``sdxl-wide`` folder: wider than text_encoder's, as OpenCLIP
#: bigG (1280) is wider than CLIP-L (768) in SDXL; the single-file layout tells the two apart by it.
WIDE_TEXT_WIDTH = 48


def build_wide(folder: PathLike, seed: int = 0) -> Path:
    """The tiny SDXL folder with a wider second text encoder (hidden and projection
    ``WIDE_TEXT_WIDTH``; the UNet cross-attends at 32 + 48 and takes a 48-wide pooled embedding):
    the form that converts to an SDXL single file (xrand.models.checkpoints.save_single_file)."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import StableDiffusionXLPipeline

    return save(StableDiffusionXLPipeline(**components(folder, seed, WIDE_TEXT_WIDTH)), folder)


def components(folder: Path, seed: int, text_width_2: int = TEXT_WIDTH) -> dict:
    """The pipeline's arguments: its components drawn from ``seed`` (the tokenizers written in
    ``folder``), no watermarker; ``text_width_2``: the second text encoder's width."""
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    tokenizer = CLIPTokenizer.from_pretrained(str(write_clip_tokenizer(folder / "tokenizer")))
    tokenizer_2 = CLIPTokenizer.from_pretrained(str(write_clip_tokenizer(folder / "tokenizer_2")))
    config = CLIPTextConfig(**clip_text_config_ids(), **TEXT_ENCODER)
    config_2 = CLIPTextConfig(**clip_text_config_ids(), **{**TEXT_ENCODER, "hidden_size": text_width_2,
                                                           "projection_dim": text_width_2})
    unet_config = {**UNET, "cross_attention_dim": TEXT_WIDTH + text_width_2,
                   "projection_class_embeddings_input_dim": text_width_2 + 6 * TIME_EMBED}
    with seeded_torch(seed):
        unet = UNet2DConditionModel(**unet_config)
        vae = AutoencoderKL(**VAE)
        text_encoder = CLIPTextModel(config)
        text_encoder_2 = CLIPTextModelWithProjection(config_2)
    return dict(vae=vae, text_encoder=text_encoder, text_encoder_2=text_encoder_2, tokenizer=tokenizer,
                tokenizer_2=tokenizer_2, unet=unet, scheduler=EulerDiscreteScheduler(**SCHEDULER),
                add_watermarker=False)
