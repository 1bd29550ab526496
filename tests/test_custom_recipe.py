"""A pipeline xrand has never seen, added by a recipe written here and nowhere else.

The denoiser is a tiny transformer written below twice, for torch and for MindSpore, with the
same submodule names; its folder holds one safetensors file both load. A flow-matching
scheduler drives it through xrand's generic loop. Free running, lockstep, the noise floor and
layers all run on it without a line of xrand knowing it exists.
"""
import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
ms = pytest.importorskip("mindspore")
pytest.importorskip("mindone.diffusers")

from mindspore import mint, ops  # noqa: E402

from xrand.compare import LayerOptions, compare_frameworks, make_plan  # noqa: E402
from xrand.pipelines.recipes import RECIPES, Recipe, register_recipe  # noqa: E402
from xrand.pipelines.schedulers import FLOW  # noqa: E402
from xrand.pipelines.settings import Settings  # noqa: E402

CONFIG = dict(channels=4, width=32, heads=2, depth=2, size=8)
WEIGHTS = "diffusion_pytorch_model.safetensors"


# -- the denoiser, in torch ------------------------------------------------------------------------------------
class TorchAttention(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.out = (torch.nn.Linear(width, width) for _ in range(4))

    def forward(self, x):
        b, n, w = x.shape
        q, k, v = (f(x).reshape(b, n, self.heads, -1).transpose(1, 2) for f in (self.q, self.k, self.v))
        weights = torch.softmax(q @ k.transpose(-1, -2) / (w // self.heads) ** 0.5, dim=-1)
        return self.out((weights @ v).transpose(1, 2).reshape(b, n, w))


class TorchBlock(torch.nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.attn = TorchAttention(width, heads)
        self.ff_in, self.ff_out = torch.nn.Linear(width, 2 * width), torch.nn.Linear(2 * width, width)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ff_out(torch.nn.functional.gelu(self.ff_in(self.norm2(x))))


class TorchTinyTransformer(torch.nn.Module):
    def __init__(self, channels, width, heads, depth, size):
        super().__init__()
        self.proj_in, self.time_in = torch.nn.Linear(channels, width), torch.nn.Linear(1, width)
        self.blocks = torch.nn.ModuleList(TorchBlock(width, heads) for _ in range(depth))
        self.norm_out, self.proj_out = torch.nn.LayerNorm(width), torch.nn.Linear(width, channels)

    def forward(self, sample, timestep, return_dict=False):
        b, c, h, w = sample.shape
        t = (timestep.float() / 1000).reshape(-1, 1).expand(b, 1).to(sample.dtype)
        x = self.proj_in(sample.flatten(2).transpose(1, 2)) + self.time_in(t)[:, None]
        for block in self.blocks:
            x = block(x)
        return (self.proj_out(self.norm_out(x)).transpose(1, 2).reshape(b, c, h, w),)


# -- the same denoiser, in MindSpore ----------------------------------------------------------------------------
class MsLayerNorm(ms.nn.Cell):
    def __init__(self, width):
        super().__init__()
        self.weight = ms.Parameter(ms.tensor(np.ones(width, np.float32)), name="weight")
        self.bias = ms.Parameter(ms.tensor(np.zeros(width, np.float32)), name="bias")

    def construct(self, x):
        mean = x.mean(-1, keep_dims=True)
        var = ((x - mean) ** 2).mean(-1, keep_dims=True)
        return (x - mean) / ops.sqrt(var + 1e-5) * self.weight + self.bias


class MsAttention(ms.nn.Cell):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.out = (mint.nn.Linear(width, width) for _ in range(4))

    def construct(self, x):
        b, n, w = x.shape
        q = self.q(x).reshape(b, n, self.heads, -1).swapaxes(1, 2)
        k = self.k(x).reshape(b, n, self.heads, -1).swapaxes(1, 2)
        v = self.v(x).reshape(b, n, self.heads, -1).swapaxes(1, 2)
        weights = ops.softmax(ops.matmul(q, k.swapaxes(-1, -2)) / (w // self.heads) ** 0.5, -1)
        return self.out(ops.matmul(weights, v).swapaxes(1, 2).reshape(b, n, w))


class MsBlock(ms.nn.Cell):
    def __init__(self, width, heads):
        super().__init__()
        self.norm1, self.norm2 = MsLayerNorm(width), MsLayerNorm(width)
        self.attn = MsAttention(width, heads)
        self.ff_in, self.ff_out = mint.nn.Linear(width, 2 * width), mint.nn.Linear(2 * width, width)

    def construct(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ff_out(ops.gelu(self.ff_in(self.norm2(x)), approximate="none"))


class MsTinyTransformer(ms.nn.Cell):
    def __init__(self, channels, width, heads, depth, size):
        super().__init__()
        self.proj_in, self.time_in = mint.nn.Linear(channels, width), mint.nn.Linear(1, width)
        self.blocks = ms.nn.CellList([MsBlock(width, heads) for _ in range(depth)])
        self.norm_out, self.proj_out = MsLayerNorm(width), mint.nn.Linear(width, channels)

    def construct(self, sample, timestep, return_dict=False):
        b, c, h, w = sample.shape
        t = (timestep.astype(ms.float32) / 1000).reshape(-1, 1).broadcast_to((b, 1)).astype(sample.dtype)
        x = self.proj_in(sample.reshape(b, c, h * w).swapaxes(1, 2)) + self.time_in(t)[:, None]
        for block in self.blocks:
            x = block(x)
        return (self.proj_out(self.norm_out(x)).swapaxes(1, 2).reshape(b, c, h, w),)


# -- the recipe ---------------------------------------------------------------------------------------------------
class TinyPipe:
    """What the recipe loads: the components by name, as a library pipeline holds them."""

    device = "cpu"

    def __init__(self, transformer):
        self.transformer = transformer
        self.scheduler = None  # each run builds its own

    @property
    def components(self):
        return {"transformer": self.transformer, "scheduler": self.scheduler}


class TinyTransformerRecipe(Recipe):
    pipeline = "TinyTransformerPipeline"
    denoiser = "transformer"
    denoiser_classes = ("TinyTransformer",)
    components = ("transformer", "scheduler")
    scheduler_kind = FLOW
    native_schedulers = ()  # no library pipeline: xrand's generic loop runs it

    def load(self, fw, folder, dtype, device):
        from safetensors.numpy import load_file

        weights = load_file(os.path.join(folder.path, "transformer", WEIGHTS))
        config = dict(folder.config("transformer"))
        config.pop("_class_name")
        if fw.name == "torch":
            model = TorchTinyTransformer(**config)
            model.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()})
            return TinyPipe(model.to(getattr(torch, dtype)).eval())
        model = MsTinyTransformer(**config)
        for name, param in model.parameters_and_names():
            param.set_data(ms.tensor(weights[name], dtype=getattr(ms, dtype)))
        return TinyPipe(model)

    def latent_shape(self, settings, folder):
        config = folder.config("transformer")
        return (settings.batch_size, config["channels"], config["size"], config["size"])

    def decode(self, fw, pipe, latents):
        return np.clip(fw.to_numpy(latents)[:, :3] / 2 + 0.5, 0, 1).transpose(0, 2, 3, 1)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder as save_pretrained would write it: model_index.json, the transformer's config and
    weights, a flow-matching scheduler's config."""
    from diffusers import FlowMatchEulerDiscreteScheduler
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("custom") / "model"
    (root / "transformer").mkdir(parents=True)
    torch.manual_seed(0)
    save_file(TorchTinyTransformer(**CONFIG).state_dict(), str(root / "transformer" / WEIGHTS))
    (root / "transformer" / "config.json").write_text(json.dumps(dict(CONFIG, _class_name="TinyTransformer")))
    FlowMatchEulerDiscreteScheduler(shift=3.0).save_pretrained(str(root / "scheduler"))
    (root / "model_index.json").write_text(json.dumps({
        "_class_name": "TinyTransformerPipeline", "transformer": ["tests", "TinyTransformer"],
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"]}))
    return str(root)


@pytest.fixture(scope="module")
def comparison(folder):
    saved = dict(RECIPES)
    register_recipe(TinyTransformerRecipe())
    try:
        settings = Settings(model=folder, steps=4, seed=2, batch_size=2)
        yield compare_frameworks(settings, lockstep=True, noise_floor=True, layers=LayerOptions(step=2))
    finally:
        RECIPES.clear()
        RECIPES.update(saved)


def test_free_running_agrees_from_the_same_noise(comparison):
    c = comparison
    assert c.ran["a"]["pipeline"] == "denoising_loop" and c.ran["a"]["scheduler"] == "FlowMatchEulerDiscreteScheduler"
    assert c.initial_noise["max_abs"] == 0.0
    assert len(c.global_steps) == 4 and c.passed and 0 < c.final["rel_l2"] < 1e-5, c.verdict()
    assert c.environments["b"]["mindspore_mode"] == "graph"


def test_lockstep_feeds_each_step_the_torch_values(comparison):
    assert [r["timestep"] for r in comparison.local_steps] == comparison.timesteps
    assert all(0 <= r["sample"]["rel_l2"] < 1e-5 and r["model_output"]["rel_l2"] < 1e-5
               for r in comparison.local_steps)


def test_the_noise_floor_ran_the_recipe_in_float64(comparison):
    floor = comparison.noise_floor
    assert 0 < floor["rel_l2"] < 1e-5
    assert "TinyTransformerPipeline with FlowMatchEulerDiscreteScheduler (--steps 4)" in floor["how"]


def test_layers_match_every_submodule_by_name(comparison):
    layers = comparison.layers
    assert layers.step == 2 and layers.timestep == pytest.approx(comparison.timesteps[2])
    assert layers.unmatched == {"torch": [], "mindspore": []}
    labels = [m.label for m in layers.modules]
    assert labels[0] == "" and "blocks.1.attn.q" in labels and "blocks.0.ff_out" in labels
    assert layers.modules[0].type == "TorchTinyTransformer"
    assert layers.culprit is None, layers.summary()


def test_the_recipe_refuses_a_scheduler_of_the_other_kind(folder, monkeypatch):
    monkeypatch.setitem(RECIPES, "TinyTransformerPipeline", TinyTransformerRecipe())
    with pytest.raises(ValueError, match="scheduler EulerDiscreteScheduler cannot drive TinyTransformerPipeline, a "
                                         "flow-matching"):
        make_plan(Settings(model=folder, scheduler="euler"))
