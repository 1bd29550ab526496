"""Measure what makes a family's float32 difference larger than torch's own floor: the tiny
folder compared with the noise floor as mindone runs, then with two MindSpore-side differences
removed in turn, then both. The causes xrand/compare/known.py names come from this.

    python scripts/known_causes.py [flux ltx sd3 ...]

- attention: mindone's ``scaled_dot_product_attention`` (mindone/diffusers/models/layers_compat.py,
  reached through attention_dispatch.py) casts float32 query, key and value to float16; removed,
  it keeps them in float32.
- embedding: mindone's ``get_timestep_embedding`` (embeddings.py) on MindSpore's CPU kernels;
  removed, it gives torch's own numbers (diffusers' function).

CPU, 4 steps, batch 1, seed 0, 32x32, MindSpore PyNative; one line per family and variant.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FAMILIES = {  # name -> (tiny folder, settings beyond the prompt)
    "flux": ("flux", {}),
    "flux-img2img": ("flux", {"pipeline": "FluxImg2ImgPipeline", "strength": 0.5, "image": True}),
    "flux-kontext": ("flux", {"pipeline": "FluxKontextPipeline", "image": True,
                              "call_options": {"_auto_resize": False, "max_area": 32 * 32}}),
    "flux-controlnet": ("flux-controlnet", {"control_image": True}),
    "ltx": ("ltx", {"frames": 9}),
    "sd3": ("sd3", {}),
    "wan": ("wan", {"frames": 5}),
}


def measure(names, folders=None, image=None, progress=None):
    """``{name: {variant: Comparison}}``: each family of ``names`` (keys of :data:`FAMILIES`)
    compared with the noise floor in the four variants (as mindone runs, float32 attention,
    torch's embedding, both), its pipelines loaded once. ``folders``: tiny folder name -> its
    path (built in a temp dir where not given); ``image``: the input image (made where not given);
    ``progress(name, variant, comparison)``: called as each comparison ends."""
    import mindspore as ms
    import torch
    from diffusers.models.embeddings import get_timestep_embedding as torch_embedding
    from PIL import Image

    import mindone.diffusers.models.attention_dispatch as dispatch
    import mindone.diffusers.models.embeddings as embeddings
    from mindone.diffusers.models.layers_compat import flash_attention_op
    from xrand.compare import compare_loaded, load_pair, make_plan
    from xrand.models import build_tiny
    from xrand.pipelines.settings import Settings

    def float32_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                          enable_gqa=False, backend="flash"):
        return flash_attention_op(query, key, value, attn_mask, keep_prob=1 - dropout_p, scale=scale)

    def torch_timestep_embedding(timesteps, *args, **kwargs):
        return ms.tensor(torch_embedding(torch.from_numpy(timesteps.asnumpy()), *args, **kwargs).numpy())

    attention, embedding = dispatch.scaled_dot_product_attention, embeddings.get_timestep_embedding
    variants = {"as mindone": (attention, embedding), "float32 attention": (float32_attention, embedding),
                "torch's embedding": (attention, torch_timestep_embedding),
                "both": (float32_attention, torch_timestep_embedding)}
    root = Path(tempfile.mkdtemp(prefix="xrand-known-"))
    if image is None:
        image = root / "image.png"
        Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)).save(image)
    folders = dict(folders or {})
    results = {}
    for name in names:
        folder, values = FAMILIES[name]
        if folder not in folders:
            folders[folder] = str(build_tiny(folder, root / folder))
        values = {key: str(image) if value is True else value for key, value in values.items()}  # the input files
        values["call_options"] = {"max_sequence_length": 32, **values.get("call_options", {})}
        settings = Settings(model=folders[folder], prompt="a red circle", steps=4, batch_size=1, seed=0, height=32,
                            width=32, **values)
        plan = make_plan(settings, noise_floor=True, mindspore_mode="pynative")
        pair = load_pair(plan)
        results[name] = {}
        try:
            for label, (att, emb) in variants.items():
                dispatch.scaled_dot_product_attention, embeddings.get_timestep_embedding = att, emb
                results[name][label] = compare_loaded(pair, plan)
                if progress is not None:
                    progress(name, label, results[name][label])
        finally:
            dispatch.scaled_dot_product_attention, embeddings.get_timestep_embedding = attention, embedding
    return results


def main(names) -> None:
    def say(name, label, c):
        floor = c.noise_floor["rel_l2"]
        print(f"{name:13s} {label:18s} final {c.final['rel_l2']:.3g} = {c.final['rel_l2'] / floor:.3g}x torch's "
              f"floor {floor:.3g}; last latents {c.global_steps[-1]['rel_l2']:.3g}", flush=True)

    measure(names, progress=say)


if __name__ == "__main__":
    main(sys.argv[1:] or list(FAMILIES))
