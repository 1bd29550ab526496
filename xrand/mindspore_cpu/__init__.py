"""Run mindone's diffusion models on a plain CPU by standing in for mint operators it lacks.

Several ``mindspore.mint`` operators that mindone calls have Ascend kernels only; on a CPU
they fail with "The kernel X unregistered". :func:`install` swaps each of them for the same
math built from MindSpore operators that have CPU kernels, wherever mindone looks it up, so
mindone's own pipelines (DDIM, Stable Diffusion, img2img, inpainting, SDXL, SD3, Flux, Flux Kontext,
PixArt-Sigma, Wan) and schedulers run unchanged. ``Tensor.lerp``
has a CPU kernel but gives NaN for a -inf start where torch gives -inf; it is replaced too.
It does nothing unless MindSpore's device target is ``"CPU"`` (Ascend and GPU keep their own
kernels); :func:`uninstall` puts every original object back.

    from xrand import mindspore_cpu
    mindspore_cpu.tune_cpu_runtime()                   # once per process, before MindSpore's first operator
    with mindspore_cpu.cpu_fallbacks():
        pipeline = mindone.diffusers.DDIMPipeline.from_pretrained(folder)
        images = pipeline(...)

``xrand.patched()`` (and ``xrand.patched("mindone.diffusers")``) puts the fallbacks in place when
MindSpore targets the CPU, takes them out again at the end of the block, and launches
synchronously with oneDNN at AVX2 (:func:`launch_synchronously`; the kernel threads stay as the
process has them): enter it before the pipelines load.

The fallbacks compile in MindSpore's graph mode too (each Cell compiled on its first call);
one, mindone's GEGLU (Stable Diffusion's feed-forward), is there for graph mode only. Those for
Tensor methods (nonzero, lerp, repeat_interleave, clone) act in PyNative only: graph mode
compiles a Tensor method to MindSpore's own primitive, so the transformers of SD3, Flux and Wan
stop there at Chunk (``Tensor.chunk``) and PixArt's at RepeatInterleaveInt.

On a CPU, :func:`tune_cpu_runtime` matters as much as the fallbacks: synchronous launch (the digits
model's PyNative steps about 10x faster) and MindSpore's oneDNN at AVX2 (:func:`cap_onednn_isa`), where its
Conv2D runs as a GEMM and replaces the im2col fallback. Speeds against torch are in
benchmarks/RESULTS.md, figure 5.

Modules: :mod:`.ops` (the stand-ins and where each goes), :mod:`.install` (putting them in
place and back), :mod:`.runtime` (launch, threads, oneDNN's instruction set).
"""
from .install import cpu_fallbacks, half_precision, install, installed, uninstall
from .runtime import (cap_onednn_isa, cpu_threads, kernel_threads_pinned, launch_synchronously, launches_asynchronously,
                      onednn_isa, threads_to_set, tune_cpu_runtime)

__all__ = ["cap_onednn_isa", "cpu_fallbacks", "cpu_threads", "half_precision", "install", "installed",
           "kernel_threads_pinned", "launch_synchronously", "launches_asynchronously", "onednn_isa", "threads_to_set",
           "tune_cpu_runtime", "uninstall"]
