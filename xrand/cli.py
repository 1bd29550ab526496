"""Command line: ``xrand compare``, ``xrand run``, ``xrand sweep``, ``xrand doctor``.

Exit status: 0 when a comparison passes (or a command succeeds), 1 when it fails its
tolerance, 2 for a user error (one line on stderr, no traceback).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional

from .cache import installed_version
from .checks import UsageError
from .files import check_out_file, check_out_folder


def default_model() -> str:
    """The digits model shipped inside the package (trained by scripts/train_digits.py)."""
    from .models import DIGITS

    return DIGITS


def only_mindspore_here(args) -> None:
    """A command line of this process's own that runs MindSpore's side alone imports transformers
    without torch (:func:`xrand.frameworks.mindspore.import_transformers_without_torch`); a call
    of ``main`` with its arguments (a notebook, a test) may run torch's side after, so it does not."""
    if args.own_process:
        from .frameworks.mindspore import import_transformers_without_torch

        import_transformers_without_torch()


def import_frameworks(names: List[str]) -> None:
    """Import the frameworks' libraries; a Ctrl-C meanwhile stops the command once they are in
    (a MindSpore import cut short aborts the interpreter at exit)."""
    from .frameworks import framework
    from .frameworks.interrupts import interrupts_deferred

    with interrupts_deferred():
        for name in names:
            framework(name).import_library()


def _settings(args, **override):
    """The command line's settings (the flags in xrand.pipelines.flags); ``override``: fields
    that replace them."""
    from .pipelines.flags import settings_values
    from .pipelines.settings import Settings

    values = settings_values(args)
    values["model"] = values["model"] or default_model()
    return Settings(**{**values, **override})


def _plan(args, frameworks=("torch", "mindspore"), layers=None, noise_floor=None, **override):
    """The command line's settings and options, resolved once (every check before any model loads);
    ``override``: settings fields that replace the command line's."""
    from .compare.plan import make_plan
    from .frameworks.interrupts import interrupts_deferred

    if noise_floor is None:  # the floor's float64 rerun draws xrand's shared noise: not with --noise native
        noise_floor = not getattr(args, "no_noise_floor", True) and args.noise != "native"
    with interrupts_deferred():  # planning imports the libraries (see import_frameworks)
        return make_plan(_settings(args, **override), frameworks=frameworks, devices=_devices(args.device),
                         tolerance=getattr(args, "tolerance", None), mindspore_mode=args.mindspore_mode,
                         lockstep=getattr(args, "lockstep", False), layers=layers, noise_floor=noise_floor,
                         weights_check=not getattr(args, "no_weights_check", False))


def _devices(pairs: List[str]) -> Dict[str, str]:
    from .frameworks import FRAMEWORKS

    devices = {}
    for pair in pairs or []:
        framework, sep, device = pair.partition("=")
        if not sep or framework not in FRAMEWORKS or not device:
            raise UsageError(f"--device {pair!r}: expected FRAMEWORK=DEVICE with FRAMEWORK one of "
                             f"{', '.join(FRAMEWORKS)}, e.g. torch=cuda:0 or mindspore=Ascend")
        devices[framework] = device
    return devices


def _say(args, text: str) -> None:
    if not args.quiet:
        print(text, flush=True)


def cmd_compare(args) -> int:
    from .compare import compare_sides
    from .report.compare import write_report

    # normalised once: "--out out/" prints as out/report.json, not out//report.json
    out_dir = os.path.normpath(check_out_folder(args.out or time.strftime("xrand-compare-%Y%m%d-%H%M%S")))
    if args.files:
        if len(args.files) != 2:
            raise UsageError(f"compare takes two side files (from 'xrand run'), got {len(args.files)}")
        from .compare.plan import check_tolerance
        from .compare.sidefile import load_side

        if args.tolerance is not None:
            check_tolerance(args.tolerance)
        for flag, asked in (("--lockstep", args.lockstep), ("--layers", args.layers), ("--ops", args.ops is not None)):
            if asked:
                raise UsageError(f"{flag} needs torch's records, which side files do not carry; on two machines run "
                                 f"'xrand compare --only torch {flag} --out DIR' and then "
                                 "'xrand compare --only mindspore --out DIR'")
        a, b = (load_side(path) for path in args.files)
        comparison = compare_sides(a, b, args.tolerance)
    elif (args.scheduler or "").lower() == "all":
        return _compare_matrix(args, out_dir)
    else:
        return _compare_in_stages(args, out_dir)
    paths = write_report(comparison, out_dir)  # from two side files: "reproduce" derived from the report
    return _finish(args, comparison.passed, comparison.summary_lines(), "report and pictures", out_dir, paths)


#: compare's options that are not settings of the comparison: a folder that holds a comparison
#: takes every setting from its manifest when none but these is given
_NOT_SETTINGS = {"--out", "--only", "--quiet", "--device", "--mindspore-mode"}  # and the paths (flags.path_flags)
#: what each framework's stages need installed
_INSTALLED = {"torch": ("torch", "diffusers"), "mindspore": ("mindspore", "mindone")}


def _frameworks_here(only: Optional[str]) -> List[str]:
    """The frameworks whose stages run in this process: ``--only``'s, else those installed."""
    import importlib.util

    def installed(name: str) -> bool:
        try:
            return all(importlib.util.find_spec(package) is not None for package in _INSTALLED[name])
        except (ImportError, ValueError):  # a package whose import was blocked (sys.modules[name] = None)
            return False

    if only is not None:
        if not installed(only):
            raise UsageError(f"--only {only}: {' and '.join(_INSTALLED[only])} must be installed here for its stages "
                             f"(pip install 'xrand[{only}{',diffusers' if only == 'torch' else ''}]')")
        return [only]
    return [name for name in _INSTALLED if installed(name)]


def _compare_in_stages(args, out_dir: str) -> int:
    """``xrand compare`` on a model: the stages this machine runs (``--only``: one framework's),
    each kept in ``out_dir`` as it ends, the report after each; what is left for another machine
    is said with its command."""
    from .compare.stages import (Asks, Loading, Store, framework_of, mindspore_in_own_process, plan_from_manifest,
                                  read_manifest, run_stages)
    from .pipelines.flags import path_flags, settings_values
    from .report.command import manifest_command, plan_command
    from .report.compare import write_report

    frameworks = _frameworks_here(args.only)
    if frameworks == ["mindspore"]:
        only_mindspore_here(args)
    for name, device in _devices(args.device).items():
        if name not in frameworks:  # checked by the machine that runs that framework's stages
            raise UsageError(f"--device {name}={device}: {name}'s stages do not run here "
                             f"({'--only ' + args.only if args.only else ' and '.join(_INSTALLED[name]) + ' not installed'}); "
                             "give it on the machine that runs them")
    manifest = read_manifest(out_dir)
    paths = path_flags()  # files and folders: where they are on this machine
    given = sorted(flag for flag in args.given if flag not in _NOT_SETTINGS and flag not in paths)
    if manifest is not None and not given:  # every setting from the folder
        store = Store.as_written(out_dir, manifest)
        if all(store.done(stage) for stage in store.asks.stages()):  # finished: the report, from the folder alone
            frameworks = []
        if frameworks:
            values = settings_values(args)
            plan = plan_from_manifest(manifest, frameworks, {field: values[field] for field in paths.values()},
                                      devices=_devices(args.device), mindspore_mode=args.mindspore_mode,
                                      default_model=default_model())
            store = Store(plan, Asks.from_dict(manifest["asks"]), out_dir)
    else:
        if not frameworks:
            raise UsageError("neither torch with diffusers nor MindSpore with mindone is installed here; install one "
                             "(pip install 'xrand[all]'), or give --out a folder that holds a comparison to report")
        floor = not args.no_noise_floor and args.noise != "native"
        plan = _plan(args, frameworks=frameworks, layers=_layer_options(args),
                     noise_floor=floor and "torch" in frameworks)
        store = Store(plan, Asks(plan.lockstep, plan.layers, floor, plan.weights_check), out_dir)
    # report.json's "reproduce", every path absolute; the devices the other machine's stages ran on from the folder
    reproduce = (plan_command(store.plan, noise_floor=store.asks.noise_floor, manifest=store.manifest)
                 if store.plan is not None else manifest_command(store.manifest, store.tolerance))

    written = {}  # the report of the last stage run, which is the finished comparison's

    def on_stage(outcome):  # each stage's report as soon as it exists
        written.clear()
        if outcome.comparison is not None:
            written.update(write_report(outcome.comparison, out_dir, reproduce))
        left = [s for s in outcome.missing if s in here]
        if left:
            _say(args, f"xrand: {', '.join(outcome.done)} kept in {out_dir}/; next: {', '.join(left)}")

    here = [s for s in store.asks.stages() if framework_of(s) in frameworks]
    try:
        if frameworks:
            what = " and ".join({"torch": "diffusers (torch)", "mindspore": "mindone.diffusers (MindSpore)"}[fw]
                                for fw in frameworks)
            _say(args, f"xrand: {what} on {store.plan.folder.path}")
            import_frameworks([fw for fw in frameworks if not (fw == "mindspore" and mindspore_in_own_process(store))])
        outcome = run_stages(store, Loading(store.plan, quiet=args.quiet) if frameworks else None, frameworks,
                             on_stage, say=lambda text: _say(args, text))
    except KeyboardInterrupt:
        kept = [s for s in store.asks.stages() if store.done(s)]
        print(f"xrand compare: interrupted; {', '.join(kept) or 'nothing finished'} kept in {out_dir}/ "
              "(run the same command to finish)", file=sys.stderr)
        return 130
    comparison = outcome.comparison
    paths = written or (write_report(comparison, out_dir, reproduce) if comparison is not None else {})
    if outcome.missing:
        return _incomplete(args, outcome, out_dir, store.manifest["plan"])
    return _finish(args, comparison.passed, comparison.summary_lines(), "report and pictures", out_dir, paths)


def _incomplete(args, outcome, out_dir: str, plan: Dict[str, Any]) -> int:
    """Stages are left for another machine: say which, how large the folder is, and the command
    (with the flags that give the files' paths there, where they differ)."""
    from .compare.stages import framework_of
    from .pipelines.flags import FLAGS

    others = sorted({framework_of(s) for s in outcome.missing})
    megabytes = sum(outcome.bytes.values()) / 1e6
    paths = "".join(f" [{f.flag} {f.metavar or 'PATH'}]" for f in FLAGS if f.path and plan["settings"].get(f.field)
                    and not (f.field == "model" and plan.get("embedded_model")))
    commands = [f"xrand compare --only {fw} --out {out_dir}" + (paths if fw == "mindspore" else "") for fw in others]
    if args.quiet:
        print(json.dumps({"verdict": "incomplete", "done": outcome.done, "missing": outcome.missing,
                          "next": commands, "out": out_dir}))
        return 0
    print(f"xrand: done: {', '.join(outcome.done) or 'nothing'} ({megabytes:.1f} MB in {out_dir}/); still to run: "
          f"{', '.join(outcome.missing)}")
    for fw, command in zip(others, commands):
        print(f"xrand: on a machine with {' and '.join(_INSTALLED[fw])} (copy {out_dir}/ there): {command}")
    if outcome.comparison is not None:
        print(f"xrand: the report so far: {out_dir}/report.html")
    return 0


def _finish(args, passed: bool, verdict: List[str], what: str, out_dir: str, paths: Dict[str, str]) -> int:
    """The last words of compare: one JSON line with --quiet, else the verdict and where the files are."""
    if args.quiet:
        print(json.dumps({"verdict": "pass" if passed else "fail", "out": out_dir}))
    else:
        print("\n".join(verdict))
        print(f"xrand: {what} in {out_dir}/ ({', '.join(os.path.basename(p) for p in paths.values())})")
    return 0 if passed else 1


def _layer_options(args):
    """compare --layers and its companions as a LayerOptions (None without --layers)."""
    from .compare.layers import LayerOptions

    names = [n for value in args.layers_module or [] for n in value.split(",") if n]
    scope = [n for value in args.layers_scope or [] for n in value.split(",") if n]
    ops = getattr(args, "ops", None)
    if not args.layers:
        given = [flag for flag, value in (("--layers-dump", args.layers_dump), ("--layers-module", names or None),
                 ("--layers-scope", scope or None)) if value is not None]
        if ops is None:  # these look at the call --ops looks into too
            given += [flag for flag, value in (("--layers-step", args.layers_step), ("--layer-tolerance",
                      args.layer_tolerance), ("--layers-component", args.layers_component)) if value is not None]
        if given:
            raise UsageError(f"{given[0]} needs --layers")
        if ops is None:
            return None
    return LayerOptions(step=0 if args.layers_step is None else args.layers_step, threshold=args.layer_tolerance,
                        dump=names, dump_dir=args.layers_dump, scope=scope,
                        component=args.layers_component or "denoiser", modules=bool(args.layers), ops=ops)


def _compare_matrix(args, out_dir: str) -> int:
    """``--scheduler all``: every shared scheduler that fits the model, one row each, matrix.json/.md/.png."""
    from .compare.matrix import run_matrix
    from .report.matrix import write_matrix

    if args.scheduler_options:
        raise UsageError("--scheduler-option cannot be combined with --scheduler all (each row has its own options)")
    if args.layers or _layer_options(args) is not None:
        raise UsageError("--layers cannot be combined with --scheduler all; give one scheduler with --scheduler NAME")
    plan = _plan(args, scheduler=None, noise_floor=False)
    _say(args, f"xrand: every shared scheduler on {plan.folder.path}, diffusers (torch) vs mindone.diffusers "
               f"(MindSpore), {plan.settings.steps} steps")
    import_frameworks(["torch", "mindspore"])

    def progress(row):
        _say(args, f"  {row.verdict.upper():5} {row.label:<60} rel L2 "
                   f"{'-' if row.rel_l2 is None else format(row.rel_l2, '.2g')}{' ' + row.error if row.error else ''}")

    m = run_matrix(plan, progress=progress)
    return _finish(args, m.passed, [m.summary()], "matrix", out_dir, write_matrix(m, out_dir))


def cmd_run(args) -> int:
    from .compare.sidefile import save_side
    from .compare.sides import run_side
    from .frameworks import FRAMEWORKS

    if args.backend not in FRAMEWORKS:
        raise UsageError(f"--backend {args.backend!r}: accepted: {', '.join(FRAMEWORKS)}")
    if (args.scheduler or "").lower() == "all":
        raise UsageError("--scheduler all needs both frameworks: use it with 'xrand compare'")
    check_out_file(args.out)
    if args.backend == "mindspore":
        only_mindspore_here(args)
    plan = _plan(args, frameworks=(args.backend,))
    import_frameworks([args.backend])
    side = run_side(plan, args.backend, quiet=args.quiet)
    save_side(side, args.out)
    _say(args, f"xrand: {args.backend} side of {plan.settings.steps} steps written to {args.out} "
               f"({side.seconds:.2f} s)")
    return 0


def cmd_sweep(args) -> int:
    from .sweep import SweepConfig, check_engine, check_workers, parse_dtypes, parse_schedulers, parse_seeds, run_sweep

    if args.seed is not None:
        raise UsageError(f"--seed {args.seed}: a sweep takes --seeds (A-B inclusive or a comma list, e.g. 0-99)")
    seeds = parse_seeds(args.seeds)
    check_workers(args.workers)
    check_engine(args.engine)
    out = os.path.normpath(check_out_folder(args.out))  # "--out sweep/" prints as sweep/summary.md
    if args.ray_address and args.engine != "ray":
        raise UsageError(f"--ray-address {args.ray_address!r} needs --engine ray")
    # every compare setting, planned as compare plans it, with the first seed and the folder's
    # scheduler; each cell gets its own seed, scheduler and the --scheduler-option values
    # --dtype A,B makes dtype a cell dimension: planned with the first, each checked here
    dtypes = parse_dtypes(args.dtype)
    options = _settings(args, seed=seeds[0], scheduler=None, dtype=dtypes[0]).scheduler_options
    plan = _plan(args, seed=seeds[0], scheduler=None, scheduler_options={}, noise_floor=False, dtype=dtypes[0])
    schedulers = parse_schedulers(args.scheduler, plan, options)
    for dtype in dtypes[1:]:
        plan.cell(dtype=dtype)
    config = SweepConfig(plan=plan, scheduler_options=options, dtypes=tuple(dtypes) if len(dtypes) > 1 else ())
    result = run_sweep(config, seeds, schedulers, out, workers=args.workers, engine=args.engine,
                       ray_address=args.ray_address, progress=not args.quiet)
    per = result.summary["schedulers"]
    counts = {key: sum(p[key] for p in per.values()) for key in ("passed", "failed", "errors")}
    if args.quiet:
        print(json.dumps({"verdict": result.summary["verdict"], "cells": len(result.cells),
                          "finished": result.summary["finished"], **counts, "ran": result.ran, "out": out}))
    else:
        for name, p in per.items():
            rate = "-" if p["pass_rate"] is None else f"{p['pass_rate']:.1%}"
            print(f"{name}: {p['passed']} of {p['finished']} cells passed ({rate}), {p['failed']} failed, "
                  f"{p['errors']} errors")
        print(f"xrand: {result.ran} cells run now, {len(result.cells) - result.ran} already in {out}/; "
              f"summary in {out}/summary.md, sweep.png, results.jsonl")
    if result.interrupted:
        print(f"xrand sweep: interrupted; {result.summary['finished']} of {len(result.cells)} cells kept in "
              f"{out}/ (run the same command to finish)", file=sys.stderr)
        return 130
    return 0 if result.passed else 1


def cmd_doctor(args) -> int:
    from .frameworks.environment import fingerprint
    from .frameworks import FRAMEWORKS
    from .registry import available_backends, get_backend

    rows = available_backends()

    usable = [r.name for r in rows if r.available and r.name in FRAMEWORKS]
    import_frameworks(usable)
    info = {
        "active_backend": get_backend(),
        "backends": [{"name": r.name, "available": r.available, "reason": r.reason} for r in rows],
        "environment": fingerprint(usable),
    }
    try:
        from .streams.torch_cpu import torch_kernel

        info["torch_cpu_kernel"] = torch_kernel()
    except Exception as exc:  # no torch or no stream module: say why
        info["torch_cpu_kernel"] = f"unknown ({exc})"
    if "mindspore" in usable:  # what a MindSpore side of this machine runs (set up as xrand compare does)
        from .mindspore_cpu import onednn_isa, tune_cpu_runtime

        tune_cpu_runtime()
        info["mindspore_onednn_isa"] = onednn_isa()
    info["optional"] = {name: installed_version(name) or "not installed" for name in OPTIONAL}
    info["graph_cache"] = _graph_cache_info()
    if args.json:
        print(json.dumps(info, indent=2, default=str))
        return 0
    print("xrand backends:")
    for r in rows:
        print(f"  {r.name:<10} {'available' if r.available else 'unavailable: ' + str(r.reason)}")
    print(f"active backend: {info['active_backend']}")
    print(f"torch CPU kernel: {info['torch_cpu_kernel']}")
    if info.get("mindspore_onednn_isa"):
        print(f"MindSpore's oneDNN: {info['mindspore_onednn_isa']}")
    for name, why in OPTIONAL.items():
        print(f"{name}: {info['optional'][name]} ({why})")
    cache = info["graph_cache"]
    print(f"MindSpore graph cache: {cache['folder']} ({cache['graphs']} compiled, {cache['megabytes']:.0f} MB; "
          f"{XRAND_CACHE_HELP})")
    print("environment:")
    for key, value in info["environment"].items():
        print(f"  {key}: {value}")
    return 0


#: Optional packages doctor reports, and what each one is for.
OPTIONAL = {"numba": "the torch-cpu and torch-cuda streams' compiled engines; pip install 'xrand[fast]'",
            "ray": "xrand sweep --engine ray; pip install 'xrand[ray]'"}
XRAND_CACHE_HELP = "set XRAND_CACHE_DIR to move it; delete it to free the space"


def _graph_cache_info() -> Dict[str, object]:
    """Where MindSpore's compiled graphs are kept (xrand.frameworks.mindspore.compile_cache), how many, how large."""
    from .frameworks.mindspore import cache_root

    folder = cache_root()
    graphs = [entry for entry in os.scandir(folder) if entry.is_dir()] if os.path.isdir(folder) else []
    size = sum(os.path.getsize(os.path.join(root, name)) for graph in graphs
               for root, _, names in os.walk(graph.path) for name in names)
    return {"folder": folder, "graphs": len(graphs), "megabytes": size / 2**20}


def _add_settings(p: argparse.ArgumentParser) -> None:
    from .pipelines.flags import add_arguments
    from .frameworks import DEFAULT_MINDSPORE_MODE, MINDSPORE_MODES

    add_arguments(p)  # every setting's flag
    p.add_argument("--device", action="append", metavar="FRAMEWORK=DEVICE",
                   help="device per framework, e.g. torch=cuda or mindspore=Ascend (repeatable; default CPU)")
    p.add_argument("--mindspore-mode", default=None, choices=list(MINDSPORE_MODES),
                   help=f"MindSpore execution mode (default {DEFAULT_MINDSPORE_MODE}: compiled once per model and "
                        "machine, kept in $XRAND_CACHE_DIR, default ~/.cache/xrand; but pynative on a CPU for a "
                        "model of more than 1 GiB of weights, where graph mode needs about 1.6x the weights in "
                        "memory while it compiles, pynative about 1.3x; pynative runs operator by operator, slower "
                        "on a CPU)")
    p.add_argument("--quiet", action="store_true", help="no progress bars; one JSON line of result")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage block), like every other user error."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="xrand", description="Reproducible diffusion noise across frameworks.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("compare", help="run the same pipeline and scheduler on torch and MindSpore and compare them "
                                       "(no arguments: the embedded digits model, offline)")
    p.add_argument("files", nargs="*", metavar="SIDE_FILE", help="two files from 'xrand run' to compare instead")
    _add_settings(p)
    p.add_argument("--tolerance", type=float, help="relative L2 limit for PASS (default 5e-3 fp32, 5e-2 fp16 and bf16)")
    p.add_argument("--out", help="output folder (default: xrand-compare-DATE-TIME)")
    p.add_argument("--lockstep", action="store_true", help="also run MindSpore fed torch's denoiser inputs and sample at every step (local error per step)")
    p.add_argument("--no-noise-floor", action="store_true",
                   help="skip measuring torch's own floor (the torch pipeline again in float64)")
    p.add_argument("--no-weights-check", action="store_true",
                   help="skip checking, before any step, each component's loaded weights on both sides against "
                        "the weight files and each other (name, shape, dtype, largest |difference|)")
    p.add_argument("--layers", action="store_true",
                   help="compare every submodule of the denoiser at one step and name the first that parts them")
    p.add_argument("--layers-step", type=int, metavar="K", help="the step --layers looks at (default 0)")
    p.add_argument("--layer-tolerance", type=float, metavar="X",
                   help="local relative L2 limit per module (default: 10x torch's measured float64 floor)")
    p.add_argument("--layers-dump", metavar="DIR", help="write the named modules' input and output tensors here")
    p.add_argument("--layers-module", action="append", metavar="NAME",
                   help="a module to dump, e.g. down_blocks.0.resnets.0.conv1 (repeatable or comma-separated)")
    p.add_argument("--layers-scope", action="append", metavar="PREFIX",
                   help="record and compare only the modules under PREFIX, e.g. down_blocks.1 (repeatable; default: "
                        "every module); a real-sized model's full record is large")
    p.add_argument("--layers-component", metavar="NAME",
                   help="look into another component's call instead of the denoiser's: vae (its decode of torch's "
                        "final latents), text_encoder, text_encoder_2, text_encoder_3 (their call on the prompt), "
                        "controlnet (its call at --layers-step, on torch's inputs)")
    p.add_argument("--ops", nargs="?", const="", metavar="MODULE",
                   help="compare the operators inside one call of MODULE (as --layers prints it, NAME#k for its "
                        "k-th call; in --layers-component's call, at --layers-step), each fed torch's inputs; "
                        "with --layers and no MODULE: its culprit")
    p.add_argument("--only", choices=list(_INSTALLED),
                   help="run only this framework's stages into --out and stop (two machines: --only torch on the "
                        "torch one, copy --out, then --only mindspore there, which takes every setting from --out)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("run", help="run one framework's side and save it for 'xrand compare A B'")
    p.add_argument("--backend", required=True, help="torch or mindspore")
    p.add_argument("--out", required=True, help="side file to write (.safetensors)")
    _add_settings(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sweep", help="compare torch and MindSpore over many seeds (and schedulers), on local "
                                     "processes or Ray; resumable")
    p.add_argument("--seeds", required=True, help="seeds: A-B (inclusive) or a comma list, e.g. 0-99 or 1,5,9")
    _add_settings(p)
    for action in p._actions:  # sweep's --dtype takes a list: dtype becomes a cell dimension
        if action.dest == "dtype":
            action.help += "; a comma list (float32,bfloat16) sweeps each dtype, summary per (scheduler, dtype)"
    p.set_defaults(seed=None)
    p.add_argument("--tolerance", type=float, help="relative L2 limit for PASS (default 5e-3 fp32, 5e-2 fp16 and bf16)")
    p.add_argument("--workers", type=int, default=1, help="worker processes, each loads the pipelines once "
                                                          "(default 1)")
    p.add_argument("--engine", default="local", help="local (a process pool, default) or ray")
    p.add_argument("--ray-address", help="Ray cluster HOST:PORT (default: a local Ray started for the run)")
    p.add_argument("--out", required=True, help="output folder; the same command on it again runs only missing cells")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("doctor", help="which backends work here, and the environment fingerprint")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_doctor)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """The ``xrand`` command: its exit status; with no ``argv`` (this process's own command line,
    ``xrand`` or ``python -m xrand``) the process ends with it (``end_process``)."""
    code = _command(argv)
    if argv is None:
        from .frameworks.interrupts import end_process

        end_process(code)
    return code


def _command(argv: Optional[List[str]]) -> int:
    parser = build_parser()
    own_process = argv is None  # this process's own command line: the process ends with the command
    if own_process:
        from .frameworks.collector import freeze_imports

        freeze_imports()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.own_process = own_process
    args.given = {a.split("=", 1)[0] for a in argv if a.startswith("--")}  # the options given, by name
    if args.command is None:
        parser.print_help()
        return 2
    try:
        from .frameworks.interrupts import keyboard_interrupts
        from .registry import check_backend_variable

        check_backend_variable()  # every command reads it the same way, before any work
        with keyboard_interrupts():  # Ctrl-C is KeyboardInterrupt even after MindSpore ran a graph
            return args.func(args)
    except UsageError as exc:
        print(f"xrand {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"xrand {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of the output went away (xrand doctor | head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # as Python's docs advise
        return 141


if __name__ == "__main__":
    sys.exit(main())
