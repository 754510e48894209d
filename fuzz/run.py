"""Run the harnesses: replay the checked-in inputs, or fuzz with atheris for a while and report.

    python -m fuzz.run --replay                      every target's corpus and regression inputs
    python -m fuzz.run --seconds 1800 http_api       30 minutes of coverage-guided fuzzing of one target
    python -m fuzz.run --seconds 600 --side device   each device target for 10 minutes, one after another

Fuzzing runs each target in a child process (``--child``: libFuzzer owns the process and exits it); new
inputs go to ``fuzz/work/<target>/corpus`` (not checked in: copy the ones worth keeping into
``fuzz/corpus``), findings to ``fuzz/work/<target>/crash-*``, to be turned into files in
``fuzz/regressions/<target>/`` and a test each. The report per target: seconds, executions, executions
per second, coverage (libFuzzer's ``cov``: instrumented edges reached; ``ft``: features), corpus size,
findings.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from .engine import CORPUS, REGRESSIONS, ROOT, inputs, replay

WORK = ROOT / "work"
#: libFuzzer's RSS cap for a target process, MB (the interpreter, numpy and wasmtime take ~250), raised
#: for a target whose ``memory_bound`` of the largest input says more (an import's budget)
RSS_LIMIT_MB = 2048
INTERPRETER_MB = 512
MAX_LEN = 16384
#: libFuzzer's status lines (NEW, REDUCE, pulse, DONE): executions, coverage, features, corpus units
_STATUS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/", re.M)
_STAT = re.compile(r"stat::(\w+):\s+(\d+)")


@dataclass
class FuzzReport:
    target: str
    seconds: int
    executions: int
    exec_per_s: int
    cov: int
    ft: int
    corpus: int
    findings: int
    rc: int


def child(name: str, libfuzzer_args: list[str]) -> None:
    """In the child: instrument the target's modules, set it up, hand the process to libFuzzer."""
    import atheris

    module = importlib.import_module(f"fuzz.targets.{name}")
    with atheris.instrument_imports(include=list(module.INSTRUMENT)):
        target = module.target()
        one = target.checked()
    atheris.Setup([sys.argv[0], *libfuzzer_args], one, custom_mutator=target.mutator)
    atheris.Fuzz()


def fuzz(name: str, seconds: int, time_limit_s: float, work_root: Path = WORK,
         rss_limit_mb: int = RSS_LIMIT_MB) -> FuzzReport:
    work = work_root / name
    (work / "corpus").mkdir(parents=True, exist_ok=True)
    for old in work.glob("crash-*"):
        old.unlink()
    seeds = [str(d) for d in (CORPUS / name, REGRESSIONS / name) if d.is_dir()]
    args = [f"-max_total_time={seconds}", f"-timeout={max(1, round(time_limit_s))}",
            f"-rss_limit_mb={rss_limit_mb}", f"-max_len={MAX_LEN}", "-print_final_stats=1",
            f"-artifact_prefix={work}/", str(work / "corpus"), *seeds]
    proc = subprocess.run([sys.executable, "-m", "fuzz.run", "--child", name, "--", *args],
                          cwd=ROOT.parent, capture_output=True, text=True, timeout=seconds + 300)
    log = proc.stderr + proc.stdout
    (work / "last.log").write_text(log)
    status = _STATUS.findall(log)
    stats = dict(_STAT.findall(log))
    execs, cov, ft, corp = (int(x) for x in status[-1]) if status else (0, 0, 0, 0)
    execs = max(execs, int(stats.get("number_of_executed_units", 0)))
    artifacts = sum(len(list(work.glob(f"{kind}-*"))) for kind in ("crash", "timeout", "oom"))
    # an exception as the run's time ran out can kill the child before libFuzzer writes its input: the
    # log still says so, and that is a finding too (the input then has to be rebuilt from the traceback)
    uncaught = log.count("=== Uncaught Python exception: ===")
    return FuzzReport(name, seconds, execs, int(stats.get("average_exec_per_sec", 0)), cov, ft, corp,
                      max(artifacts, uncaught), proc.returncode)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(argv[1], argv[3:])
        return 0
    from .targets import all_targets

    targets = all_targets()
    ap = argparse.ArgumentParser(prog="python -m fuzz.run", description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", choices=[[], *targets], help="targets (default: all of --side)")
    ap.add_argument("--side", choices=["device", "host", "all"], default="all")
    ap.add_argument("--replay", action="store_true", help="replay the checked-in inputs, no fuzzing")
    ap.add_argument("--seconds", type=int, default=60, help="fuzzing time per target")
    ap.add_argument("--json", help="also write the reports to this file")
    ap.add_argument("--work", type=Path, default=WORK, help=f"new inputs and findings (default {WORK})")
    args = ap.parse_args(argv)
    chosen = [targets[n] for n in args.names] or [t for t in targets.values()
                                                   if args.side in ("all", t.side)]
    failed = False
    reports = []
    for t in chosen:
        if args.replay:
            r = replay(t, inputs(t))
            print(f"{t.name:16s} {r.inputs:5d} inputs {r.seconds:6.1f} s  findings: {len(r.findings)}")
            for where, what in r.findings.items():
                print(f"  {where}: {what}")
            failed |= bool(r.findings)
            continue
        # the process's cap: the interpreter's own, or what the target may allocate for its largest input
        rss = max(RSS_LIMIT_MB, (t.memory_bound(MAX_LEN) >> 20) + INTERPRETER_MB)
        rep = fuzz(t.name, args.seconds, t.time_limit_s, args.work, rss)
        reports.append(asdict(rep))
        print(f"{rep.target:16s} {rep.seconds:6d} s {rep.executions:10d} execs {rep.exec_per_s:7d}/s "
              f"cov {rep.cov:6d} ft {rep.ft:6d} corpus {rep.corpus:5d} findings {rep.findings} (rc {rep.rc})",
              flush=True)
        failed |= bool(rep.findings) or rep.rc != 0
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
