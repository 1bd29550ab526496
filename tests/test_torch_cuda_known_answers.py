"""The torch-cuda stream against values people printed from real NVIDIA GPUs (docs/torch-cuda.md).

Each source printed float32 values to 4 decimals, so each comparison allows half a unit in the
last printed place (5e-5). Every print here is the first draw of a fresh CUDA generator: either
``torch.Generator("cuda").manual_seed(s)`` or ``torch.manual_seed(s)`` (which also seeds the
CUDA default generator) with nothing drawn on the GPU in between. The last test compares with
AUTOMATIC1111's CPU emulation, which is not GPU output.
"""
import numpy as np
import pytest

import xrand
from xrand.streams.torch_cuda import GPUS

PRINTED = 5e-5  # half a unit in the 4th decimal


def _normal(seed, shape, **geometry):
    return xrand.Generator(seed, stream="torch-cuda", **geometry).normal(shape, "float32")


def _corners(a):
    """The corners torch prints for a large 2-D tensor: 3 rows x (first 3 + last 3) columns."""
    return np.concatenate([np.concatenate([a[:3, :3], a[:3, -3:]], axis=1),
                           np.concatenate([a[-3:, :3], a[-3:, -3:]], axis=1)])


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_pytorch_issue_79496_seed10_randn3(gpu):
    """pytorch/pytorch#79496: torch.manual_seed(10); torch.randn(3, device="cuda").

    torch 1.11.0+cu113 under WSL2; GPU model not in the issue text read. Three values: one
    Philox thread each, so every GPU gives them.
    """
    np.testing.assert_allclose(_normal(10, (3,), gpu=gpu), [-0.1029, 1.6810, -0.2708], atol=PRINTED)


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_cuda_mode_lecture_seed0_consecutive_draws(gpu):
    """kapilsh/cuda-mode-lecture FusedKernels.ipynb (commit 7e512fc), cell 19, triton 2.2.0.

    ``get_inputs`` (kernels/triton_fused_add_mul_relu.py, same commit): torch.manual_seed(0),
    then x = randn(8, 8), y = randn(8, 8), b = randn(1, 8), float32 on "cuda". The notebook
    prints x and max(x + 0.5 y + b, 0), so y and b check the offset moving on by 4 per draw.
    An sm_75 (Turing) card by the extension build flags; 64 values, so any GPU.
    """
    x_printed = [
        [-0.9247, -0.4253, -2.6438, 0.1452, -0.1209, -0.5797, -0.6229, -0.3284],
        [-1.0745, -0.3631, -1.6711, 2.2655, 0.3117, -0.1842, 1.2866, 1.1820],
        [-0.1271, 1.2169, 1.4353, 1.0605, -0.4941, -1.4244, -0.7244, -1.2973],
        [0.0697, -0.0074, 1.8969, 0.6878, -0.0779, -0.8373, 1.3506, -0.2879],
        [-0.5965, -0.3283, -0.9086, -0.8059, -0.7407, -0.0504, 0.5435, 1.5150],
        [0.0141, 0.4532, 1.6349, 0.7124, -0.1806, 1.0252, -1.4622, -0.7554],
        [-0.1836, 0.3824, 0.3918, -0.0830, 0.8971, -1.1123, 0.1116, 0.4863],
        [-0.5499, -0.3231, -0.5469, 0.9049, 0.2837, 0.1210, 0.4730, -1.0823],
    ]
    out_printed = [
        [1.7098e+00, 0.0, 0.0, 0.0, 6.7049e-01, 0.0, 3.4424e-01, 1.1223e-02],
        [1.8750e+00, 0.0, 0.0, 2.2105e+00, 6.6808e-01, 0.0, 1.8445e+00, 1.9246e+00],
        [2.2614e+00, 1.3964e+00, 5.1802e-01, 2.0114e+00, 0.0, 0.0, 2.7715e-01, 0.0],
        [2.4750e+00, 0.0, 1.9079e+00, 5.4869e-01, 3.7923e-01, 0.0, 3.1791e+00, 6.6843e-01],
        [1.8234e+00, 0.0, 1.1147e-01, 0.0, 0.0, 0.0, 2.4250e+00, 3.2593e+00],
        [2.2903e+00, 0.0, 1.1721e+00, 6.9331e-01, 1.0583e+00, 6.7518e-01, 0.0, 2.6185e-01],
        [1.5804e+00, 0.0, 9.0740e-01, 1.6670e-01, 5.5230e-02, 0.0, 1.5325e+00, 3.5984e-01],
        [1.5554e+00, 0.0, 0.0, 9.4380e-01, 2.9795e-03, 7.4125e-02, 1.6286e+00, 0.0],
    ]
    g = xrand.Generator(0, stream="torch-cuda", gpu=gpu)
    x, y, b = g.normal((8, 8)), g.normal((8, 8)), g.normal((1, 8))
    np.testing.assert_allclose(x, x_printed, atol=PRINTED)
    np.testing.assert_allclose(np.maximum(x + np.float32(0.5) * y + b, 0), out_printed, atol=PRINTED)


def test_pytorch_issue_62467_seed43_rtx_a6000():
    """pytorch/pytorch#62467: torch.Generator("cuda:0").manual_seed(43), then
    torch.empty(1, 3, 128, 128, device="cuda:0").normal_(generator=...), elements [..., 0, 0].

    Printed on an RTX A6000 (84 SMs x 1536 threads). The printed elements (0, 16384, 32768) are
    below one wave on any GPU with more than 32,768 threads. The issue's second card, a Quadro
    M4000, printed other values that are not in the issue text read here.
    """
    noise = _normal(43, (1, 3, 128, 128), sm_count=84, max_threads_per_sm=1536)
    np.testing.assert_allclose(noise[..., 0, 0], [[1.9983, 0.8704, 2.1127]], atol=PRINTED)


def test_pytorch_issue_97097_seed14_rtx_a4000_beyond_one_wave():
    """pytorch/pytorch#97097: torch.manual_seed(14);
    torch.cuda.FloatTensor(1000, 100).normal_(5, 5**.5) (torch 2.0.0, CUDA 11.7).

    Printed on an RTX A4000 (48 SMs x 1536 = 73,728 threads): the last three rows lie beyond
    one wave, so they pin down the grid-stride mapping for that geometry. An RTX 2070 Super
    (40 x 1024) printed the same first rows and different later ones (not all in the text read).
    """
    printed = [
        [2.8731, 5.2727, 2.9889, 1.6853, 9.6331, 6.6319],
        [3.9968, 3.8097, 5.7328, 4.4029, 3.9804, 7.4698],
        [6.5552, 4.0857, 4.2315, 2.7704, 3.5479, 3.3063],
        [8.6297, 2.3137, 6.2596, 7.9358, 4.4697, 2.7475],
        [7.0551, 7.8583, 3.9990, 4.1139, 8.9315, 4.2042],
        [2.7337, 2.2106, 7.7815, 8.2207, 6.5395, 4.2604],
    ]
    std = np.float32(5**0.5)
    a4000 = _normal(14, (1000, 100), sm_count=48, max_threads_per_sm=1536) * std + np.float32(5)
    np.testing.assert_allclose(_corners(a4000), printed, atol=PRINTED)

    rtx2070s = _normal(14, (1000, 100), sm_count=40, max_threads_per_sm=1024) * std + np.float32(5)
    np.testing.assert_allclose(_corners(rtx2070s)[:3], np.array(printed)[:3], atol=PRINTED)
    assert np.abs(_corners(rtx2070s)[3:] - np.array(printed)[3:]).max() > 0.1


@pytest.mark.parametrize("gpu, tail", [
    ("H100", [-0.6970, -0.7780, 0.3267]),
    ("A100", [0.1549, -0.6797, -0.1656]),
])
def test_pytorch_issue_143086_seed1_a100_and_h100(gpu, tail):
    """pytorch/pytorch#143086: g = torch.Generator("cuda"); g.manual_seed(1);
    torch.randn(1, 49 * 12 * 112 * 144, device="cuda", generator=g) (torch 2.5.1).

    9,483,264 values, about 35 waves: the two cards share the head and differ in the tail.
    The issue says "h100" without the variant; the tail matches 132 SMs (SXM), not the PCIe
    card's 114.
    """
    values = _normal(1, (1, 49 * 12 * 112 * 144), gpu=gpu)[0]
    np.testing.assert_allclose(values[:3], [-0.2963, 2.6764, -0.1408], atol=PRINTED)
    np.testing.assert_allclose(values[-3:], tail, atol=PRINTED)
    if gpu == "H100":
        pcie = _normal(1, (1, 49 * 12 * 112 * 144), gpu="H100-PCIe")[0]
        assert np.abs(pcie[-3:] - tail).max() > 0.1


def test_pytorch_issue_158398_seed42_rtx3060_beyond_one_wave():
    """pytorch/pytorch#158398: torch.randn([1, 64, 2048], device="cuda",
    generator=torch.Generator(device="cuda").manual_seed(42)) (torch 2.7.1+cu126).

    The first print of the issue; its first environment lists an NVIDIA GeForce RTX 3060
    (28 SMs x 1536 = 43,008 threads). The last rows lie beyond one wave and match that
    geometry (no other thread count below 131,072 does); the second machine's print is not in
    the issue text read.
    """
    printed = [
        [0.1940, 2.1614, -0.1721, 1.4540, -2.7733, -0.8932],
        [-0.4574, 0.8063, 0.1580, 0.1124, 0.2769, -1.2535],
        [1.1346, -0.6329, -0.9147, -1.0001, -1.1552, -0.6955],
        [-0.4861, 0.3358, 1.0578, -0.7282, 0.5087, 0.1318],
        [0.7881, 0.8339, -1.1424, -0.6297, -1.1112, -0.4091],
        [-1.2356, -0.4083, -0.4695, -0.4841, 1.2850, -0.0282],
    ]
    noise = _normal(42, (1, 64, 2048), sm_count=28, max_threads_per_sm=1536)[0]
    np.testing.assert_allclose(_corners(noise), printed, atol=PRINTED)


# -- an emulation, not GPU output ------------------------------------------------------------

def test_agrees_with_webui_rng_philox_emulation():
    """AUTOMATIC1111/stable-diffusion-webui modules/rng_philox.py, docstring "Expected output"
    of Generator(seed=0).randn((3, 4)).

    webui's own NumPy imitation of torch's CUDA randn (one Philox block per element, Box-Muller
    in float64 NumPy cast to float32), run on a CPU: an independent implementation to compare
    with, not GPU output. Its 4-decimal roundings equal the first 12 values of the GPU
    print in test_cuda_mode_lecture_seed0_consecutive_draws.
    """
    webui = [[-0.92466259, -0.42534415, -2.6438457, 0.14518388],
             [-0.12086647, -0.57972564, -0.62285122, -0.32838709],
             [-1.07454231, -0.36314407, -1.67105067, 2.26550497]]
    for gpu in GPUS:
        np.testing.assert_allclose(_normal(0, (3, 4), gpu=gpu), webui, atol=1e-6)
