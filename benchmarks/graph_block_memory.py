"""What MindSpore's graph mode keeps beyond the weights, block by block (the numbers behind
xrand.frameworks.mindspore.PYNATIVE_ABOVE_BYTES and the README's graph-mode memory).

    python benchmarks/graph_block_memory.py [--size 256] [BLOCK ...]

One process: figure 10's SD-1.5-sized folder's UNet loaded with mindone.diffusers on the CPU,
called once in PyNative at ``--size`` pixels (latents size/8, a batch of 2 as classifier-free
guidance runs it) to catch each block's inputs; then each BLOCK (a dotted path in the UNet,
``unet`` for the whole UNet; default a ResNet block and the first attention block) called once
in graph mode as a comparison runs it (xrand.frameworks.mindspore_graph: graph-mode calls,
Linear weights stored transposed), one after the other. Printed per block: its parameters and
what the process's resident memory grew by over its call, after giving the C heap's free memory
back (malloc_trim).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_common import tree_rss  # noqa: E402
from bench_scale import model_folder  # noqa: E402

BLOCKS = ["down_blocks.1.resnets.1", "down_blocks.0.attentions.0"]


def rss_gib() -> float:
    return tree_rss(os.getpid()) / 2 ** 30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--model-dir", default=os.path.join(tempfile.gettempdir(), "xrand-sd15-sized"))
    parser.add_argument("blocks", nargs="*", default=BLOCKS)
    args = parser.parse_args()

    from xrand.compare.stages import trim_heap
    from xrand.frameworks import framework
    from xrand.frameworks.quiet import silenced

    with silenced():
        import mindspore as ms
        from mindone.diffusers import UNet2DConditionModel
    import xrand.frameworks.mindspore_graph as graph

    framework("mindspore").prepare()
    with silenced():
        unet = UNet2DConditionModel.from_pretrained(model_folder(Path(args.model_dir)), subfolder="unet",
                                                    mindspore_dtype=ms.float32)

    def block(path):
        module = unet
        for part in path.split(".") if path != "unet" else ():
            module = module[int(part)] if part.isdigit() else getattr(module, part)
        return module

    blocks = [block(path) for path in args.blocks]
    inputs = {}
    originals = {type(b): type(b).construct for b in blocks}
    for cls, construct in originals.items():
        def catching(self, *a, _construct=construct, **k):
            if any(self is b for b in blocks) and id(self) not in inputs:
                inputs[id(self)] = (a, k)
            return _construct(self, *a, **k)
        cls.construct = catching
    rng = np.random.default_rng(0)
    latent = args.size // 8
    unet(ms.Tensor(rng.standard_normal((2, 4, latent, latent)).astype(np.float32)), ms.Tensor(500, ms.int64),
         encoder_hidden_states=ms.Tensor(rng.standard_normal((2, 77, 768)).astype(np.float32)), return_dict=False)
    for cls, construct in originals.items():
        cls.construct = construct
    gc.collect()

    ms.set_context(mode=ms.GRAPH_MODE)
    print(f"{args.size}x{args.size}, MindSpore {ms.__version__}: block, parameters (GiB), kept after its graph-mode call (GiB)")
    with graph.graph_mode_calls(), graph.linear_weights_transposed(blocks):
        for path, module in zip(args.blocks, blocks):
            a, k = inputs[id(module)]
            trim_heap()
            before = rss_gib()
            module(*a, **k)
            trim_heap()
            params = sum(p.nbytes for p in module.get_parameters()) / 2 ** 30
            print(f"{path} ({type(module).__name__}): {params:.3f}, {rss_gib() - before:+.3f}", flush=True)


if __name__ == "__main__":
    main()
