"""Which component parts two sides: the text encoders' outputs, the latents, the decoded output.

A pipeline is three components in a row, and each one's output is compared apart:

    component          its output, as the comparison sees it
    prompt embeddings  what the text encoders gave, as the denoiser receives it at its first call
                       (:data:`PROMPT_INPUTS`; pipelines without a prompt have none)
    latents            the sample after each scheduler step (the sides' ``states``)
    VAE decode         the decoded output (the final images; "the output" where no VAE decodes)

Each is held to the comparison's tolerance, as the final images are: its relative L2 against
torch's must not exceed it (the latents: after any step). The first component over it is the one
that parts the sides; the verdict names it, and the ones before it that agree.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from .metrics import metrics

#: The denoiser inputs that carry the text encoders' outputs (diffusers' names, which mindone
#: keeps): UNet and every transformer's ``encoder_hidden_states``, SD3 and Flux's pooled
#: projections, SDXL's pooled text embeddings, Wan image-to-video's image embeddings.
PROMPT_INPUTS = ("encoder_hidden_states", "pooled_projections", "encoder_hidden_states_image",
                 "added_cond_kwargs.text_embeds")


def prompt_inputs(named: Mapping[str, Any], fw: Any) -> Dict[str, np.ndarray]:
    """The :data:`PROMPT_INPUTS` among a denoiser call's inputs by name, as float32 arrays."""
    out = {}
    for key in PROMPT_INPUTS:
        value: Any = named
        for part in key.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None and fw.is_tensor(value):
            out[key] = np.asarray(fw.to_numpy(value), dtype=np.float32)
    return out


def compare_components(prompt_a: Mapping[str, np.ndarray], prompt_b: Mapping[str, np.ndarray], states_a: np.ndarray,
                       states_b: np.ndarray, final: Mapping[str, Any], tolerance: float,
                       decoder: str = "VAE decode") -> List[Dict[str, Any]]:
    """Each component's numbers, in pipeline order: ``name``, ``what``, ``rel_l2`` and ``max_abs``
    (the latents': after the last step), ``limit``, ``over`` (and ``nonfinite``, the values NaN or
    Inf on either side, where there are any); the prompt embeddings' per input
    (``inputs``), the latents' ``steps`` and ``first_over`` (the first step over, or None)."""
    out = []
    shared = [k for k in PROMPT_INPUTS if k in prompt_a and k in prompt_b and prompt_a[k].shape == prompt_b[k].shape]
    if shared:
        inputs = {k: metrics(prompt_a[k], prompt_b[k]) for k in shared}
        whole = metrics(np.concatenate([prompt_a[k].ravel() for k in shared]),
                        np.concatenate([prompt_b[k].ravel() for k in shared]))
        out.append({"name": "prompt embeddings", "what": "the text encoders' outputs as the denoiser's first call "
                    "receives them", **_limited(whole, tolerance), "inputs": inputs})
    steps = [metrics(x, y) for x, y in zip(states_a, states_b)]
    if steps:
        over = [i for i, s in enumerate(steps) if _limited(s, tolerance)["over"]]
        out.append({"name": "latents", "what": "the sample after each scheduler step",
                    **_limited(steps[-1], tolerance), "over": bool(over), "steps": len(steps),
                    "first_over": over[0] if over else None})
    out.append({"name": decoder, "what": "the decoded output (the final images)" if decoder == "VAE decode" else
                "the final images (no VAE decodes them)", **_limited(final, tolerance)})
    return out


def _limited(numbers: Mapping[str, Any], tolerance: float) -> Dict[str, Any]:
    """The numbers against the limit: NaN or Inf on either side is over it (the numbers are then
    over the finite values, :func:`.metrics.metrics`; ``nonfinite`` counts the others)."""
    rel = numbers["rel_l2"]
    bad = numbers.get("nonfinite_a", 0) + numbers.get("nonfinite_b", 0)
    return {"rel_l2": rel, "max_abs": numbers["max_abs"], "limit": tolerance, "over": bool(bad) or not rel <= tolerance,
            **({"nonfinite": bad} if bad else {})}


def parted_by(components: Optional[List[Dict[str, Any]]]) -> Optional[str]:
    """The first component over its limit (None: none is)."""
    return next((c["name"] for c in components or [] if c["over"]), None)


def components_text(components: Optional[List[Dict[str, Any]]]) -> str:
    """'the prompt embeddings agree (1.2e-07), the latents agree (5.3e-04 after 3 steps); the VAE
    decode parts them (7.2e-02, 136x the latents')': each component up to the first over its
    limit; '' without components."""
    said, before = [], None
    for c in components or []:
        number = f"{c['rel_l2']:.2g}" if not c.get("nonfinite") else f"{c['nonfinite']} values NaN or Inf"
        if c["name"] == "latents":
            number += f" after {c['steps']} step{'s' if c['steps'] != 1 else ''}"
        if not c["over"]:
            plural = c["name"] in ("latents", "prompt embeddings")
            said.append(f"the {c['name']} agree{'' if plural else 's'} ({number})")
            before = c
            continue
        if c["name"] == "latents" and c["first_over"] is not None:
            number += f", over from step {c['first_over'] + 1}"
        elif before is not None and before["name"] == "latents" and before["rel_l2"] > 0 and not c.get("nonfinite"):
            number += f", {c['rel_l2'] / before['rel_l2']:.3g}x the latents'"
        verb = "part" if c["name"] in ("latents", "prompt embeddings") else "parts"  # plural names
        return ", ".join(said) + ("; " if said else "") + f"the {c['name']} {verb} them ({number})"
    return ", ".join(said)


__all__ = ["PROMPT_INPUTS", "compare_components", "components_text", "parted_by", "prompt_inputs"]
