"""A diffusers folder in the other forms users hold: a weights *variant* (``save_pretrained(variant=
"fp16")``, the form most hub repositories ship) and a *single file* in the original (LDM) layout
(``v1-5-pruned-emaonly.safetensors``, what ``from_single_file`` reads), written offline from a
folder (a tiny one from :mod:`xrand.models`).

    from xrand.models.checkpoints import save_single_file, save_variant
    save_variant("tiny-sd", "tiny-sd-fp16")                  # */*.fp16.safetensors, float16 weights
    save_single_file("tiny-sd", "tiny-sd.safetensors")       # one file, float32, the original layout
    pipe = diffusers.StableDiffusionPipeline.from_single_file("tiny-sd.safetensors", config="tiny-sd")

The single file is the inverse of diffusers' own conversion (``diffusers.loaders.single_file_utils``:
``convert_ldm_unet_checkpoint``, ``convert_ldm_vae_checkpoint``, ``convert_ldm_clip_checkpoint``),
for Stable Diffusion 1.x folders (a UNet2DConditionModel, an AutoencoderKL, a CLIPTextModel) of
any size, and SDXL folders (and a CLIPTextModelWithProjection, in OpenCLIP's names:
``convert_open_clip_checkpoint`` inverted) whose second text encoder is wider than the first;
converting it back gives the folder's tensors exactly.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, List, Mapping, Tuple

from ..checks import UsageError
from ..pipelines.folder import weights_variant
from ..pipelines.recipes.stable_diffusion import TEXT_ENCODER_PREFIX, UNET_PREFIX, VAE_PREFIX
from ..pipelines.recipes.stable_diffusion_xl import SDXL_TEXT_ENCODER_2_PREFIX, SDXL_TEXT_ENCODER_PREFIX
from .folders import PathLike

#: The tiny families (xrand.models.TINY_MODELS) that convert to a single file: Stable Diffusion 1.x's,
#: and SDXL's with a text_encoder_2 wider than its text_encoder.
SINGLE_FILE_MODELS = ("sd", "sd-inpaint", "sdxl-wide")

# diffusers -> LDM names inside a UNet resnet and a VAE attention (the reverse of diffusers' renames)
_UNET_RESNET = (("norm1", "in_layers.0"), ("conv1", "in_layers.2"), ("norm2", "out_layers.0"),
                ("conv2", "out_layers.3"), ("time_emb_proj", "emb_layers.1"), ("conv_shortcut", "skip_connection"))
_VAE_ATTENTION = (("group_norm", "norm"), ("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "proj_out"))


def save_variant(folder: PathLike, out: PathLike, variant: str = "fp16", dtype: str = "float16") -> Path:
    """The folder's pipeline saved again by ``save_pretrained(out, variant=variant)`` with its
    weights in ``dtype``: every weight file named ``*.{variant}.safetensors``, no plain ones."""
    import torch
    from diffusers import DiffusionPipeline

    out = Path(out)
    if (out / "model_index.json").exists():
        raise UsageError(f"{str(out)!r} already holds a model (model_index.json); give an empty or new folder")
    pipe = DiffusionPipeline.from_pretrained(str(folder))
    pipe.to(getattr(torch, dtype)).save_pretrained(str(out), variant=variant, safe_serialization=True)
    return out


def save_single_file(folder: PathLike, path: PathLike) -> Path:
    """A Stable Diffusion 1.x or SDXL folder's weights as one safetensors file in the original
    layout (its tensors as they are: a float32 folder gives a float32 file). SDXL's layout tells
    its two text encoders apart by their width only, so an SDXL folder whose text_encoder_2 is
    not wider than its text_encoder (the tiny ``sdxl``) is refused; ``sdxl-wide`` converts."""
    from safetensors.torch import load_file, save_file

    folder, path = Path(folder), check_new_file(path)
    index = json.loads((folder / "model_index.json").read_text())
    xl = (index.get("text_encoder_2") or [None, None])[1] == "CLIPTextModelWithProjection"
    parts = {"unet": ("UNet2DConditionModel", UNET_PREFIX, _unet_rules),
             "vae": ("AutoencoderKL", VAE_PREFIX, _vae_rules),
             # the CLIP text encoder's names are the same in the original layout
             "text_encoder": ("CLIPTextModel", SDXL_TEXT_ENCODER_PREFIX if xl else TEXT_ENCODER_PREFIX, None)}
    if xl:
        parts["text_encoder_2"] = ("CLIPTextModelWithProjection", SDXL_TEXT_ENCODER_2_PREFIX, None)
    for part, (cls, _, _) in parts.items():
        if (index.get(part) or [None, None])[1] != cls:
            raise UsageError(f"{str(folder)!r} has no {cls} as its {part}: only Stable Diffusion 1.x folders "
                             "(UNet2DConditionModel, AutoencoderKL, CLIPTextModel) and SDXL folders (and "
                             "CLIPTextModelWithProjection as text_encoder_2) convert to a single file")
    if xl:
        widths = [json.loads((folder / part / "config.json").read_text())["hidden_size"]
                  for part in ("text_encoder", "text_encoder_2")]
        if widths[1] <= widths[0]:
            raise UsageError(f"{str(folder)!r}: its text_encoder_2 is {widths[1]} wide, its text_encoder {widths[0]}; "
                             "the SDXL single-file layout tells them apart by width (bigG wider than CLIP-L), so "
                             "only a wider text_encoder_2 converts (python -m xrand.models sdxl-wide)")
    state = {}
    for part, (cls, prefix, rules) in parts.items():
        renames = rules(json.loads((folder / part / "config.json").read_text())) if rules else None
        tensors = {}
        for file in sorted(f for f in (folder / part).glob("*.safetensors") if weights_variant(f.name) is None):
            tensors.update(load_file(str(file)))
        if part == "text_encoder_2":
            tensors = _open_clip(tensors)
        for key, tensor in tensors.items():
            name = _rename(key, renames, cls) if renames else key
            if part == "vae" and ".attn_1." in name and tensor.ndim == 2:
                tensor = tensor[:, :, None, None]  # the original VAE attention is 1x1 convolutions
            state[prefix + name] = tensor.contiguous()
    save_file(state, str(path), metadata={"format": "pt"})
    return path


def _open_clip(tensors: Mapping) -> dict:
    """A transformers ``CLIPTextModelWithProjection``'s tensors in OpenCLIP's names (SDXL's second
    text encoder in the original layout): the inverse of diffusers' ``convert_open_clip_checkpoint``
    (q, k and v joined into ``in_proj``, the projection transposed)."""
    import torch

    fixed = {"text_model.embeddings.position_embedding.weight": "positional_embedding",
             "text_model.embeddings.token_embedding.weight": "token_embedding.weight",
             "text_model.final_layer_norm.weight": "ln_final.weight",
             "text_model.final_layer_norm.bias": "ln_final.bias"}
    layer = (("layer_norm1", "ln_1"), ("layer_norm2", "ln_2"), ("mlp.fc1", "mlp.c_fc"), ("mlp.fc2", "mlp.c_proj"),
             ("self_attn.out_proj", "attn.out_proj"))
    out = {}
    for key, tensor in tensors.items():
        if key in fixed:
            out[fixed[key]] = tensor
        elif key == "text_projection.weight":
            out["text_projection"] = tensor.T
        elif key == "text_model.embeddings.position_ids":
            continue
        else:
            match = re.fullmatch(r"text_model\.encoder\.layers\.(\d+)\.(.*)\.(weight|bias)", key)
            if not match:
                raise UsageError(f"CLIPTextModelWithProjection weight {key!r} has no place in the OpenCLIP layout")
            i, module, kind = match.groups()
            if module in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"):
                if module == "self_attn.q_proj":
                    qkv = [tensors[f"text_model.encoder.layers.{i}.self_attn.{p}_proj.{kind}"] for p in "qkv"]
                    out[f"transformer.resblocks.{i}.attn.in_proj_{kind}"] = torch.cat(qkv)
                continue
            out[f"transformer.resblocks.{i}.{_replace_first(module + '.', layer)[:-1]}.{kind}"] = tensor
    return out


#: The attention projections a LoRA adapts, as diffusers' own LoRA training scripts target them
#: (examples/text_to_image/train_text_to_image_lora.py: to_k, to_q, to_v, to_out.0).
LORA_TARGETS = ("to_q", "to_k", "to_v", "to_out.0")


def save_lora(folder: PathLike, path: PathLike, rank: int = 4, seed: int = 0, scale: float = 0.1) -> Path:
    """A random LoRA for a folder's denoiser, its UNet (Stable Diffusion, SDXL) or its transformer
    (Flux), in the format both libraries' ``load_lora_weights`` read (diffusers'
    ``save_lora_weights``: ``unet.<module>.lora_A.weight`` (rank, in) and ``lora_B`` (out, rank), or
    ``transformer.<module>...``, for every attention projection), float32; numpy alone, offline.
    ``scale``: the entries' size (lora_B @ lora_A moves a weight by about ``scale**2 * rank``)."""
    import numpy as np
    from safetensors.numpy import save_file

    folder, path = Path(folder), check_new_file(path)
    if not str(path).endswith(".safetensors"):
        raise UsageError(f"{str(path)!r}: a LoRA file is NAME.safetensors (the adapter is called NAME)")
    denoiser = lora_denoiser(folder)
    rng = np.random.default_rng(seed)
    state = {}
    for file in sorted(f for f in (folder / denoiser).glob("*.safetensors") if weights_variant(f.name) is None):
        for name, shape in sorted(_header_shapes(file).items()):
            module = name[:-len(".weight")]
            if name.endswith(".weight") and len(shape) == 2 and module.endswith(LORA_TARGETS) and ".attn" in module:
                out_features, in_features = shape
                for part, shape in (("lora_A", (rank, in_features)), ("lora_B", (out_features, rank))):
                    values = rng.standard_normal(shape) * scale
                    state[f"{denoiser}.{module}.{part}.weight"] = values.astype(np.float32)
    if not state:
        raise UsageError(f"{str(folder)!r}: its {denoiser}/ has no attention projections ({', '.join(LORA_TARGETS)}) "
                         "to adapt")
    save_file(state, str(path), metadata={"format": "pt"})
    return path


#: The denoisers a LoRA file adapts, as each pipeline's ``load_lora_weights`` names them (its
#: ``unet_name`` / ``transformer_name``): the key prefix and the folder's component.
LORA_DENOISERS = ("unet", "transformer")


def lora_denoiser(folder: Path) -> str:
    """The component of ``folder`` a LoRA adapts: its ``unet`` or, where it has none, its ``transformer``."""
    try:
        index = json.loads((Path(folder) / "model_index.json").read_text())
    except (OSError, ValueError):
        raise UsageError(f"{str(folder)!r} has no readable model_index.json; give a diffusers folder") from None
    for part in LORA_DENOISERS:
        if isinstance(index.get(part), list) and index[part][0] is not None:
            return part
    raise UsageError(f"{str(folder)!r} ({index.get('_class_name')}) has neither of the denoisers a LoRA adapts "
                     f"({', '.join(LORA_DENOISERS)})")


def _header_shapes(file: Path) -> dict:
    """A safetensors file's tensor names and shapes, from its header."""
    import struct

    with open(file, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
    return {name: tuple(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}


def check_new_file(path: PathLike) -> Path:
    """``Path(path)``, refused where a file is there already (nothing is overwritten)."""
    if Path(path).exists():
        raise UsageError(f"{str(path)!r} exists; give a new file name")
    return Path(path)


Rules = Tuple[Mapping[str, str], List[Tuple[str, Callable[..., str]]]]  # fixed names; (pattern, LDM name) pairs


def _unet_rules(config: Mapping) -> Rules:
    """A diffusers UNet2DConditionModel's names -> LDM's (``input_blocks``, ``middle_block``, ...)."""
    from diffusers.loaders.single_file_utils import DIFFUSERS_TO_LDM_MAPPING

    per_block = config["layers_per_block"] + 1  # LDM blocks per diffusers block: its layers and a sampler
    attention_up = [t.startswith("CrossAttn") for t in config["up_block_types"]]
    fixed = dict(DIFFUSERS_TO_LDM_MAPPING["unet"]["layers"])
    if config.get("addition_embed_type"):  # SDXL's pooled text and time ids: LDM's label_emb
        fixed.update(DIFFUSERS_TO_LDM_MAPPING["unet"]["addition_embed_type"])
    return fixed, [
        (r"down_blocks\.(\d+)\.resnets\.(\d+)\.(.*)",
         lambda b, j, rest: f"input_blocks.{1 + b * per_block + j}.0.{_resnet(rest)}"),
        (r"down_blocks\.(\d+)\.attentions\.(\d+)\.(.*)",
         lambda b, j, rest: f"input_blocks.{1 + b * per_block + j}.1.{rest}"),
        (r"down_blocks\.(\d+)\.downsamplers\.0\.conv\.(.*)",
         lambda b, rest: f"input_blocks.{(b + 1) * per_block}.0.op.{rest}"),
        (r"mid_block\.resnets\.(\d+)\.(.*)",
         lambda k, rest: f"middle_block.{2 * k}.{_resnet(rest)}"),
        (r"mid_block\.attentions\.0\.(.*)",
         lambda rest: f"middle_block.1.{rest}"),
        (r"up_blocks\.(\d+)\.resnets\.(\d+)\.(.*)",
         lambda b, j, rest: f"output_blocks.{b * per_block + j}.0.{_resnet(rest)}"),
        (r"up_blocks\.(\d+)\.attentions\.(\d+)\.(.*)",
         lambda b, j, rest: f"output_blocks.{b * per_block + j}.1.{rest}"),
        (r"up_blocks\.(\d+)\.upsamplers\.0\.conv\.(.*)",
         lambda b, rest: f"output_blocks.{(b + 1) * per_block - 1}.{2 if attention_up[b] else 1}.conv.{rest}"),
    ]


def _vae_rules(config: Mapping) -> Rules:
    """A diffusers AutoencoderKL's names -> LDM's (``encoder.down.0.block.0``, ``decoder.up.1``, ...)."""
    from diffusers.loaders.single_file_utils import DIFFUSERS_TO_LDM_MAPPING

    last_up = len(config["up_block_types"]) - 1  # the LDM decoder numbers its up blocks the other way
    return DIFFUSERS_TO_LDM_MAPPING["vae"], [
        (r"encoder\.down_blocks\.(\d+)\.resnets\.(\d+)\.(.*)",
         lambda i, j, rest: f"encoder.down.{i}.block.{j}.{_shortcut(rest)}"),
        (r"encoder\.down_blocks\.(\d+)\.downsamplers\.0\.(.*)",
         lambda i, rest: f"encoder.down.{i}.downsample.{rest}"),
        (r"decoder\.up_blocks\.(\d+)\.resnets\.(\d+)\.(.*)",
         lambda i, j, rest: f"decoder.up.{last_up - i}.block.{j}.{_shortcut(rest)}"),
        (r"decoder\.up_blocks\.(\d+)\.upsamplers\.0\.(.*)",
         lambda i, rest: f"decoder.up.{last_up - i}.upsample.{rest}"),
        (r"(encoder|decoder)\.mid_block\.resnets\.(\d+)\.(.*)",
         lambda side, k, rest: f"{side}.mid.block_{k + 1}.{rest}"),
        (r"(encoder|decoder)\.mid_block\.attentions\.0\.(.*)",
         lambda side, rest: f"{side}.mid.attn_1.{_attention(rest)}"),
    ]


def _rename(key: str, rules: Rules, cls: str) -> str:
    """A diffusers weight name -> its LDM name, by the first rule that matches it."""
    fixed, patterns = rules
    if key in fixed:
        return fixed[key]
    for pattern, rename in patterns:
        match = re.fullmatch(pattern, key)
        if match:
            return rename(*(int(g) if g.isdigit() else g for g in match.groups()))
    raise UsageError(f"{cls} weight {key!r} has no place in the original layout (Stable Diffusion 1.x and SDXL "
                     "folders convert; other architectures do not)")


def _replace_first(rest: str, pairs: Tuple[Tuple[str, str], ...]) -> str:
    """``rest`` with its first name, where ``pairs`` (diffusers name, LDM name) has it, in LDM's."""
    for diffusers_name, ldm_name in pairs:
        if rest.startswith(diffusers_name + "."):
            return ldm_name + rest[len(diffusers_name):]
    return rest


def _resnet(rest: str) -> str:
    return _replace_first(rest, _UNET_RESNET)


def _shortcut(rest: str) -> str:
    return _replace_first(rest, (("conv_shortcut", "nin_shortcut"),))


def _attention(rest: str) -> str:
    return _replace_first(rest, _VAE_ATTENTION)

