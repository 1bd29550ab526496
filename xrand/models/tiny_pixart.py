"""A tiny random-weight PixArt-Sigma folder (``PixArtSigmaPipeline``), built offline.

Components: a PixArtTransformer2DModel (2 blocks, 4 heads of 8, patch 2, adaLN-single, learned
sigma: 8 output channels for 4 latent ones), a T5 encoder (64 wide, projected to the
transformer's 32 by its caption projection), a T5 tokenizer, an AutoencoderKL (32/64, 4 latent
channels) and PixArt-Sigma's DPMSolverMultistepScheduler settings.

A tiny run: ``height=32, width=32, max_sequence_length=32, use_resolution_binning=False,
clean_caption=False``. Resolution binning would snap 32x32 to the nearest of PixArt's
aspect-ratio bins (256 pixels and up); caption cleaning needs bs4 and ftfy and otherwise warns
and turns itself off, so a run should not depend on what is installed.
Noise: one draw of the latents, (batch, 4, 16, 16); DPMSolverMultistepScheduler's ``step``
draws more only with its SDE algorithm types.
"""
from __future__ import annotations

from pathlib import Path

from .folders import T5_WIDTH, PathLike, new_model_folder, save, seeded_torch, t5_encoder
from .tokenizers import write_t5_tokenizer

IMAGE_SIZE = 32
MAX_SEQUENCE_LENGTH = 32
CALL = dict(height=IMAGE_SIZE, width=IMAGE_SIZE, max_sequence_length=MAX_SEQUENCE_LENGTH,
            use_resolution_binning=False, clean_caption=False)

TRANSFORMER = dict(
    sample_size=IMAGE_SIZE // 2, num_layers=2, patch_size=2, attention_head_dim=8, num_attention_heads=4,
    caption_channels=T5_WIDTH, in_channels=4, out_channels=8, cross_attention_dim=32, attention_bias=True,
    activation_fn="gelu-approximate", num_embeds_ada_norm=1000, norm_type="ada_norm_single",
    norm_elementwise_affine=False, norm_eps=1e-6,
)
VAE = dict(
    sample_size=IMAGE_SIZE, in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
    block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
    up_block_types=("UpDecoderBlock2D",) * 2, norm_num_groups=32,
)
# PixArt-Sigma-XL-2-1024-MS's scheduler_config.json
SCHEDULER = dict(beta_start=0.0001, beta_end=0.02, beta_schedule="linear", num_train_timesteps=1000,
                 prediction_type="epsilon", solver_order=2, algorithm_type="dpmsolver++", lower_order_final=True)


def build(folder: PathLike, seed: int = 0) -> Path:
    """Write a random-weight ``PixArtSigmaPipeline`` folder (safetensors) and return its path."""
    folder, seed = new_model_folder(folder, seed)
    from diffusers import AutoencoderKL, DPMSolverMultistepScheduler, PixArtSigmaPipeline, PixArtTransformer2DModel
    from transformers import T5TokenizerFast

    tokenizer = T5TokenizerFast.from_pretrained(str(write_t5_tokenizer(folder / "tokenizer")))
    with seeded_torch(seed):
        transformer = PixArtTransformer2DModel(**TRANSFORMER)
        vae = AutoencoderKL(**VAE)
        text_encoder = t5_encoder(folder / "tokenizer")
    return save(PixArtSigmaPipeline(tokenizer=tokenizer, text_encoder=text_encoder, vae=vae, transformer=transformer,
                                    scheduler=DPMSolverMultistepScheduler(**SCHEDULER)), folder)
