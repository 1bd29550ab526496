"""The README's measured numbers, made by the comparisons behind them: each block of README.md (and
docs/scheduler-matrix.md) between ``<!-- numbers: NAME -->`` and ``<!-- /numbers -->`` is what
the generator NAME below writes from a run of this checkout's xrand.

    python scripts/readme_numbers.py                 # run every block's comparisons, rewrite the blocks
    python scripts/readme_numbers.py --only NAME     # one block (repeatable)
    python scripts/readme_numbers.py --check         # print the blocks that differ, exit 1; nothing written
    python scripts/readme_numbers.py --models DIR    # keep the tiny model folders in DIR (default: a temp dir)
    python scripts/readme_numbers.py --list          # the block names

CPU, one kernel thread: the thread count changes the last bits (xrand/pipelines/threads.py picks
it by the machine's load), so this sets ``OMP_NUM_THREADS=1`` before torch or MindSpore is
imported, and the numbers are the same on a loaded machine. Every block's comparisons take about
15 minutes on one core; tests/test_readme_numbers.py remakes the cheap ones. Timings and memory
are not here: they are benchmarks/RESULTS.md's.
"""
from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"  # before torch and MindSpore are imported: the numbers' last bits

import argparse
import difflib
import importlib.util
import re
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The files whose blocks this script writes.
FILES = ("README.md", "docs/scheduler-matrix.md")
BLOCK = re.compile(r"<!-- numbers: ([\w-]+) -->(.*?)<!-- /numbers -->", re.S)
WIDTH = 100  # README's line width

#: name -> generator (``models`` -> the block's text)
GENERATORS: Dict[str, Callable[["Models"], str]] = {}


def block(name: str):
    def register(fn):
        GENERATORS[name] = fn
        return fn
    return register


# -- formatting --------------------------------------------------------------------------------

def g(x: float, digits: int = 3) -> str:
    """As the verdicts and tables write a number: ``2.79e-06``, ``0.00104``, ``19``."""
    return f"{x:.{digits}g}"


def short(x: float, digits: int = 3) -> str:
    """As README's prose writes one: ``2.79e-6`` (no zero in the exponent)."""
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + m.group(1).replace("+", "") + m.group(2), g(x, digits))


def sci(x: float, digits: int = 1) -> str:
    """A limit or a rounded figure as README writes it: ``5e-3``, ``7.5e-3``."""
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + m.group(1).replace("+", "") + m.group(2),
                  f"{x:.{digits - 1}e}")


def prose(text: str, indent: str = "") -> str:
    """A block of prose: from the line after the start marker, wrapped to README's width, the end
    marker right after its last word."""
    return "\n" + textwrap.fill(text, WIDTH, initial_indent=indent, subsequent_indent=indent,
                                break_long_words=False, break_on_hyphens=False)


def table(header: List[str], rows: List[List[str]]) -> str:
    """A block of one table, blank lines around it."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["|" + "|".join(f" {cell} " if cell else " " for cell in row) + "|" for row in rows]
    return "\n\n" + "\n".join(lines) + "\n\n"


def ratio(c) -> str:
    """The final relative L2 over torch's floor, as the verdict writes it: ``3.7x``."""
    return g(c.final["rel_l2"] / c.noise_floor["rel_l2"]) + "x"


def verdict(c) -> str:
    return "PASS" if c.passed else "FAIL"


# -- what the comparisons run on ---------------------------------------------------------------

class Models:
    """The tiny model folders (``python -m xrand.models NAME FOLDER``) and input files, each built
    once into ``root``; each comparison once (:meth:`compare`, by a key)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._runs: Dict[str, object] = {}

    def folder(self, name: str, variant: Optional[str] = None) -> str:
        from contextlib import redirect_stdout

        from xrand.models.__main__ import main

        folder = self.root / (f"tiny-{name}" + (f"-{variant}" if variant else ""))
        if not (folder / "model_index.json").exists():
            with redirect_stdout(sys.stderr):  # what it prints is no block's
                done = main([name, str(folder)] + (["--variant", variant] if variant else []))
            if done != 0:
                raise SystemExit(f"python -m xrand.models {name} {folder} failed")
        return str(folder)

    def single_file(self, name: str) -> str:
        from xrand.models.checkpoints import save_single_file

        path = self.root / f"tiny-{name}.safetensors"
        if not path.exists():
            save_single_file(self.folder(name), path)
        return str(path)

    def inputs(self) -> Dict[str, str]:
        """A 32x32 input image (random pixels, seed 0) and a mask (white: repaint the middle), as
        the tests make them."""
        import numpy as np
        from PIL import Image

        image, mask = self.root / "image.png", self.root / "mask.png"
        if not image.exists() or not mask.exists():
            Image.fromarray((np.random.default_rng(0).random((32, 32, 3)) * 255).astype(np.uint8)).save(image)
            pixels = np.zeros((32, 32), np.uint8)
            pixels[8:24, 8:24] = 255
            Image.fromarray(pixels).save(mask)
        return {"image": str(image), "mask": str(mask)}

    def compare(self, key: str, settings, **plan):
        """``compare_frameworks(make_plan(settings, noise_floor=True, **plan))``, once per key."""
        if key not in self._runs:
            from xrand import quiet
            from xrand.compare import compare_frameworks, make_plan

            plan.setdefault("noise_floor", True)
            with quiet():
                self._runs[key] = compare_frameworks(make_plan(settings, **plan))
            print(f"  {key}: {self._runs[key].verdict()}", file=sys.stderr, flush=True)
        return self._runs[key]

    def once(self, key: str, make: Callable[[], object]):
        if key not in self._runs:
            self._runs[key] = make()
        return self._runs[key]


def settings(**values):
    from xrand.pipelines.settings import Settings

    return Settings(**values)


# -- the default compare (README: the noise floor bullet) ---------------------------------------

def default_compare(models: Models):
    """``xrand compare`` with no arguments: the digits model, 50 steps, batch 4, the noise floor."""
    from xrand.cli import default_model

    return models.compare("default", settings(model=default_model()))


@block("default-compare")
def default_compare_text(models: Models) -> str:
    from xrand.compare.result import floor_ratio_text

    c = default_compare(models)
    quoted = floor_ratio_text(c.final["rel_l2"], c.noise_floor["rel_l2"]).rsplit(" (", 1)[0]  # the floor given below
    return prose(f'"{quoted}" (`xrand compare`\'s defaults: digits, {c.settings.steps} steps, batch '
                 f'{c.settings.batch_size}: MindSpore {short(c.final["rel_l2"])}, torch float32 vs float64 '
                 f'{short(c.noise_floor["rel_l2"])}).', "  ")


# -- what made them ---------------------------------------------------------------------------

#: The libraries whose versions the numbers' last bits depend on: (distribution, as README names it).
LIBRARIES = (("torch", "torch"), ("mindspore", "MindSpore"), ("diffusers", "diffusers"), ("mindone", "mindone"),
             ("transformers", "transformers"), ("numpy", "NumPy"))


def versions() -> Dict[str, str]:
    """distribution -> its installed version, without a local part (``2.13.0+cpu``: ``2.13.0``)."""
    from importlib.metadata import version

    return {name: version(name).split("+")[0] for name, _ in LIBRARIES}


def cpu_kernels() -> str:
    """The widest vector instructions torch's CPU kernels use on this machine (``AVX512``, ``AVX2``):
    torch's float32 results, and so every ratio to its floor, move with them."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


@block("versions")
def versions_text(models: Models) -> str:
    installed = versions()
    return prose("with " + ", ".join(f"{said} {installed[name]}" for name, said in LIBRARIES)
                 + f", on a CPU where torch's kernels use {cpu_kernels()}.", "  ")


# -- precision: the dtype table ---------------------------------------------------------------

#: (model label, dtype label, tiny folder (None: digits), dtype, component dtypes)
DTYPE_ROWS = [
    ("digits", "float32", None, "float32", {}),
    ("digits", "float16", None, "float16", {}),
    ("digits", "bfloat16", None, "bfloat16", {}),
    ("tiny SD", "float32", "sd", "float32", {}),
    ("tiny SD", "bfloat16", "sd", "bfloat16", {}),
    ("tiny SD", "bfloat16, `--component-dtype vae=float32`", "sd", "bfloat16", {"vae": "float32"}),
    ("tiny SD", "bfloat16, vae and text_encoder float32", "sd", "bfloat16",
     {"vae": "float32", "text_encoder": "float32"}),
    ("tiny SD3", "float32", "sd3", "float32", {}),
    ("tiny SD3", "float16", "sd3", "float16", {}),
    ("tiny SD3", "bfloat16", "sd3", "bfloat16", {}),
    ("tiny Flux", "float32", "flux", "float32", {}),
    ("tiny Flux", "float16", "flux", "float16", {}),
    ("tiny Flux", "bfloat16", "flux", "bfloat16", {}),
]


def dtype_compare(models: Models, row: Tuple):
    """One row of the precision table: CPU, seed 0, 10 steps; digits batch 2 with its DDIM; tiny
    SD batch 1, "a red circle", PNDM; tiny SD3 and Flux the same at 32x32, 32 T5 tokens."""
    from xrand.cli import default_model

    model, label, tiny, dtype, components = row
    if tiny is None:
        values = dict(model=default_model(), batch_size=2)
    else:
        values = dict(model=models.folder(tiny), batch_size=1, prompt="a red circle")
        if tiny in ("sd3", "flux"):
            values.update(height=32, width=32, call_options={"max_sequence_length": 32})
    return models.compare(f"dtype {model} {label}",
                          settings(steps=10, seed=0, dtype=dtype, component_dtypes=dict(components), **values))


def dtype_row(models: Models, row: Tuple) -> List[str]:
    c = dtype_compare(models, row)
    return [row[0], row[1], g(c.final["rel_l2"]), g(c.noise_floor["rel_l2"]), ratio(c),
            f"{verdict(c)} ({sci(c.tolerance)})"]


DTYPE_HEADER = ["model", "dtype", "final rel L2", "torch's floor at that dtype", "ratio",
                "verdict (default tolerance)"]


@block("dtype-table")
def dtype_table(models: Models) -> str:
    return table(DTYPE_HEADER, [dtype_row(models, row) for row in DTYPE_ROWS])


@block("bfloat16-floors")
def bfloat16_floors(models: Models) -> str:
    """The bfloat16 rows' floors against bfloat16's default tolerance."""
    from xrand.compare import DEFAULT_TOLERANCE

    floors = [dtype_compare(models, row).noise_floor["rel_l2"] for row in DTYPE_ROWS if row[3] == "bfloat16"]
    tolerance = DEFAULT_TOLERANCE["bfloat16"]
    low, high = round(tolerance / max(floors)), round(tolerance / min(floors))
    return prose(f"bfloat16 takes {sci(tolerance)} too: its measured floors above (about {sci(min(floors), 2)} "
                 f"to {sci(max(floors), 2)}) sit {low} to {high}x below it, so a run fails there only at {low}x or "
                 f"more torch's own bfloat16 error.")


@block("flux-float32-ratio")
def flux_float32_ratio(models: Models) -> str:
    [row] = [row for row in DTYPE_ROWS if row[2] == "flux" and row[3] == "float32"]
    return prose(f"Flux's float32 row is {ratio(dtype_compare(models, row))} its floor mostly because of mindone's "
                 "sinusoidal timestep and guidance")


@block("mixed-precision")
def mixed_precision(models: Models) -> str:
    """The tiny SD bfloat16 rows with and without the VAE in float32."""
    plain, vae = (dtype_compare(models, row) for row in DTYPE_ROWS if row[2] == "sd" and row[3] == "bfloat16"
                  and row[4] in ({}, {"vae": "float32"}))
    gap = 1 - vae.final["rel_l2"] / plain.final["rel_l2"]
    floor = 1 - vae.noise_floor["rel_l2"] / plain.noise_floor["rel_l2"]
    return prose(f"Measured (the table's tiny SD rows, same command with the flags): keeping the VAE in float32 "
                 f"lowers the gap by {gap:.0%} and torch's own floor by {floor:.0%}, the ratio "
                 f"{ratio(plain)} against {ratio(vae)}.", "  ")


@block("native-noise")
def native_noise(models: Models) -> str:
    """The digits model, 10 steps, batch 2, no floor: the shared noise against each library's own."""
    from xrand.cli import default_model

    values = dict(model=default_model(), steps=10, batch_size=2, seed=0)
    shared = models.compare("native-noise shared", settings(**values), noise_floor=False)
    native = models.compare("native-noise native", settings(noise="native", **values), noise_floor=False)
    return prose(f"(CPU, seed 0, 10 steps, batch 2, `--no-noise-floor`): shared noise rel L2 "
                 f"{g(shared.final['rel_l2'])} ({verdict(shared)}), native noise {g(native.final['rel_l2'])} "
                 f"({verdict(native)}, PSNR {native.final['psnr_db']:.1f} dB): two different pictures from one seed.",
                 "  ")


# -- schedulers on tiny SD ---------------------------------------------------------------------

SD_SCHEDULERS = [  # label, scheduler (None: the folder's), options
    ("PNDMScheduler (the folder's)", None, {}),
    ("EulerAncestralDiscreteScheduler", "euler-a", {}),
    ("DPMSolverMultistepScheduler sde-dpmsolver++", "DPMSolverMultistepScheduler",
     {"algorithm_type": "sde-dpmsolver++"}),
    ("DPMSolverSDEScheduler (Brownian tree)", "DPMSolverSDEScheduler", {}),
    ("UniPCMultistepScheduler", "UniPCMultistepScheduler", {}),
]


@block("tiny-sd-schedulers")
def tiny_sd_schedulers(models: Models) -> str:
    """10 steps, batch 2, 32x32, guidance 7.5, fp32, PyNative, lockstep, a negative prompt."""
    rows = []
    for label, scheduler, options in SD_SCHEDULERS:
        c = models.compare(f"tiny SD {label}", settings(
            model=models.folder("sd"), prompt="a red circle on a blue square", negative_prompt="blurry", steps=10,
            batch_size=2, seed=0, scheduler=scheduler, scheduler_options=options),
            lockstep=True, noise_floor=False, mindspore_mode="pynative")
        rows.append([label, str(c.ran["a"]["noise_draws"]), g(c.final["rel_l2"], 2), g(c.final["max_abs"], 2),
                     g(max(s["sample"]["rel_l2"] for s in c.local_steps), 2), verdict(c)])
    return table(["scheduler", "noise draws during steps", "final rel L2", "max \\|diff\\|", "lockstep max rel L2",
                  "verdict"], rows)


# -- pipeline families -------------------------------------------------------------------------

T = dict(height=32, width=32, call_options={"max_sequence_length": 32})
FAMILIES = [  # label, tiny folder, settings beyond the shared ones (inputs: "image", "mask")
    ("SD image to image", "sd", dict(pipeline="StableDiffusionImg2ImgPipeline", image=True, strength=0.5)),
    ("SD inpainting (9-channel UNet)", "sd-inpaint", dict(image=True, mask=True, strength=0.5, height=32, width=32)),
    ("SDXL", "sdxl", dict(height=32, width=32)),
    ("SDXL image to image", "sdxl", dict(pipeline="StableDiffusionXLImg2ImgPipeline", image=True, strength=0.5)),
    ("SDXL inpainting (4-channel UNet)", "sdxl", dict(pipeline="StableDiffusionXLInpaintPipeline", image=True,
                                                      mask=True, strength=0.5, height=32, width=32)),
    ("SD3", "sd3", dict(T)),
    ("Flux", "flux", dict(T)),
    ("Flux image to image", "flux", dict(T, pipeline="FluxImg2ImgPipeline", image=True, strength=0.5)),
    ("Flux Kontext", "flux", dict(T, pipeline="FluxKontextPipeline", image=True,
                                  call_options={"max_sequence_length": 32, "_auto_resize": False, "max_area": 1024})),
    ("PixArt-Sigma", "pixart", dict(T, call_options={"max_sequence_length": 32, "use_resolution_binning": False})),
    ("Wan, 5 frames of 32x32", "wan", dict(T, frames=5)),
    ("LTX-Video, 9 frames of 32x32", "ltx", dict(T, frames=9)),
]


def family_compare(models: Models, label: str):
    """The README's command for the family: 10 steps, batch 1, lockstep, the noise floor."""
    [(label, tiny, values)] = [family for family in FAMILIES if family[0] == label]
    values = dict(values)
    for name in ("image", "mask"):
        if values.get(name):
            values[name] = models.inputs()[name]
    return models.compare(f"family {label}", settings(
        model=models.folder(tiny), prompt="a red circle on a blue square", steps=10, batch_size=1, seed=0, **values),
        lockstep=True)


@block("families")
def families(models: Models) -> str:
    from xrand.compare.boundary import largest_local_error

    rows = []
    for label, _, _ in FAMILIES:
        c = family_compare(models, label)
        local = largest_local_error(c.local_steps)
        rows.append([label, str(len(c.timesteps)), g(c.final["rel_l2"], 2),
                     f"{g(local['sample']['rel_l2'], 2)} / {g(local['model_output']['rel_l2'], 2)}",
                     g(c.noise_floor["rel_l2"], 2), c.environments["b"]["mindspore_mode"], verdict(c)])
        if label.startswith("Wan"):
            [latents] = [part for part in c.components if part["name"] == "latents"]
            rows.append(["Wan, its latents (not decoded)", str(latents["steps"]), g(latents["rel_l2"], 2), "", "", "",
                         f"{'within' if not latents['over'] else 'over'} {sci(latents['limit'])}"])
    return table(["family", "steps", "final rel L2", "lockstep max local rel L2 (step / denoiser output)",
                  "torch's float32 floor", "MindSpore ran", "verdict"], rows)


def wan(models: Models):
    return family_compare(models, "Wan, 5 frames of 32x32")


@block("wan-verdict")
def wan_verdict(models: Models) -> str:
    from xrand.compare.components import components_text

    c = wan(models)
    return prose(f"first one over it and those before it that agree: `{verdict(c)}: ... "
                 f"{components_text(c.components)}` (the tiny Wan video, the table's row).", "  ")


@block("wan-verdict-short")
def wan_verdict_short(models: Models) -> str:
    from xrand.compare.components import components_text

    said = components_text([part for part in wan(models).components if part["name"] != "prompt embeddings"])
    said = re.sub(r"\(([^,()]+), [^()]*\)$", r"(\1, ...)", said)  # the ratio to the latents' left out
    return prose(f'1e-4 rather than 1e-6); scaled as diffusers scales, the videos agree too. The verdict says so: '
                 f'"{said}".', "  ")


# -- known causes (scripts/known_causes.py) ------------------------------------------------------

KNOWN_CAUSES = [  # label, scripts/known_causes.py's family name
    ("tiny Flux", "flux"),
    ("tiny Flux image to image", "flux-img2img"),
    ("tiny Flux Kontext", "flux-kontext"),
    ("tiny Flux ControlNet", "flux-controlnet"),
    ("tiny LTX-Video", "ltx"),
    ("tiny SD3 (its attention does not go through that function)", "sd3"),
]


def known_causes_module():
    spec = importlib.util.spec_from_file_location("known_causes", ROOT / "scripts" / "known_causes.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@block("known-causes")
def known_causes(models: Models) -> str:
    module = known_causes_module()
    names = [name for _, name in KNOWN_CAUSES]
    folders = {module.FAMILIES[name][0] for name in names}
    measured = models.once("known causes", lambda: module.measure(
        names, folders={folder: models.folder(folder) for folder in folders}, image=models.inputs()["image"]))
    rows = [[label] + [g(c.final["rel_l2"] / c.noise_floor["rel_l2"]) + "x" for c in measured[name].values()]
            for label, name in KNOWN_CAUSES]
    return table(["model", "as mindone runs", "float32 attention", "torch's timestep embedding", "both"], rows)


# -- every shared scheduler on the digits model -------------------------------------------------------

def scheduler_matrix(models: Models):
    """``xrand compare --scheduler all --steps 10 --batch-size 1 --mindspore-mode pynative``."""
    def run():
        from xrand import quiet
        from xrand.cli import default_model
        from xrand.compare import make_plan
        from xrand.compare.matrix import run_matrix

        with quiet():
            return run_matrix(make_plan(settings(model=default_model(), steps=10, batch_size=1, seed=0),
                                        mindspore_mode="pynative"))
    return models.once("scheduler matrix", run)


@block("scheduler-matrix")
def scheduler_matrix_table(models: Models) -> str:
    from xrand.report.matrix import matrix_markdown

    lines = matrix_markdown(scheduler_matrix(models)).splitlines()
    return "\n\n" + "\n".join(line for line in lines if line.startswith("|")) + "\n\n"


@block("scheduler-matrix-doc")
def scheduler_matrix_doc(models: Models) -> str:
    """docs/scheduler-matrix.md: matrix.md as the command writes it."""
    from xrand.report.matrix import matrix_markdown

    return "\n" + matrix_markdown(scheduler_matrix(models)) + "\n"


@block("scheduler-matrix-count")
def scheduler_matrix_count(models: Models) -> str:
    m = scheduler_matrix(models)
    within = sum(r.rel_l2 is not None and r.rel_l2 <= m.tolerance for r in m.rows)
    rows = f"all {len(m.rows)} rows" if within == len(m.rows) else f"{len(m.rows)} rows, {within}"
    return prose(f"measured with this version), {rows} within {sci(m.tolerance)}")


# -- variants and single files ---------------------------------------------------------------------

@block("checkpoints")
def checkpoints(models: Models) -> str:
    """10 steps, batch 1, 32x32, the folder, its single file and its fp16 variant, graph mode; the
    SDXL folder of two text encoder widths and its single file."""
    values = dict(prompt="a red circle on a blue square", steps=10, batch_size=1, seed=0, height=32, width=32)
    folder = models.compare("checkpoint folder", settings(model=models.folder("sd"), **values))
    single = models.compare("checkpoint single file", settings(model=models.single_file("sd"),
                                                               config=models.folder("sd"), **values))
    fp16 = models.compare("checkpoint fp16", settings(model=models.folder("sd", "fp16"), variant="fp16", **values))
    xl_folder = models.compare("checkpoint sdxl folder", settings(model=models.folder("sdxl-wide"), **values))
    xl_single = models.compare("checkpoint sdxl single file", settings(model=models.single_file("sdxl-wide"),
                                                                      config=models.folder("sdxl-wide"), **values))

    def same(a, b):
        return a.final["rel_l2"] == b.final["rel_l2"] and a.noise_floor["rel_l2"] == b.noise_floor["rel_l2"]

    return prose(f"Measured (10 steps, batch 1, seed 0, fp32, CPU, graph mode, the commands above): the folder "
                 f"{g(folder.final['rel_l2'])} ({ratio(folder)} torch's float32 floor), the single file "
                 f"{g(single.final['rel_l2'])} "
                 f"({'the same numbers' if same(single, folder) else ratio(single) + ' its floor'}), the fp16 variant "
                 f"{g(fp16.final['rel_l2'])} ({ratio(fp16)}); SDXL (tiny-sdxl-wide): the folder "
                 f"{g(xl_folder.final['rel_l2'])} ({ratio(xl_folder)}), the single file {g(xl_single.final['rel_l2'])} "
                 f"({'the same numbers' if same(xl_single, xl_folder) else ratio(xl_single)}).")


# -- the files ----------------------------------------------------------------------------------

def blocks_in(text: str) -> List[Tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(text)]


def all_blocks() -> Dict[str, List[str]]:
    """block name -> the files (relative to the checkout) that hold it."""
    found: Dict[str, List[str]] = {}
    for name in FILES:
        for block_name, _ in blocks_in((ROOT / name).read_text()):
            found.setdefault(block_name, []).append(name)
    return found


def rewrite(text: str, made: Dict[str, str]) -> str:
    return BLOCK.sub(lambda m: m.group(0) if m.group(1) not in made else
                     f"<!-- numbers: {m.group(1)} -->{made[m.group(1)]}<!-- /numbers -->", text)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME", choices=sorted(GENERATORS),
                        help="remake this block only (repeatable)")
    parser.add_argument("--check", action="store_true", help="print the blocks that differ and exit 1; write nothing")
    parser.add_argument("--models", metavar="DIR", help="the tiny model folders, built once (default: a temp dir)")
    parser.add_argument("--list", action="store_true", help="print the block names and their files")
    args = parser.parse_args(argv)
    found = all_blocks()
    if args.list:
        for name in GENERATORS:
            print(f"{name}: {', '.join(found.get(name, ['(in no file)']))}")
        return 0
    missing = sorted(set(found) - set(GENERATORS)) + sorted(set(GENERATORS) - set(found))
    if missing:
        print(f"blocks without a generator or generators without a block: {', '.join(missing)}", file=sys.stderr)
        return 2
    models = Models(Path(args.models) if args.models else Path(tempfile.mkdtemp(prefix="xrand-readme-numbers-")))
    made = {}
    for name in args.only or list(GENERATORS):
        print(f"{name} ...", file=sys.stderr, flush=True)
        made[name] = GENERATORS[name](models)
    differ = 0
    for file in FILES:
        path = ROOT / file
        text = path.read_text()
        new = rewrite(text, made)
        for name, old in blocks_in(text):
            if name in made and made[name] != old:
                differ += 1
                print(f"{file}: block {name} differs from what the code gives:")
                sys.stdout.writelines(difflib.unified_diff((old + "\n").splitlines(True), (made[name] + "\n").splitlines(True),
                                                           file, "measured"))
                print()
        if new != text and not args.check:
            path.write_text(new)
    if args.check:
        return 1 if differ else 0
    print(f"{differ} block(s) rewritten", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
