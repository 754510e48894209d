"""The ``cuvil-edge`` parser and its model commands: build, run, inspect, profile, bench, demo, profiles."""

from __future__ import annotations

import argparse
import errno
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from device_profiles import Caches
from device_profiles.profile import DeviceProfilesError
from ota.errors import ExitCodes, OtaError, TransportError, run_cli
from runtime_wasm.engine import TIER_RELAXED, TIERS
from runtime_wasm.errors import RuntimeWasmError
from runtime_wasm.spec import MAX_THREADS

from ..codegen.emit import DEFAULT_THREADS
from ..errors import CuvilError, InputError
from .args import (
    add_calib,
    add_input_shape,
    add_precision,
    add_targets,
    bounded,
    load_options,
    parse_shapes,
    parse_targets,
)
from .fleet import register as register_fleet
from .ota import add_signing_args, profile_names, sign_model_dir
from .ota import register as register_ota

#: (error types, exit code, stderr line): the first row an error matches decides; anything else is a bug
#: and keeps its traceback. Exit 2 is also argparse's, for a command line that does not parse (its usage
#: block instead of one line); ``publish`` exits 4 when the rollout halts or times out, ``demo`` and
#: ``fleet demo`` 1 when their end-to-end check fails.
EXIT_CODES: ExitCodes = (
    # a missing or unreadable file, or a broker that cannot be reached: the request itself may be fine
    ((OSError, TransportError), 1, "error: {type}: {message}"),
    # the input or the request was refused: bad model, option value, profile, bundle, signature...
    ((CuvilError, RuntimeWasmError, OtaError, DeviceProfilesError), 2, "error: {type}: {message}"),
)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


#: what a missing model argument with one of these names was meant to be: a file, not a hub id
MODEL_FILE_SUFFIXES = (".onnx", ".tflite", ".cuvil", ".cvb")


def _is_pretrained(source: str) -> bool:
    """A Hugging Face-layout directory or a hub id (``from_pretrained``), rather than a model file."""
    path = Path(source)
    return path.is_dir() or (not path.exists() and path.suffix.lower() not in MODEL_FILE_SUFFIXES)


def _load(args: argparse.Namespace):
    """The model the command names: a model file, or a directory / hub id with its processing."""
    from ..model import CuvilModel

    shapes = parse_shapes(args.input_shape)
    if _is_pretrained(args.model):
        return CuvilModel.from_pretrained(args.model, task=args.task, input_shapes=shapes,
                                          revision=args.revision)
    return CuvilModel.load(args.model, **load_options(args))


def _calibration(path: str | None, pretrained: bool):
    """``--calib``: .npz/.npy data, or for a model with processing a .txt of texts (or image paths), one
    per line."""
    if path is None or not (pretrained and path.endswith(".txt")):
        return path
    return [line for line in Path(path).read_text().splitlines() if line.strip()]


def cmd_build(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    def say(msg: str) -> None:
        if not args.quiet:
            print(f"  [{time.perf_counter() - t0:6.2f}s] {msg}", flush=True)

    say(f"import {args.model}")
    model = _load(args)
    if model.processing is not None:
        say(f"processing: {model.processing.summary()}")
    if args.max_threads is not None and not 1 <= args.max_threads <= MAX_THREADS:
        raise InputError(f"--max-threads must be 1..{MAX_THREADS}, got {args.max_threads}")
    model.optimize(precision=args.precision, targets=parse_targets(args.targets), progress=say,
                   calibration=_calibration(args.calib, model.processing is not None),
                   accuracy_budget=args.accuracy_budget, profiles=profile_names(args),
                   max_threads=args.max_threads,
                   **({"kernel_cost": False} if args.ignore_kernel_cost else
                      {"kernel_cost": "measured"} if args.measure_kernel_cost else {}))
    source = Path(args.model.rstrip("/"))
    default = source.with_suffix(".cuvil")
    if _is_pretrained(args.model):  # DIR.cuvil beside a directory; NAME.cuvil here for a hub id ORG/NAME
        name = f"{source.name}.cuvil"
        default = source.with_name(name) if source.is_dir() else Path(name)
    out = Path(args.output or default)
    model.save(out)
    spec = model.spec
    print(f"built {out} in {time.perf_counter() - t0:.2f}s: {len(spec.extra['nodes'])} nodes, "
          f"weights {_human(spec.weights_size)}, arena {_human(spec.arena_size)}"
          + (" (build cache)" if model.build_cache_hit else ""))
    for v in spec.variants:
        print(f"  {v.file:36s} {_human(v.size):>10s}  sha256 {v.sha256[:16]}")
    if args.report:
        _write_quant_report(model, args)
    if args.sign_key or args.keyring:
        sign_model_dir(out, args.bundle_output or out.with_suffix(".cvb"), args)
    return 0


def _write_quant_report(model, args: argparse.Namespace) -> None:
    """Accuracy vs fp32 (on the calibration data), size and per-layer choices, as JSON and printed."""
    import json

    from ..quant import QuantResult, report

    c = model.compiled
    result = model.quantization or QuantResult(model.graph, {"precision": "fp32", "layers": []})
    rep = report(model.graph, result, args.calib, len(c.weights))
    Path(args.report).write_text(json.dumps(rep, indent=2))
    _print_quant(rep)
    print(f"wrote {args.report}")


def _print_quant(rec: dict) -> None:
    acc = rec.get("accuracy_vs_fp32")
    print(f"quantization: {rec['precision']}" + (
        f", vs fp32: cosine {acc['cosine']:.5f}, top-1 agreement {acc['top1_agreement']:.4f}, "
        f"max abs {acc['max_abs']:.4g}" if acc else ""))
    if "size" in rec:
        sz = rec["size"]
        print(f"  weights {_human(sz['weights_bytes'])} (fp32 constants {_human(sz['weights_fp32_bytes'])})")
    for layer in rec.get("layers", []):
        sens = ", ".join(f"{k}: cos {v['cosine']:.5f}" for k, v in layer.get("sensitivity", {}).items())
        cost = layer.get("cost_us")
        took = f" fp32 {cost['fp32']:.0f} us, int8 {cost['int8']:.0f} us" if cost else ""
        print(f"  {layer['name'][:40]:40s} {layer['op']:6s} {layer['choice']:6s} "
              f"act {layer['activations']:8s}" + (f" [{sens}]" if sens else "") + took)


def _print_source_quant(rec: dict) -> None:
    """The source model's own quantization: graph inputs/outputs one by one, constants summarised."""
    w = rec["weights"]
    kinds = ", ".join(f"{k} x{v}" for k, v in sorted(w["dtypes"].items()))
    scale = f", scales {w['scale_min']:.4g}..{w['scale_max']:.4g}" if w["tensors"] else ""
    print(f"source quantization ({rec['format']}): {rec['activations']} quantized activations; "
          f"{w['tensors']} quantized constants ({kinds}), {w['per_channel']} per-channel, "
          f"{w['tensors'] - w['per_channel']} per-tensor{scale}")
    for kind in ("input", "output"):
        for t in rec[kind + "s"]:
            per = f" per-channel (axis {t['axis']}, {len(t['scale'])})" if len(t["scale"]) > 1 else ""
            print(f"  {kind:6s} {t['name']}: {t['dtype']}{per} scale "
                  f"{', '.join(f'{x:.6g}' for x in t['scale'][:4])}{' ...' if len(t['scale']) > 4 else ''} "
                  f"zero point {', '.join(str(z) for z in t['zero_point'][:4])}")


def _load_inputs(args: argparse.Namespace, names: list[str], specs) -> dict[str, np.ndarray]:
    if args.inputs:
        path = Path(args.inputs)
        try:
            if path.suffix == ".npz":
                with np.load(path) as z:
                    return {k: z[k] for k in z.files}
            return {names[0]: np.load(path)}
        except (ValueError, EOFError, zipfile.BadZipFile) as exc:  # a missing file stays an OSError
            raise InputError(f"--inputs {path}: not .npy/.npz data ({exc})") from None
    rng = np.random.default_rng(args.seed)
    return {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in specs}


def cmd_run(args: argparse.Namespace) -> int:
    from runtime_wasm.loader import load_model_dir

    if args.threads < 0:
        raise InputError(f"--threads must be 0 (every core) or more, got {args.threads}")
    with load_model_dir(args.model, variant=args.variant, threads=args.threads,
                        deterministic=args.deterministic) as m:
        inputs = _load_inputs(args, [t.name for t in m.spec.inputs], m.spec.inputs)
        t0 = time.perf_counter()
        outputs = m.predict(inputs)
        dt = (time.perf_counter() - t0) * 1e3
        for name, y in outputs.items():
            print(f"{name}: {y.dtype}{list(y.shape)} min {y.min():.6g} max {y.max():.6g} "
                  f"mean {y.mean():.6g}")
        print(f"one inference: {dt:.3f} ms")
        if args.output:
            np.savez(args.output, **outputs)
            print(f"wrote {args.output}")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from runtime_wasm.processing import PROCESSING_FILE, Processor
    from runtime_wasm.spec import ModelSpec

    path = Path(args.model)
    processing = None
    if (path / "model.json").is_file():
        spec = ModelSpec.from_json((path / "model.json").read_bytes())
        if (path / PROCESSING_FILE).is_file():
            processing = Processor.from_dir(path).config
    else:
        model = _load(args)
        model.optimize(targets=[_first_target()])
        assert model.compiled is not None
        spec, processing = model.compiled.spec, model.processing
    print(f"model {spec.name}: weights {_human(spec.weights_size)}, arena {_human(spec.arena_size)}")
    if spec.memory:  # what a device gives it, by the threads it runs
        print("  memory " + ", ".join(f"{k} thread{'s' if k > 1 else ''} {_human(b)}"
                                      for k, b in enumerate(spec.memory, 1)))
    for kind, tensors in (("input", spec.inputs), ("output", spec.outputs), ("state", spec.states)):
        for t in tensors:
            print(f"  {kind:6s} {t.name}: {t.dtype}{list(t.shape)} @arena+{t.offset}")
    nodes = spec.extra.get("nodes", [])
    counts: dict[str, int] = {}
    for n in nodes:
        counts[n["op"]] = counts.get(n["op"], 0) + 1
    print("ops: " + ", ".join(f"{k} x{v}" for k, v in sorted(counts.items())))
    print(f"{'node':40s} {'op':16s} {'output':28s} {'arena offset':>12s}  kernel")
    for n in nodes:
        print(f"{n['name'][:40]:40s} {n['op']:16s} {n['output'][:28]:28s} {n['offset']:>12}  {n['kernel']}")
    if "source_quantization" in spec.extra:
        _print_source_quant(spec.extra["source_quantization"])
    if "quantization" in spec.extra:
        _print_quant(spec.extra["quantization"])
    print("variants: " + ", ".join(f"{v.name} ({_human(v.size)})" for v in spec.variants))
    if processing is not None:
        print(f"processing: {processing.summary()}")
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from ..codegen.toolchain import Target
    from ..here import host_target
    from ..model import CuvilModel
    from ..timing import profile_model, profile_table
    from ..tools.bench import measured_ceilings

    model = CuvilModel.load(args.model, **load_options(args))
    target = Target(args.tier, host_target().family)
    model.optimize(precision=args.precision, targets=[target], calibration=args.calib)
    rows = profile_model(model, target, repeat=args.repeat)
    print("\n".join(profile_table(rows, args.top, args.repeat, args.tier, measured_ceilings(target))))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from ..frontend.onnx.importer import load_onnx
    from ..here import host_target
    from ..model import CuvilModel
    from ..tools.bench import compare_with_ort

    proto = load_onnx(args.model)  # a ModelFormatError, not protobuf's, for a file that is no model
    t0 = time.perf_counter()
    model = CuvilModel.load(proto, **load_options(args))
    model.optimize(precision=args.precision, targets=[host_target()])
    build_s = time.perf_counter() - t0
    if args.threads < 1:
        raise InputError(f"--threads must be at least 1, got {args.threads}")
    c = compare_with_ort(proto, model, repeat=args.repeat, threads=args.threads)
    print(f"{'engine':28s} {'median ms':>10s} {'p95 ms':>10s}")
    print(f"{'cuvil-edge wasm (' + args.precision + ')':28s} {c.ours_ms:10.3f} {c.ours_p95_ms:10.3f}")
    print(f"{'onnxruntime native fp32':28s} {c.ort_ms:10.3f} {c.ort_p95_ms:10.3f}")
    print(f"ratio {c.ratio:.2f}x, max |diff| {c.max_abs_diff:.2e}, module {_human(c.module_bytes)}, "
          f"build {build_s:.2f}s ({args.threads} thread{'s' if args.threads > 1 else ''} each, "
          f"medians of {args.repeat})")
    return 0


def _first_target():
    from ..codegen.toolchain import Target

    return Target()


def cmd_demo(args: argparse.Namespace) -> int:
    from ..tools.demo import run_demo

    return run_demo(workdir=args.workdir, repeat=args.repeat)


def _caches_text(c: Caches) -> str:
    return ", ".join(f"{level} {_human(n) if n else 'none'}" for level, n in
                     (("L1d", c.l1d_bytes), ("L2", c.l2_bytes), ("L3", c.l3_bytes)))


def cmd_profiles(args: argparse.Namespace) -> int:
    """Device classes: list the shipped profiles, show one validated, or detect this machine."""
    from dataclasses import fields

    from device_profiles import available_profiles, detect, load_profile
    from runtime_wasm.policy import RuntimePolicy

    if args.profiles_cmd == "list":
        for p in map(load_profile, available_profiles()):
            print(f"{p.name:18s} {p.arch:8s} {' '.join(sorted(p.features)):38s} {p.cores.total:>2} cores "
                  f"{p.memory_mb // 1024:>3} GB")
    elif args.profiles_cmd == "show":
        p = load_profile(args.name)
        policy = [f"{f.name}={getattr(p.policy, f.name)}" for f in fields(RuntimePolicy)
                  if getattr(p.policy, f.name) != f.default]
        for key, value in (
                ("name", p.name), ("arch", f"{p.arch} (family {p.family})"),
                ("features", ", ".join(sorted(p.features))),
                ("cores", f"{p.cores.big} big + {p.cores.little} little"), ("caches", _caches_text(p.caches)),
                ("memory", f"{p.memory_mb} MiB"),
                ("thermal", f"limit {p.thermal.limit_c:g} C, sensors {', '.join(p.thermal.sensors)}"),
                ("policy", ", ".join([*policy, "the rest RuntimePolicy defaults"])), ("threads", p.threads),
                ("relaxed_simd", "yes" if p.relaxed_simd else "no"), ("description", p.description)):
            print(f"{key:13s} {value}")
    else:
        if not Path(args.root).is_dir():  # detect() would describe an empty machine instead
            raise FileNotFoundError(errno.ENOENT, "--root: no such directory", args.root)
        h = detect(args.root, args.machine)
        zones = f"{len(h.thermal.sensors)} zone(s)" + (f", lowest trip {h.thermal.limit_c:g} C"
                                                     if h.thermal.limit_c else "")
        for key, value in (
                ("arch", f"{h.arch} (family {h.family})"), ("model", h.model or "unknown"),
                ("features", f"{', '.join(sorted(h.features)) or 'none'} (from {h.feature_source})"),
                ("cores", f"{h.cores.big} big + {h.cores.little} little"), ("caches", _caches_text(h.caches)),
                ("memory", f"{h.memory_mb} MiB" if h.memory_mb else "unknown"), ("thermal", zones),
                ("closest profile", h.closest or f"none (no {h.family} profile)")):
            print(f"{key + ':':17s}{value}")
    return 0


def add_pretrained_args(p: argparse.ArgumentParser) -> None:
    from ..pretrained import TASK_ALIASES

    p.add_argument("--task", choices=sorted(TASK_ALIASES),
                   help="for a directory or hub id: the task (default: from its config.json)")
    p.add_argument("--revision", help="for a hub id: branch, tag or commit (default: main)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="cuvil-edge",
                                 description="Compile ONNX and TFLite models to WASM-SIMD and run them.")
    sub = ap.add_subparsers(dest="cmd", required=True)

    b = sub.add_parser("build", help="compile an ONNX or TFLite model, or a Hugging Face-layout directory or "
                       "hub id with its processing, into a model directory (spec, modules, weights)")
    b.add_argument("model", help="an .onnx or .tflite file, a Hugging Face-layout directory or a hub id")
    add_pretrained_args(b)
    b.add_argument("-o", "--output", help="output directory (default: MODEL.cuvil)")
    add_input_shape(b)
    add_precision(b)
    add_calib(b, note="; for a directory or hub id also a .txt of texts (or image paths), one per line")
    b.add_argument("--accuracy-budget", type=bounded(float, 0), default=0.01,
                   help="mixed: allowed top-1 disagreement (or 1 - cosine) vs fp32 on the calibration data")
    cost = b.add_mutually_exclusive_group()
    cost.add_argument("--ignore-kernel-cost", action="store_true",
                      help="int8/mixed: quantize every layer that can be, even where its int8 kernel is "
                      "slower than its fp32 one (by default those stay fp32, by a cost model: the report "
                      "shows both costs)")
    cost.add_argument("--measure-kernel-cost", action="store_true",
                      help="int8/mixed: time each layer's fp32 and int8 kernels on this host, not the cost "
                      "model (the plan then varies with the host and its load: not a reproducible build)")
    b.add_argument("--report", help="write the quantization report (JSON) here and print it")
    add_targets(b, note="without --profile (the profiles choose them): ")
    b.add_argument("--max-threads", type=int,
                   help=f"most threads the modules run on; the device picks how many (default: the most "
                   f"the --profile classes run, else {DEFAULT_THREADS}; 1: plain modules)")
    b.add_argument("-q", "--quiet", action="store_true")
    b.add_argument("--bundle-output", help="signed bundle path with --sign-key (default: OUTPUT.cvb)")
    add_signing_args(b)
    b.set_defaults(fn=cmd_build)

    r = sub.add_parser("run", help="run a built model directory in wasmtime")
    r.add_argument("model")
    r.add_argument("-i", "--inputs", help=".npy (single input) or .npz (by input name); default random")
    r.add_argument("-o", "--output", help="write outputs to this .npz")
    r.add_argument("--variant", help="force a module variant (default: best for this host)")
    r.add_argument("--seed", type=bounded(int, 0), default=0)
    r.add_argument("--threads", type=int, default=0, help="threads to run on (default 0: every core)")
    r.add_argument("--deterministic", action="store_true",
                   help="determinism mode: the module and engine settings every host runs, bit-identical "
                   "outputs across x86 and ARM (as RuntimePolicy.deterministic on a device)")
    r.set_defaults(fn=cmd_run)

    i = sub.add_parser("inspect", help="ops, shapes, memory plan and kernel per node")
    i.add_argument("model", help="an .onnx or .tflite file, a built model directory, a Hugging Face-layout "
                   "directory or a hub id")
    add_input_shape(i)
    add_pretrained_args(i)
    i.set_defaults(fn=cmd_inspect)

    p = sub.add_parser("profile", help="time every node of a model in wasmtime (a profiling build)")
    p.add_argument("model", help="an ONNX or TFLite model file")
    add_input_shape(p)
    p.add_argument("--tier", default=TIER_RELAXED, choices=TIERS)
    add_precision(p, help="profile the quantized build (as build --precision)")
    add_calib(p)
    p.add_argument("--repeat", type=bounded(int, 1), default=20)
    p.add_argument("--top", type=bounded(int, 1), default=25, help="show the N slowest nodes")
    p.set_defaults(fn=cmd_profile)

    bn = sub.add_parser("bench", help="our latency next to onnxruntime's (same thread count), same inputs")
    bn.add_argument("model", help="an .onnx file")
    add_input_shape(bn)
    add_precision(bn, help="time the quantized build (as build --precision)")
    bn.add_argument("--repeat", type=bounded(int, 1), default=50)
    bn.add_argument("--threads", type=int, default=1, help="threads for both engines (default 1)")
    bn.set_defaults(fn=cmd_bench)

    d = sub.add_parser("demo",
                       help="end to end: generate a model, build, load it as a device would, check, time")
    d.add_argument("--workdir", help="where to write the model and build (default: a temp dir)")
    d.add_argument("--repeat", type=bounded(int, 1), default=50)
    d.set_defaults(fn=cmd_demo)
    pr = sub.add_parser("profiles", help="device classes: list, show one, or detect this machine")
    prs = pr.add_subparsers(dest="profiles_cmd", required=True)
    prs.add_parser("list", help="the shipped device profiles")
    show = prs.add_parser("show", help="every validated field of one profile")
    show.add_argument("name")
    det = prs.add_parser("detect", help="this machine's CPU, caches, memory, thermal zones; closest profile")
    det.add_argument("--root", default="/", help="read a recorded tree (proc/, sys/) instead of this machine")
    det.add_argument("--machine", help="architecture of that tree (default: this machine's)")
    pr.set_defaults(fn=cmd_profiles)
    register_ota(sub)
    register_fleet(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    return run_cli(build_parser(), argv, EXIT_CODES)

