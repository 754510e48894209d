"""The ONNX node cases the onnx wheel generates from its own operator definitions
(``onnx.backend.test.case.node.collect_testcases``: 1,884 at onnx 1.23, opsets up to 28, each a model with
inputs and expected outputs): the set onnxruntime and other backends report against.

Each case is built for this host and run; its outcome is one of
- ``pass``: every output matches (the case's rtol, at least 1e-3; atol at least 1e-5; dtype and shape exact);
- ``refused``: a ``CuvilError`` before code generation (unsupported op or dtype, named with the node);
- ``out-of-scope``: a case on string tensors or a training op (counted apart, as the issue says);
- ``wrong``: it ran and an output differs;
- ``ort-agrees``: an output differs from the case's (the ONNX reference's) and equals onnxruntime's on the
  same inputs: the two oracles disagree and we side with onnxruntime (counted apart, never as a pass);
- ``random``: a case on a random op (``RANDOM_OPS``, in its graph or its expanded function) that built, ran
  and gave outputs of the reference's dtype and shape, 0/1 where the reference's are, whose values differ:
  the references are numpy's global, unseeded stream, which no generator reproduces (counted apart,
  never as a pass, and in the denominator);
- ``compiler``: generated code that did not compile (always a bug: the verifier should have refused it);
- ``crash``: any other exception (a bug too).

    python -m tests.conformance.node_cases [--stride N] [--jobs J] [--json out.json] [CASE ...]

prints one line per case that is not ``pass`` and a summary; ``--update`` adds the passing cases to
``node_cases_passing.txt`` (the list only grows: ``test_node_cases.py`` holds every listed case to it).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import signal
import sys
import time
import traceback
import warnings
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

PASSING_FILE = Path(__file__).with_name("node_cases_passing.txt")
RTOL, ATOL = 1e-3, 1e-5
CASE_TIMEOUT_S = 300
TRAINING_DOMAIN = "ai.onnx.preview.training"
#: ops whose outputs are draws (Bernoulli's function draws with RandomUniformLike)
RANDOM_OPS = frozenset({"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
                        "RandomUniformLike"})


@cache
def cases() -> dict[str, Any]:
    """name -> onnx TestCase, every generated node case."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():  # the case generators overflow casts on purpose
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases("")}


def out_of_scope(case: Any) -> str | None:
    """Why a case is not counted (string tensors, training ops), else None."""
    import onnx

    g = case.model.graph
    if any(n.domain == TRAINING_DOMAIN for n in g.node):
        return "training op"
    typed = [*g.input, *g.output, *g.value_info]
    if any(v.type.tensor_type.elem_type == onnx.TensorProto.STRING for v in typed
           if v.type.HasField("tensor_type")):
        return "string tensors"
    return None


def passing() -> list[str]:
    if not PASSING_FILE.exists():
        return []
    lines = (ln.strip() for ln in PASSING_FILE.read_text().splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


def _compare(got: dict[str, Any], want: dict[str, Any], case: Any) -> str | None:
    """None when every output matches, else what differs first. A sequence output (a list) matches a list
    of as many items, each compared as a tensor output is."""
    rtol, atol = max(case.rtol, RTOL), max(case.atol, ATOL)
    for name, ref in want.items():
        if name not in got:
            return f"output {name!r} missing"
        if not isinstance(ref, list):
            diff = _compare_tensor(name, got[name], ref, got, rtol, atol)
        elif not isinstance(got[name], list) or len(got[name]) != len(ref):
            return f"{name}: {type(got[name]).__name__} of {len(got[name])} != a sequence of {len(ref)}"
        else:
            diff = next(filter(None, (_compare_tensor(f"{name}[{i}]", out, r, got, rtol, atol)
                                      for i, (out, r) in enumerate(zip(got[name], ref)))), None)
        if diff:
            return diff
    return None


def _compare_tensor(name: str, out: Any, ref: Any, got: dict[str, Any], rtol: float, atol: float
                    ) -> str | None:
    """None when output ``name`` matches its reference, else what differs first."""
    out = _unpadded(name, np.asarray(out), np.asarray(ref), got)
    if isinstance(out, str):
        return out
    ref = np.asarray(ref)
    if out.shape != ref.shape:
        return f"{name}: shape {out.shape} != {ref.shape}"
    if ref.dtype == object or out.dtype == object:
        return None if np.array_equal(out.astype(object), ref.astype(object)) else f"{name}: strings differ"
    if out.dtype != ref.dtype:
        return f"{name}: dtype {out.dtype} != {ref.dtype}"
    slack = _float_slack(ref.dtype)
    if slack is not None:
        a, b = out.astype(np.float64), ref.astype(np.float64)
        ok = np.isclose(a, b, rtol=max(rtol, slack), atol=atol, equal_nan=True)
        if not ok.all():
            i = tuple(np.argwhere(~ok)[0])
            return f"{name}: at {i} {a[i]!r} != {b[i]!r}"
    elif not np.array_equal(out, ref):
        return f"{name}: values differ"
    return None


def _float_slack(dtype: np.dtype) -> float | None:
    """None for a non-float type; else the relative slack on top of the case's tolerance: 2 ULPs for
    float16 and bfloat16, the narrow types ops compute through (in float32, rounding after each op), 0 for
    the others (float32/64, and ml_dtypes' float8/float4 results of casts and quantizations: exact)."""
    if dtype.kind in "fc":
        return float(2 * np.finfo(np.float16).eps) if dtype == np.float16 else 0.0
    if dtype.kind == "V" and dtype.name.startswith(("bfloat16", "float8", "float4")):
        return 2 * 2.0**-7 if dtype.name == "bfloat16" else 0.0
    return None


def _unpadded(name: str, out: np.ndarray, ref: np.ndarray, got: dict[str, np.ndarray]) -> np.ndarray | str:
    """An output of data-dependent size (NonZero, Unique, Compress, NonMaxSuppression, a Loop's scan output)
    is allocated for its bound with a ``<name>:length`` output (docs/ONNX.md): cut to that length along its
    padded axis, the one axis where it is longer than the reference, after checking that it is zero past
    it (a string on failure). Any other output, or one whose shape does not fit that, comes back as it is
    for the caller's shape check."""
    from runtime_wasm.spec import LENGTH_SUFFIX

    if name + LENGTH_SUFFIX not in got or out.ndim != ref.ndim:
        return out
    n = int(got[name + LENGTH_SUFFIX])
    longer = [d for d in range(out.ndim) if out.shape[d] != ref.shape[d]]
    if not longer:
        return out if n in out.shape else f"{name}: length {n} for a result of shape {ref.shape}"
    axis = longer[0]
    if len(longer) > 1 or ref.shape[axis] != n or out.shape[axis] < n:
        return out
    if np.take(out, range(n, out.shape[axis]), axis=axis).any():
        return f"{name}: entries past its length {n} along axis {axis} are not zero"
    return np.take(out, range(n), axis=axis)


def _array(x: Any) -> Any:
    """A case's tensor as numpy (some generators store ``TensorProto``s, e.g. the float16 casts)."""
    from onnx import TensorProto, numpy_helper

    return numpy_helper.to_array(x) if isinstance(x, TensorProto) else x


def run_case(name: str) -> tuple[str, str]:
    """(outcome, detail) for one case."""
    from cuvil_edge.errors import CuvilError, ToolchainError, UnsupportedOperator

    case = cases()[name]
    why = out_of_scope(case)
    if why:
        return "out-of-scope", why
    model = case.model
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    try:
        bound: set[str] = set()
        for inputs, outputs in case.data_sets:
            feeds = dict(zip(names, map(_array, inputs)))
            empty = next((k for k, v in feeds.items() if v is None), None)
            if empty is not None:  # an empty optional fed: compiled optional inputs are always present
                raise UnsupportedOperator("Input", empty, None, "an empty optional: an optional graph "
                                          "input is compiled as always present (docs/ONNX.md)")
            want = dict(zip([o.name for o in model.graph.output], map(_array, outputs)))
            with _built(model, feeds, bound) as cm:
                got = cm.predict({k: v for k, v in feeds.items() if k not in bound})
            diff = _compare(got, want, case)
            if diff and any(n.op_type in RANDOM_OPS for n in model.graph.node):
                unlike = _unlike_draws(got, want)
                return ("wrong", unlike) if unlike else ("random", f"{diff}: other draws than numpy's")
            if diff and _ort_agrees(model, feeds, got, case):
                return "ort-agrees", f"{diff}; onnxruntime gives ours"
            if diff:
                return "wrong", diff
        return "pass", f"bound: {', '.join(sorted(bound))}" if bound else ""
    except ToolchainError as exc:
        return "compiler", f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    except CuvilError as exc:
        return "refused", f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return "crash", f"{type(exc).__name__}: {str(exc)[:200]} ({Path(where.filename).name}:{where.lineno})"


def _unlike_draws(got: dict[str, Any], want: dict[str, Any]) -> str | None:
    """None when every output could be a draw of the reference's kind: its dtype and shape, finite, and
    0 or 1 wherever the reference's values all are (Bernoulli's); else what is off."""
    for name, ref in want.items():
        out, ref = np.asarray(got.get(name)), np.asarray(ref)
        if out.shape != ref.shape or out.dtype != ref.dtype:
            return f"{name}: {out.dtype}{list(out.shape)} != {ref.dtype}{list(ref.shape)}"
        if out.dtype.kind == "f" and not np.isfinite(out).all():
            return f"{name}: non-finite draws"
        if np.isin(ref, (0, 1)).all() and not np.isin(out, (0, 1)).all():
            return f"{name}: values other than 0 and 1"
    return None


def _ort_agrees(model: Any, feeds: dict[str, Any], got: dict[str, np.ndarray], case: Any) -> bool:
    """Whether onnxruntime, run on the same inputs, answers what we answered (False when it cannot run
    the case)."""
    from cuvil_edge.oracle import ort_session

    try:
        theirs = ort_session(model).run(None, feeds)
    except Exception:  # onnxruntime lacks the op or type: no second opinion
        return False
    return _compare(got, dict(zip([o.name for o in model.graph.output], theirs)), case) is None


def _built(model: Any, feeds: dict[str, Any], bound: set[str]) -> Any:
    """The case's model built for this host. When an op needs at build time one of its parameter inputs
    (an axis, a shape, pads, scales: ``NotConstant``) and that is a model input, or a value computed from
    integer model inputs only, they are bound to the case's values, as a user would with ``bind=``
    (``--bind``); ``bound`` collects those names (a pass with bound inputs says so in its detail). Data
    inputs are not bound, so a case is not folded away."""
    from cuvil_edge import CuvilModel, NotConstant, Target

    while True:
        shapes = {k: [x.shape for x in v] if isinstance(v, list) else v.shape for k, v in feeds.items()
                  if isinstance(v, (np.ndarray, list)) and k not in bound}  # a list: a sequence's items
        try:
            model_ = CuvilModel.load(model, input_shapes=shapes, bind={k: feeds[k] for k in bound})
            return model_.optimize(targets=[Target()])
        except NotConstant as exc:
            wanted = set(exc.model_inputs) - bound
            parameter = exc.model_inputs == (exc.input_name,)  # the op's own parameter input (scales, depth)
            integers = all(np.asarray(feeds.get(n)).dtype.kind in "iu" for n in wanted)
            if not wanted or not (parameter or integers):
                raise
            bound |= wanted


def _guarded(name: str) -> tuple[str, str, str, float]:
    def fire(signum: int, frame: object) -> None:
        raise TimeoutError(f"over {CASE_TIMEOUT_S} s")

    signal.signal(signal.SIGALRM, fire)
    signal.alarm(CASE_TIMEOUT_S)
    start = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            outcome, detail = run_case(name)
        except TimeoutError as exc:
            outcome, detail = "crash", str(exc)
        finally:
            signal.alarm(0)
    return name, outcome, detail, time.monotonic() - start


def sweep(names: list[str], jobs: int) -> dict[str, tuple[str, str, float]]:
    """Every case in ``names`` in ``jobs`` worker processes, spawned (a fork of a process that already
    runs threads, as a test session does, can inherit a held lock and hang), fresh ones every 100
    cases: a leak or a wasmtime engine per case must not pile up."""
    results = {}
    if jobs <= 1:
        for n in names:
            _, outcome, detail, t = _guarded(n)
            results[n] = (outcome, detail, t)
        return results
    with multiprocessing.get_context("spawn").Pool(jobs, maxtasksperchild=100) as pool:
        for n, outcome, detail, t in pool.imap_unordered(_guarded, names):
            results[n] = (outcome, detail, t)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.conformance.node_cases",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help="cases (default: all, or every --stride-th)")
    ap.add_argument("--stride", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", help="write {case: [outcome, detail, seconds]} here")
    ap.add_argument("--update", action="store_true", help="add the passing cases to the passing list")
    args = ap.parse_args(argv)
    names = args.names or sorted(cases())[::args.stride]
    start = time.monotonic()
    results = sweep(names, args.jobs)
    for n in sorted(results):
        outcome, detail, _ = results[n]
        if outcome != "pass":
            print(f"{outcome:12s} {n}: {detail}")
    counts = Counter(o for o, _, _ in results.values())
    counted = len(results) - counts["out-of-scope"]
    with_bound = sum(1 for o, d, _ in results.values() if o == "pass" and d.startswith("bound:"))
    print(f"\n{len(results)} cases in {time.monotonic() - start:.0f} s: " + ", ".join(
        f"{k} {v}" for k, v in counts.most_common()) + f"; pass {counts['pass']}/{counted} counted "
        f"({100 * counts['pass'] / max(counted, 1):.1f}%), {with_bound} of them with inputs bound at build "
        "time")
    listed = set(passing())
    lost = sorted(n for n in listed & set(results) if results[n][0] != "pass")
    if lost:
        print(f"listed as passing but not passing now: {lost}")
    if args.json:
        Path(args.json).write_text(json.dumps({n: list(v) for n, v in sorted(results.items())}, indent=0))
    if args.update:
        new = sorted(listed | {n for n, v in results.items() if v[0] == "pass"})
        PASSING_FILE.write_text("# generated ONNX node cases that pass (python -m "
                                "tests.conformance.node_cases --update); the list only grows\n"
                                + "\n".join(new) + "\n")
    return 1 if lost or counts["compiler"] or counts["crash"] else 0


if __name__ == "__main__":
    sys.exit(main())
