"""The stand-ins: the same math as each missing ``mindspore.mint`` kernel, from operators a CPU has.

Each is registered where it is defined, by :func:`fallback_for` (a kernel the CPU lacks) or
:func:`half_precision_for` (one without bfloat16); :func:`targets` and :func:`half_targets` read
the registry, and :mod:`.install` puts the stand-ins in place.
"""


from __future__ import annotations

import pkgutil
from dataclasses import dataclass
from typing import Callable

import mindspore as ms
import numpy as np
from mindspore import ops

# Whether _conv2d runs MindSpore's Conv2D (set by runtime.cap_onednn_isa; compiled into graphs
# as a constant).
conv2d_by_onednn = False


# ---------------------------------------------------------------- the registry
@dataclass(frozen=True)
class StandIn:
    """One registered stand-in and the operator it replaces (``target``, a dotted path such as
    ``"mindspore.mint.arange"`` or ``"mindspore.Tensor.lerp"``, imported only when it is read).

    ``kind`` "fallback": ``function`` is the replacement. "half": ``function(kernel, original)``
    makes it from the operator there now, ``kernel`` the name a report lists.
    """
    kind: str
    target: str
    function: Callable
    kernel: str = ""


#: Every stand-in, in the order registered (the order of this file).
STAND_INS: list[StandIn] = []


def fallback_for(*targets: str):
    """Decorator: registers the function (or class) as the replacement of each ``target`` on a CPU."""
    def register(function):
        STAND_INS.extend(StandIn("fallback", target, function) for target in targets)
        return function

    return register


def half_precision_for(kernels: dict[str, str]):
    """Decorator on ``make(kernel, original) -> stand-in``: registers it for each ``target: kernel``
    of ``kernels``, the operators with no bfloat16 CPU kernel."""
    def register(make):
        STAND_INS.extend(StandIn("half", target, make, kernel) for target, kernel in kernels.items())
        return make

    return register


def _owner(target: str) -> tuple[object, str]:
    """(owner, attribute name) of a dotted target, importing the owner's module."""
    owner, _, attribute = target.rpartition(".")
    return pkgutil.resolve_name(owner), attribute


def targets() -> list[tuple[object, str, object]]:
    """(owner, attribute, fallback) for each operator replaced on a CPU."""
    return [(*_owner(s.target), s.function) for s in STAND_INS if s.kind == "fallback"]


def half_targets() -> list[tuple[object, str, object]]:
    """(owner, attribute, stand-in) for each operator given a bfloat16 stand-in, wrapping what is
    there now (the CPU fallbacks of :func:`targets` where installed). PyNative only: the
    stand-ins note in Python which ran (:data:`half_ran`)."""
    out = []
    for s in STAND_INS:
        if s.kind == "half":
            owner, attribute = _owner(s.target)
            out.append((owner, attribute, s.function(s.kernel, getattr(owner, attribute))))
    return out


# ---------------------------------------------------------------- the fallbacks
# Missing CPU kernels below were found by running mindone 0.5.0's UNet2DModel and
# DDIMScheduler on MindSpore 2.10.0, device_target "CPU". The fallbacks import nothing
# inside their bodies so that they also compile in MindSpore's graph mode (ms.jit).
# The scheduler and Stable Diffusion fallbacks further down were found the same way with the
# schedulers both libraries share and mindone's StableDiffusionPipeline (CLIP text encoder,
# UNet2DConditionModel, AutoencoderKL).
# Also without CPU kernels, but not on these paths (so not replaced): mint.randn (InplaceNormal),
# mint.nn.functional.unfold (Im2ColExt). mint.mm (Mm) is: Stable Diffusion's self-attention
# guidance builds its blur kernel with it.


@fallback_for("mindspore.mint.arange")
def _arange(start=0, end=None, step=1, *, dtype=None):
    """mint.arange: kernel Arange has no CPU version; ops.arange (Range) has."""
    return ops.arange(start, end, step, dtype=dtype)


@fallback_for("mindspore.mint.baddbmm")
def _baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """mint.baddbmm (kernel Baddbmm): beta * input + alpha * (batch1 @ batch2).

    As in torch, beta == 0 ignores ``input`` (NaN or Inf in it do not spread).
    """
    out = ops.bmm(batch1, batch2)
    if alpha != 1:
        out = out * alpha
    if beta == 0:
        return out
    if beta != 1:
        input = input * beta
    return out + input


@fallback_for("mindspore.mint.mm")
def _mm(input, mat2):
    """mint.mm (kernel Mm): ops.matmul (MatMul) of the two matrices."""
    return ops.matmul(input, mat2)


@fallback_for("mindspore.mint.nn.functional.pad")
def _pad(input, pad, mode="constant", value=None):
    """mint.nn.functional.pad (kernel ConstantPadND): ops.pad (PadV3) has a CPU kernel."""
    if isinstance(pad, tuple) and not pad:
        return input
    return ops.pad(input, tuple(pad), mode=mode, value=value)


def _pair(value):
    if isinstance(value, int):
        return value, value
    return value[0], value[1]


@fallback_for("mindspore.mint.nn.functional.conv2d")
def _conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """mint.nn.functional.conv2d (kernel Conv2DExt): MindSpore's CPU Conv2D, or im2col and a matmul.

    MindSpore's CPU Conv2D is oneDNN's. On AVX-512, oneDNN runs it as "jit_uni_ncsp:conv+ref"
    on the plain NCHW layout MindSpore hands it, far slower than ops.unfold and one batched
    matmul; at AVX2 (:func:`.runtime.cap_onednn_isa`) it runs as a GEMM ("x64:gemm:jit"), faster
    than both, so Conv2D serves every conv then; otherwise only grouped convs and padding given
    by name ("same", "valid"). Seen with ONEDNN_VERBOSE=1 on MindSpore 2.10; the timings are in
    the README's "MindSpore without Ascend".
    """
    if conv2d_by_onednn or groups != 1 or isinstance(padding, str):
        pad_mode, pad = (padding, 0) if isinstance(padding, str) else ("pad", padding)
        return ops.conv2d(input, weight, bias, stride, pad_mode, pad, dilation, groups)
    n, _, h, w = input.shape
    out_channels, _, kh, kw = weight.shape
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    dh, dw = _pair(dilation)
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    if kh == 1 and kw == 1 and sh == 1 and sw == 1 and ph == 0 and pw == 0:
        cols = input.reshape(n, -1, h * w)
    else:
        cols = ops.unfold(input, (kh, kw), (dh, dw), (ph, pw), (sh, sw))  # (n, C*kh*kw, oh*ow)
    # Broadcast, then reshape: in graph mode the reshape of the broadcast copy is a view, where
    # reshaping the weight first ran a Reshape kernel per conv (35 of the digits UNet's 421 kernels).
    kernel = weight.broadcast_to((n,) + weight.shape).reshape(n, out_channels, -1)
    out = ops.bmm(kernel, cols)
    if bias is not None:
        out = ops.bias_add(out, bias)
    return out.reshape(n, out_channels, oh, ow)


@fallback_for("mindspore.mint.nn.Conv2d.construct")
def _conv2d_construct(self, input):
    """mint.nn.Conv2d.construct, calling the CPU conv2d instead of conv2d_ext_op."""
    if self.padding_mode != "zeros":
        input = _pad(input, self._reversed_padding, mode=self.padding_mode)
        return _conv2d(input, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
    return _conv2d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


# ------------------------------------------------ schedulers and Stable Diffusion
# Schedulers: DDPM, IPNDM, KDPM2, UniPC, SASolver, EDMEuler, DPMSolverSDE, Cosine...; Stable
# Diffusion: its CLIP text encoder and transformer blocks.
_INTEGER_DTYPES = (ms.bool_, ms.int8, ms.int16, ms.int32, ms.int64, ms.uint8, ms.uint16, ms.uint32, ms.uint64)


def _to_float(x):
    """Integer and bool tensors as float32, as torch promotes them for float-valued math."""
    return x.astype(ms.float32) if x.dtype in _INTEGER_DTYPES else x


@fallback_for("mindspore.mint.atan2")
def _atan2(input, other):
    """mint.atan2 (kernel Atan2Ext): ops.atan2 (Atan2) after torch's integer-to-float promotion."""
    input, other = _to_float(input), _to_float(other)
    if input.dtype != other.dtype:  # e.g. float16 with float32: the wider one, as torch does
        input, other = input.astype(ms.float32), other.astype(ms.float32)
    return ops.atan2(input, other)


@fallback_for("mindspore.mint.stack")
def _stack(tensors, dim=0):
    """mint.stack (kernel StackExt): ops.stack (Stack) has a CPU kernel."""
    return ops.stack(tuple(tensors), dim)


@fallback_for("mindspore.mint.zeros_like")
def _zeros_like(input, *, dtype=None):
    """mint.zeros_like (kernel ZerosLikeExt): ops.zeros (Zeros) of the input's shape and dtype."""
    return ops.zeros(input.shape, input.dtype if dtype is None else dtype)


@fallback_for("mindspore.mint.ones_like")
def _ones_like(input, *, dtype=None):
    """mint.ones_like (kernel OnesLikeExt; LTX's rotary embedding pads with it): ops.ones (Ones)
    of the input's shape and dtype."""
    return ops.ones(input.shape, input.dtype if dtype is None else dtype)


def _fill_dtype(fill_value, dtype):
    if dtype is not None:
        return dtype
    if isinstance(fill_value, ms.Tensor):
        return fill_value.dtype
    if isinstance(fill_value, bool):
        return ms.bool_
    return ms.int64 if isinstance(fill_value, int) else ms.float32


@fallback_for("mindspore.mint.full")
def _full(size, fill_value, *, dtype=None):
    """mint.full (kernel FillScalar): ops.fill (Fill); dtype inferred from the value as torch does.

    (ops.full makes ``full((2,), 3.0)`` an int64 tensor, measured on MindSpore 2.10.)
    """
    dtype = _fill_dtype(fill_value, dtype)
    if isinstance(fill_value, ms.Tensor):
        return fill_value.astype(dtype).reshape(()).broadcast_to(tuple(size)).copy()
    return ops.fill(dtype, tuple(size), fill_value)


@fallback_for("mindspore.mint.linspace")
def _linspace(start, end, steps, *, dtype=None):
    """mint.linspace (kernel LinSpaceExt) with torch's CPU formula, so the values match torch bit for bit.

    torch (aten/src/ATen/native/cpu/RangeFactoriesKernel.cpp): step = (end - start) / (steps - 1)
    in the output precision (double for integer outputs); the first half counts up from start,
    the second half down from end.
    """
    dtype = ms.float32 if dtype is None else dtype
    if isinstance(start, ms.Tensor):
        start = start.item()
    if isinstance(end, ms.Tensor):
        end = end.item()
    if steps == 0:
        return ops.zeros((0,), dtype)
    if steps == 1:
        return ops.fill(dtype, (1,), start)
    compute = ms.float64 if dtype in _INTEGER_DTYPES or dtype == ms.float64 else ms.float32
    first, last = ms.tensor(start, compute), ms.tensor(end, compute)
    step = (last - first) / ms.tensor(steps - 1, compute)
    index = ops.arange(0, steps, 1, dtype=compute)
    up = first + step * index
    down = last - step * (ms.tensor(steps - 1, compute) - index)
    return ops.where(index < steps // 2, up, down).astype(dtype)


@fallback_for("mindspore.mint.log")
def _log(input):
    """mint.log: the CPU Log kernel has no integer types; torch returns float32 for them."""
    return ops.log(_to_float(input))


@fallback_for("mindspore.Tensor.lerp", "mindspore.mint.lerp")
def _lerp(input, end, weight):
    """Tensor.lerp / mint.lerp with torch's formula: MindSpore's Lerp turns a -inf start into NaN.

    torch (aten/src/ATen/native/Lerp.h): start + w * (end - start) for |w| < 0.5, else
    end - (end - start) * (1 - w); with start = -inf that gives -inf, which KDPM2's
    log-sigma interpolation needs (its last sigma is 0).
    """
    diff = end - input
    if isinstance(weight, ms.Tensor):
        return ops.where(ops.abs(weight) < 0.5, input + weight * diff, end - diff * (1 - weight))
    if abs(weight) < 0.5:
        return input + weight * diff
    return end - diff * (1 - weight)


@fallback_for("mindspore.Tensor.nonzero")
def _nonzero(input, *, as_tuple=False):
    """Tensor.nonzero: as_tuple=True has only an Ascend kernel (NonZeroExt); the CPU's NonZero
    gives the (n, ndim) index matrix, whose columns are the tuple. A 0-d tensor counts as 1-d,
    as in torch."""
    if input.ndim == 0:
        input = input.reshape((1,))
        if not as_tuple:  # torch: shape (n, 0) for a 0-d input
            return ops.nonzero(input)[:, :0]
    indices = ops.nonzero(input)
    if not as_tuple:
        return indices
    return tuple(indices[:, i] for i in range(input.ndim))


@fallback_for("mindspore.mint.nn.functional.gelu")
def _gelu(input, approximate="none"):
    """mint.nn.functional.gelu (kernel GeluExt): ops.gelu (GeLU / FastGeLU tanh form), its exact form
    written out as ops.gelu computes it, with ``/`` for its Div primitive: in graph mode a float32
    division compiles to RealDiv then, which leaves nothing in the C heap after it
    (xrand.frameworks.mindspore_graph.division_as_real_div)."""
    if approximate != "none" or input.dtype not in (ms.float32, ms.float64):
        return ops.gelu(input, approximate=approximate)
    return input * (ops.erf(input / ops.sqrt(ms.Tensor(2.0, input.dtype))) + ms.Tensor(1.0, input.dtype)) \
        * ms.Tensor(0.5, input.dtype)


@fallback_for("mindspore.mint.nn.functional.layer_norm")
def _layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """mint.nn.functional.layer_norm (kernel LayerNormExt): the LayerNorm primitive, which has a CPU
    kernel, over the last ``len(normalized_shape)`` axes."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    axis = input.ndim - len(normalized_shape)
    if 0 in input.shape:  # the CPU LayerNorm kernel rejects empty input; torch returns it empty
        return ops.zeros(input.shape, input.dtype)
    if weight is None:
        weight = ops.ones(normalized_shape, input.dtype)
    if bias is None:
        bias = ops.zeros(normalized_shape, input.dtype)
    return ops.LayerNorm(axis, axis, eps)(input, weight, bias)[0]


@fallback_for("mindspore.mint.nn.LayerNorm.construct")
def _layer_norm_construct(self, input):
    """mint.nn.LayerNorm.construct (LayerNormExt), calling the CPU layer norm."""
    return _layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)


@fallback_for("mindone.diffusers.models.activations.GEGLU.construct")
def _geglu_construct(self, hidden_states):
    """mindone's GEGLU.construct without Tensor.chunk: in graph mode chunk compiles to the Chunk
    kernel, which the CPU lacks (PyNative splits in Python); ops.split makes the same two halves."""
    hidden_states = self.proj(hidden_states)
    hidden_states, gate = ops.split(hidden_states, hidden_states.shape[-1] // 2, -1)
    return hidden_states * self.gelu(gate)


# ------------------------------------------------ SDXL, SD3, Flux, PixArt, Wan
# Found running mindone 0.5.0's pipelines of those families on the tiny folders of xrand.models.


@fallback_for("mindspore.mint.outer")
def _outer(input, vec2):
    """mint.outer (kernel Outer; SD3/PixArt's 2-D sincos position embedding): one product per
    element, as torch computes it, float32 with float64 giving float64."""
    return input.reshape((-1, 1)) * vec2.reshape((1, -1))


@fallback_for("mindspore.mint.nn.functional.embedding")
def _embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False):
    """mint.nn.functional.embedding (kernel Embedding; T5 and UMT5 token embeddings): the rows of
    ``weight`` that ``input`` indexes, by Gather. ``padding_idx`` and ``scale_grad_by_freq`` only
    shape gradients; rows longer than ``max_norm`` come back scaled to it, as torch returns them
    (without torch's in-place renorm of ``weight``)."""
    rows = ops.gather(weight, input, 0)
    if max_norm is None:
        return rows
    norms = ops.norm(rows, norm_type, -1, keepdim=True)
    return ops.where(norms > max_norm, rows * (max_norm / (norms + 1e-7)), rows)


@fallback_for("mindspore.mint.nn.Embedding.construct")
def _embedding_construct(self, input):
    """mint.nn.Embedding.construct (kernel Embedding), calling the CPU embedding."""
    return _embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type, self.scale_grad_by_freq)


def _einsum_plan(equation, ndims):
    """Each operand's letters, spelled out (``...`` as capitals), and the output's letters.

    Repeated letters within one operand (diagonals, traces) are refused: no family uses them.
    """
    equation = equation.replace(" ", "")
    inputs, arrow, output = equation.partition("->")
    inputs = inputs.split(",")
    if len(inputs) != len(ndims):
        raise ValueError(f"einsum: equation {equation!r} names {len(inputs)} operands, {len(ndims)} given")
    ellipsis_dims = max([n - len(spec.replace("...", "")) for spec, n in zip(inputs, ndims) if "..." in spec] + [0])
    spelled = []
    for spec, n in zip(inputs, ndims):
        if "..." in spec:
            own = n - len(spec.replace("...", ""))
            spec = spec.replace("...", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[ellipsis_dims - own:ellipsis_dims])
        if len(spec) != n or len(set(spec)) != len(spec):
            raise ValueError(f"einsum: {equation!r} does not fit operands of {n} dimensions, or repeats a letter")
        spelled.append(spec)
    if not arrow:  # implicit output: the letters seen once, in alphabetical order (ellipsis first)
        counts = "".join(spelled)
        output = "".join(sorted(c for c in set(counts) if counts.count(c) == 1))
    output = output.replace("...", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:ellipsis_dims])
    return spelled, output


@fallback_for("mindspore.mint.einsum")
def _einsum(equation, *operands):
    """mint.einsum ("einsum only supports Ascend"; SD3/PixArt's unpatchify "nhwpqc->nchpwq"):
    each operand's axes permuted to one letter order, broadcast, multiplied, the summed
    letters reduced. A permutation alone (the families' use) is exact; a contraction sums in
    another order than torch's matmul, so it can differ in the last bits."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    inputs, output = _einsum_plan(equation, tuple(x.ndim for x in operands))
    summed = "".join(sorted(set("".join(inputs)) - set(output)))
    order = output + summed
    result = None
    for spec, x in zip(inputs, operands):
        mine = "".join(c for c in order if c in spec)
        perm = tuple(spec.index(c) for c in mine)
        if perm != tuple(range(len(spec))):
            x = x.transpose(perm)
        if len(mine) != len(order):
            sizes = dict(zip(mine, x.shape))
            x = x.reshape(tuple(sizes.get(c, 1) for c in order))
        result = x if result is None else result * x
    if summed:
        result = result.sum(tuple(range(len(output), len(order))))
    return result


@fallback_for("mindspore.Tensor.repeat_interleave", "mindspore.mint.repeat_interleave")
def _repeat_interleave(input, repeats, dim=None, *, output_size=None):
    """Tensor.repeat_interleave / mint.repeat_interleave (kernels RepeatInterleaveInt and
    RepeatInterleaveTensor; Flux's rotary embedding, PixArt's attention mask): int repeats copy
    each element by a broadcast; tensor repeats go to ops.repeat_interleave (RepeatElements
    and a concat), which the CPU has."""
    if not isinstance(repeats, int):
        return ops.repeat_interleave(input, repeats, dim)
    if dim is None:
        input, dim = input.reshape((-1,)), 0
    dim = dim % input.ndim
    shape = input.shape
    copies = ops.expand_dims(input, dim + 1).broadcast_to(shape[:dim + 1] + (repeats,) + shape[dim + 1:])
    return copies.reshape(shape[:dim] + (shape[dim] * repeats,) + shape[dim + 1:])


# The most negative finite value of each float dtype (mindone's dtype_to_min).
_FLOAT_MIN = {ms.float16: -65504.0, ms.bfloat16: -3.3895313892515355e38, ms.float32: -3.4028234663852886e38}


@fallback_for("mindspore.ops.operations.nn_ops.FlashAttentionScore")
@ms.jit_class
class _FlashAttentionScore:
    """ops.operations.nn_ops.FlashAttentionScore (Ascend only): Flux's and Wan's attention go
    through it (mindone's layers_compat.scaled_dot_product_attention), and Wan's VAE calls it
    directly. Same math as the kernel: softmax(scale_value * q k^T, masked) v, computed in
    float32 from the inputs and returned in their dtype; the mask is MindSpore's (True
    discards). Layouts BNSD, BSND and BSH; the training and sparse options are refused.

    What callers give it stays theirs: mindone casts float32 query, key and value to float16
    first (layers_compat.py, autoencoder_kl_wan.py), and Wan's VAE keeps the default
    ``scale_value`` 1.0 where diffusers' attention scales by 1/sqrt(channels).
    """

    def __init__(self, head_num, keep_prob=1.0, scale_value=1.0, pre_tokens=2147483647, next_tokens=2147483647,
                 inner_precise=0, input_layout="BSH", sparse_mode=0):
        if input_layout not in ("BNSD", "BSND", "BSH"):
            raise ValueError(f"xrand's CPU FlashAttentionScore takes layouts BNSD, BSND, BSH, not {input_layout!r}")
        if keep_prob != 1.0 or sparse_mode != 0 or pre_tokens != 2147483647 or next_tokens != 2147483647:
            raise ValueError("xrand's CPU FlashAttentionScore computes inference attention only: keep_prob 1, "
                             "sparse_mode 0, default pre_tokens and next_tokens")
        self.head_num = head_num
        self.scale_value = scale_value
        self.input_layout = input_layout

    def __call__(self, query, key, value, real_shift=None, drop_mask=None, padding_mask=None, attn_mask=None,
                 prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None):
        if real_shift is not None or drop_mask is not None or padding_mask is not None or prefix is not None:
            raise ValueError("xrand's CPU FlashAttentionScore takes no real_shift, drop_mask, padding_mask or prefix")
        dtype, shape = query.dtype, query.shape
        if self.input_layout == "BSH":  # (B, S, N*D) -> (B, N, S, D)
            query = query.reshape(shape[0], shape[1], self.head_num, -1).swapaxes(1, 2)
            key = key.reshape(key.shape[0], key.shape[1], self.head_num, -1).swapaxes(1, 2)
            value = value.reshape(value.shape[0], value.shape[1], self.head_num, -1).swapaxes(1, 2)
        elif self.input_layout == "BSND":
            query, key, value = query.swapaxes(1, 2), key.swapaxes(1, 2), value.swapaxes(1, 2)
        scores = ops.matmul(query.astype(ms.float32), key.astype(ms.float32).swapaxes(-2, -1)) * self.scale_value
        if attn_mask is not None:
            scores = ops.masked_fill(scores, attn_mask.astype(ms.bool_), _FLOAT_MIN[ms.float32])
        out = ops.matmul(ops.softmax(scores, -1), value.astype(ms.float32)).astype(dtype)
        if self.input_layout == "BSH":
            out = out.swapaxes(1, 2).reshape(shape[0], shape[1], -1)
        elif self.input_layout == "BSND":
            out = out.swapaxes(1, 2)
        return None, None, None, out


@fallback_for("mindspore.ops.flash_attention_score")
def _flash_attention_score(query, key, value, head_num, real_shift=None, drop_mask=None, padding_mask=None,
                           attn_mask=None, prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, keep_prob=1.0,
                           scalar_value=1.0, pre_tokens=2147483647, next_tokens=2147483647, inner_precise=0,
                           input_layout="BSH", sparse_mode=0):
    """ops.flash_attention_score (FlashAttentionScore, Ascend only; Qwen-Image's VAE calls it, with
    its scale): the stand-in above, its output (the function's fourth)."""
    score = _FlashAttentionScore(head_num, keep_prob, scalar_value, pre_tokens, next_tokens, inner_precise,
                                 input_layout, sparse_mode)
    return score(query, key, value, real_shift, drop_mask, padding_mask, attn_mask, prefix)[3]


@fallback_for("mindspore.mint.randn")
def _randn(*size, generator=None, dtype=None):
    """mint.randn (kernel InplaceNormal; mindone's BasicTransformerBlock draws PixArt's
    ``scale_shift_table`` with it when the model is built, and loading the weights replaces it):
    MindSpore's StandardNormal, seeded by ``ms.set_seed``. Its numbers are not the Ascend
    kernel's; a ``generator`` is refused rather than ignored."""
    if generator is not None:
        raise RuntimeError("xrand's CPU stand-in for mint.randn draws from MindSpore's global seed; "
                           "it takes no generator")
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return ops.standard_normal(tuple(size)).astype(ms.float32 if dtype is None else dtype)


@fallback_for("mindspore.Tensor.normal_")
def _normal_(input, mean=0, std=1, *, generator=None):
    """Tensor.normal_ (kernel InplaceNormal; mindone.transformers' Gemma-2 initialises its weights
    with it when built, and loading the weights replaces them): filled in place from MindSpore's
    StandardNormal, seeded by ``ms.set_seed``; a ``generator`` is refused rather than ignored."""
    if generator is not None:
        raise RuntimeError("xrand's CPU stand-in for Tensor.normal_ draws from MindSpore's global seed; "
                           "it takes no generator")
    input.assign_value((ops.standard_normal(tuple(input.shape)) * std + mean).astype(input.dtype))
    return input


@fallback_for("mindspore.Tensor.zero_")
def _zero_(input):
    """Tensor.zero_ (kernel InplaceZero; Gemma-2's initialisation zeroes its biases with it):
    filled with zeros in place."""
    input.assign_value(ops.zeros(tuple(input.shape), input.dtype))
    return input


@fallback_for("mindspore.Tensor.masked_fill_")
def _masked_fill_(input, mask, value):
    """Tensor.masked_fill_ (kernels InplaceMaskedFillScalar / InplaceMaskedFillTensor; Qwen2.5-VL's
    position ids for a padded prompt): ops.masked_fill, which has a CPU kernel, written back in place."""
    value = value.astype(input.dtype) if isinstance(value, ms.Tensor) else ms.tensor(value, input.dtype)  # as torch casts
    input.assign_value(ops.masked_fill(input, mask, value))
    return input


@fallback_for("mindspore.mint.tril")
def _tril(input, diagonal=0):
    """mint.tril (kernel TrilExt; Gemma-2's sliding-window mask): ops.tril, which has a CPU kernel."""
    return ops.tril(input, diagonal)


@fallback_for("mindspore.mint.unique")
def _unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """mint.unique (kernel Unique2; Lumina 2's transformer asks whether its captions differ in
    length): the sorted unique values, as torch.unique on a CPU gives them (``sorted`` or not)."""
    if dim is not None:
        raise ValueError("xrand's CPU mint.unique takes no dim")
    values, inverse, counts = np.unique(input.asnumpy(), return_inverse=True, return_counts=True)
    out = (ms.tensor(values),) + ((ms.tensor(inverse.reshape(input.shape)),) if return_inverse else ()) \
        + ((ms.tensor(counts),) if return_counts else ())
    return out if len(out) > 1 else out[0]


@fallback_for("mindspore.mint.norm")
def _norm(input, p="fro", dim=None, keepdim=False, *, dtype=None):
    """mint.norm (kernel LinalgVectorNorm; Lumina 2's guidance normalisation): a vector p-norm
    over ``dim`` (all elements when None), p a positive number or "fro" (2)."""
    if dtype is not None:
        input = input.astype(dtype)
    p = 2 if p == "fro" else p
    if isinstance(p, bool) or not isinstance(p, (int, float)) or p <= 0 or p == float("inf"):
        raise ValueError(f"xrand's CPU mint.norm takes p 'fro' or a positive number, not {p!r}")
    if p == 2:
        return ops.sqrt(ops.sum(input * input, dim, keepdim))
    return ops.pow(ops.sum(ops.pow(ops.abs(input), p), dim, keepdim), 1.0 / p)


@fallback_for("mindone.diffusers.models.attention_processor.Attention.math_attention_op")
def _math_attention_op(self, query, key, value, attn_mask=None):
    """mindone's ``Attention.math_attention_op``, its own attention where FlashAttentionScore is
    missing (any target but Ascend), with a 4-D mask flattened as it flattens query, key and
    value. mindone flattens only those three (mindone/diffusers/models/attention_processor.py),
    so PixArt's (batch, heads, 1, tokens) text mask cannot broadcast in baddbmm."""
    if attn_mask is not None and attn_mask.dtype == ms.bool_:
        attn_mask = ops.logical_not(attn_mask).astype(query.dtype) * _FLOAT_MIN[query.dtype]
    shape = query.shape
    if query.ndim > 3:
        query = query.reshape(-1, query.shape[-2], query.shape[-1])
        key = key.reshape(-1, key.shape[-2], key.shape[-1])
        value = value.reshape(-1, value.shape[-2], value.shape[-1])
        if attn_mask is not None and attn_mask.ndim > 3:
            attn_mask = attn_mask.reshape(-1, attn_mask.shape[-2], attn_mask.shape[-1])
    hidden_states = ops.bmm(self.get_attention_scores(query, key, attn_mask), value)
    return hidden_states.reshape(shape[:-1] + (value.shape[-1],))


@fallback_for("mindspore.mint.nn.functional.conv3d")
def _conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """mint.nn.functional.conv3d (kernel Conv3DExt; Wan's patch embedding and causal 3-D VAE):
    MindSpore's Conv3D, which has a CPU kernel (oneDNN's)."""
    if isinstance(padding, str):
        return ops.conv3d(input, weight, bias, stride, padding, 0, dilation, groups)
    return ops.conv3d(input, weight, bias, stride, "pad", padding, dilation, groups)


@fallback_for("mindspore.mint.nn.Conv3d.construct")
def _conv3d_construct(self, input):
    """mint.nn.Conv3d.construct, calling the CPU conv3d instead of conv3d_ext_op."""
    if self.padding_mode != "zeros":
        input = _pad(input, self._reversed_padding, mode=self.padding_mode)
        return _conv3d(input, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)
    return _conv3d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)


@fallback_for("mindspore.Tensor.clone", "mindspore.mint.clone")
def _clone(input, *, memory_format=None):
    """Tensor.clone / mint.clone (kernel Clone; Wan's VAE keeps its causal cache with it): a new
    tensor holding the same values, by ops.deepcopy (Identity). ``memory_format`` has no
    meaning in MindSpore, whose tensors are contiguous."""
    return ops.deepcopy(input)


@fallback_for("mindspore.Tensor.repeat")
def _repeat(input, *repeats):
    """Tensor.repeat (MindSpore 2.10's tensor_method.py raises "'repeat' is not supported on this
    device" off Ascend; mindone's Flux Kontext repeats its CLIP embedding with it): torch's
    repeat, copies along each dimension, which ops.tile computes (repeats as one tuple or several ints)."""
    if len(repeats) == 1 and isinstance(repeats[0], (tuple, list)):
        repeats = tuple(repeats[0])
    if len(repeats) < input.ndim:
        raise ValueError(f"repeat: {len(repeats)} repeats for a tensor of {input.ndim} dimensions; give at least "
                         f"{input.ndim}")
    return ops.tile(input, tuple(repeats))


@fallback_for("mindspore.mint.nn.functional.normalize")
def _normalize(input, p=2.0, dim=1, eps=1e-12):
    """mint.nn.functional.normalize (kernel LinalgVectorNorm; Wan's RMS norms): ``input`` over its
    ``p``-norm along ``dim``, the norm clamped at ``eps``, as torch computes it."""
    magnitude = ops.abs(input)
    if p == 2:
        norm = ops.sqrt(ops.sum(input * input, dim, keepdim=True))
    elif p == 1:
        norm = ops.sum(magnitude, dim, keepdim=True)
    elif p == float("inf"):
        norm = ops.amax(magnitude, dim, True)
    else:
        norm = ops.pow(ops.sum(ops.pow(magnitude, p), dim, keepdim=True), 1.0 / p)
    return input / ops.clamp(norm, min=eps)


# ------------------------------------------------ half precision (bfloat16, float16)
# MindSpore 2.10's CPU kernels below have no bfloat16 (or float16) version ("Select CPU
# operator[MatMul] fail! Unsupported data type!"), found running mindone 0.5.0's UNet2DModel
# and Stable Diffusion in bfloat16 and float16. Each stand-in computes in float32 and rounds
# the result once to the input's dtype, as torch's CPU kernels do for bfloat16 (float32
# accumulation, one rounding of the output; aten/src/ATen/native/cpu/*, oneDNN's bf16 GEMM).

#: The operators that ran through a half-precision stand-in since :func:`reset_half_ran`.
half_ran: dict = {}


def reset_half_ran() -> None:
    half_ran.clear()


def _note_half(name, dtype):
    half_ran[name] = sorted(set(half_ran.get(name, [])) | {str(dtype).lower()})


@half_precision_for({"mindspore.mint.nn.Linear.construct": "Dense (mint.nn.Linear)"})
def _linear_half(kernel, original):
    """mint.nn.Linear.construct (kernel Dense / MatMul: no bfloat16 on a CPU): the matmul and the
    bias in float32, rounded once to bfloat16; other dtypes run ``original``."""
    def construct(self, x):
        if x.dtype != ms.bfloat16:
            return original(self, x)
        _note_half(kernel, x.dtype)
        out = ops.matmul(x.astype(ms.float32).reshape(-1, x.shape[-1]), self.weight.astype(ms.float32).T)
        if self.bias is not None:
            out = out + self.bias.astype(ms.float32)
        return out.reshape(x.shape[:-1] + (self.weight.shape[0],)).astype(x.dtype)

    return construct


@half_precision_for({"mindspore.mint.nn.Conv2d.construct": "Conv2D (mint.nn.Conv2d)"})
def _conv2d_half(kernel, original):
    """mint.nn.Conv2d.construct (kernel Conv2D: no bfloat16 on a CPU): the conv in float32 from the
    bfloat16 input, weight and bias, rounded once; other dtypes run ``original``."""
    def construct(self, input):
        if input.dtype != ms.bfloat16:
            return original(self, input)
        _note_half(kernel, input.dtype)
        bias = None if self.bias is None else self.bias.astype(ms.float32)
        x, weight = input.astype(ms.float32), self.weight.astype(ms.float32)
        padding = self.padding
        if self.padding_mode != "zeros":
            x, padding = _pad(x, self._reversed_padding, mode=self.padding_mode), 0
        return _conv2d(x, weight, bias, self.stride, padding, self.dilation, self.groups).astype(input.dtype)

    return construct


@half_precision_for({"mindspore.nn.Embedding.construct": "Gather (nn.Embedding)"})
def _nn_embedding_half(kernel, original):
    """mindspore.nn.Embedding.construct (kernel Gather: no bfloat16 on a CPU; mindone.transformers'
    CLIP token and position embeddings): the rows gathered from the float32 table, cast back
    (exact); other dtypes run ``original``."""
    def construct(self, ids):
        if self.embedding_table.dtype != ms.bfloat16:
            return original(self, ids)
        _note_half(kernel, ms.bfloat16)
        rows = ops.gather(self.embedding_table.astype(ms.float32), ids.reshape((-1,)), 0)
        return rows.reshape(ids.shape + (self.embedding_size,)).astype(ms.bfloat16)

    return construct


@half_precision_for({"mindspore.nn.LayerNorm.construct": "LayerNorm (nn.LayerNorm)"})
def _nn_layer_norm_half(kernel, original):
    """mindspore.nn.LayerNorm.construct (kernel LayerNorm: no bfloat16 on a CPU; mindone.transformers'
    CLIP): the norm in float32, rounded once; other dtypes run ``original``."""
    def construct(self, input_x):
        if input_x.dtype != ms.bfloat16:
            return original(self, input_x)
        _note_half(kernel, ms.bfloat16)
        y, _, _ = self.layer_norm(input_x.astype(ms.float32), self.gamma.astype(ms.float32),
                                  self.beta.astype(ms.float32))
        return y.astype(ms.bfloat16)

    return construct


@half_precision_for({"mindspore.nn.Dense.construct": "MatMul (nn.Dense)"})
def _nn_dense_half(kernel, original):
    """mindspore.nn.Dense.construct (kernel MatMul: no bfloat16 on a CPU; mindone.transformers'
    CLIP): the matmul, bias and activation in float32, rounded once; other dtypes run ``original``."""
    def construct(self, x):
        if x.dtype != ms.bfloat16:
            return original(self, x)
        _note_half(kernel, ms.bfloat16)
        out = self.matmul(x.astype(ms.float32).reshape(-1, x.shape[-1]), self.weight.astype(ms.float32))
        if self.has_bias:
            out = out + self.bias.astype(ms.float32)
        if self.activation_flag:
            out = self.activation(out)
        return out.reshape(x.shape[:-1] + (out.shape[-1],)).astype(ms.bfloat16)

    return construct


def _widened(value):
    if isinstance(value, ms.Tensor) and value.dtype == ms.bfloat16:
        return value.astype(ms.float32)
    if isinstance(value, (list, tuple)):
        return type(value)(_widened(v) for v in value)
    return value


def _narrowed(value, dtype):
    if isinstance(value, ms.Tensor) and value.dtype == ms.float32:
        return value.astype(dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(_narrowed(v, dtype) for v in value)
    return value


def _tensors(values):
    """The tensors among ``values``, inside lists and tuples too (stack and cat take a list)."""
    for v in values:
        if isinstance(v, ms.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)


def _keeps_bfloat16(values) -> bool:
    """Whether torch's promotion keeps a result of these arguments in bfloat16: no wider floating
    tensor of one dimension or more among them (a 0-d float32 tensor or a Python float does not
    widen a bfloat16 tensor, torch's type promotion)."""
    return not any(v.ndim > 0 and v.dtype in (ms.float32, ms.float64) for v in _tensors(values))


@half_precision_for({
    # Tensor methods: the schedulers' arithmetic on bfloat16 samples
    "mindspore.Tensor.__truediv__": "RealDiv", "mindspore.Tensor.__rtruediv__": "RealDiv",
    "mindspore.Tensor.__rsub__": "Sub (scalar)", "mindspore.Tensor.__mul__": "Mul", "mindspore.Tensor.__rmul__": "Mul",
    "mindspore.Tensor.clamp": "Maximum and Minimum (clamp)", "mindspore.Tensor.masked_fill": "MaskedFill",
    "mindspore.Tensor.tile": "Tile", "mindspore.Tensor.broadcast_to": "BroadcastTo",
    "mindspore.Tensor.expand": "BroadcastTo (expand)", "mindspore.Tensor.__add__": "Add",
    "mindspore.Tensor.__radd__": "Add", "mindspore.Tensor.__sub__": "Sub", "mindspore.Tensor.sum": "ReduceSum",
    "mindspore.Tensor.mean": "ReduceMean", "mindspore.Tensor.sqrt": "Sqrt", "mindspore.Tensor.exp": "Exp",
    "mindspore.Tensor.abs": "Abs", "mindspore.Tensor.__getitem__": "GatherNd (indexing)",
    # functions
    "mindspore.mint.nn.functional.silu": "Sigmoid (silu)",
    "mindspore.ops.group_norm": "GroupNorm",
    "mindspore.mint.nn.functional.group_norm": "GroupNorm",
    "mindspore.mint.bmm": "BatchMatMulExt (bmm)",
    "mindspore.mint.baddbmm": "BatchMatMul (baddbmm)",
    "mindspore.ops.bmm": "BatchMatMul (bmm)",
    "mindspore.mint.matmul": "MatMulExt (matmul)",
    "mindspore.mint.nn.functional.softmax": "Softmax",
    "mindspore.ops.gather": "Gather",
    "xrand.mindspore_cpu.ops._layer_norm": "LayerNorm",  # the one mint.nn.LayerNorm.construct calls
    "mindspore.ops.gelu": "GeLU",
    "mindspore.ops.softmax": "Softmax",
    "mindspore.mint.sigmoid": "Sigmoid",
    "mindspore.mint.exp": "Exp",
    "mindspore.mint.sin": "Sin",
    "mindspore.mint.cos": "Cos",
    "mindspore.mint.sqrt": "Sqrt",
    "mindspore.mint.rsqrt": "Rsqrt",
    "mindspore.mint.mean": "MeanExt",
    "mindspore.mint.nn.functional.interpolate": "Upsample (interpolate)",
    "mindspore.mint.where": "Select (where)",
    "mindspore.ops.tile": "Tile",
    "mindspore.ops.stack": "Stack",
    "mindspore.mint.stack": "Stack",
    "mindspore.mint.chunk": "Split (chunk)",
    "mindspore.ops.split": "Split",
    # SD3: T5's gated-gelu (mindone.transformers' NewGELUActivation) and the CLIP embeddings
    # padded to T5's width (pipeline_stable_diffusion_3.py, encode_prompt)
    "mindspore.mint.tanh": "Tanh",
    "mindspore.mint.nn.functional.pad": "PadV3 (pad)",
})
def half_stand_in(name, original):
    """``original`` (a function of tensors) in float32 when one of its tensor arguments is
    bfloat16, its float32 results rounded to bfloat16 where torch's promotion keeps bfloat16;
    as it is otherwise. ``name``: the kernel the report lists."""
    def stand_in(*args, **kwargs):
        values = list(args) + list(kwargs.values())
        if not any(v.dtype == ms.bfloat16 for v in _tensors(values)):
            return original(*args, **kwargs)
        _note_half(name, ms.bfloat16)
        out = original(*_widened(args), **_widened(kwargs))
        return _narrowed(out, ms.bfloat16) if _keeps_bfloat16(values) else out

    stand_in.__name__ = stand_in.__qualname__ = f"half_{getattr(original, '__name__', name)}"
    stand_in.__doc__ = f"{name} in float32 for bfloat16 inputs (no bfloat16 CPU kernel), rounded back."
    return stand_in


@half_precision_for({"mindspore.Tensor.__pow__": "Pow",
                     "mindspore.mint.pow": "Pow (mint.pow)"})  # SD3: T5's gated-gelu
def half_pow(name, original):
    """``original`` (``Tensor.__pow__``, ``mint.pow``) as :func:`half_stand_in` makes it, but a
    bfloat16 tensor to the power 3 or -2 is computed from products rounded to bfloat16 each, as
    torch's CPU computes them (aten/src/ATen/native/cpu/PowKernel.cpp,
    pow_tensor_scalar_optimized_kernel: ``base * base * base``, ``1 / (base * base)`` in bfloat16)."""
    wide = half_stand_in(name, original)

    def stand_in(input, exponent):
        if not (isinstance(input, ms.Tensor) and input.dtype == ms.bfloat16
                and isinstance(exponent, (int, float)) and exponent in (3, -2)):
            return wide(input, exponent)
        _note_half(name, ms.bfloat16)
        x = input.astype(ms.float32)
        square = (x * x).astype(ms.bfloat16).astype(ms.float32)
        return (square * x if exponent == 3 else 1 / square).astype(ms.bfloat16)

    stand_in.__name__ = stand_in.__qualname__ = f"half_{getattr(original, '__name__', name)}"
    stand_in.__doc__ = f"{name} for bfloat16 inputs (no bfloat16 CPU kernel), rounded as torch's CPU rounds it."
    return stand_in


@half_precision_for({"mindspore.ops.full": "FillV2 (full)", "mindspore.mint.full": "FillV2 (full)"})
def half_maker(name, original):
    """``original`` (a function making a tensor of ``dtype=``) made in float32 and cast when it is
    asked for bfloat16 (a constant: exact where the value fits bfloat16, else rounded as torch
    rounds it); as it is otherwise."""
    def stand_in(*args, **kwargs):
        if kwargs.get("dtype") is not ms.bfloat16 and kwargs.get("dtype") != ms.bfloat16:
            return original(*args, **kwargs)
        _note_half(name, ms.bfloat16)
        return original(*args, **{**kwargs, "dtype": ms.float32}).astype(ms.bfloat16)

    stand_in.__name__ = stand_in.__qualname__ = f"half_{getattr(original, '__name__', name)}"
    stand_in.__doc__ = f"{name} made in float32 when bfloat16 is asked (no bfloat16 CPU kernel), then cast."
    return stand_in
