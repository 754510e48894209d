"""Every subcommand of ``cuvil-edge`` and ``cuvil-agent`` ends a user error in one stderr line and a
documented exit code, never a traceback: a missing file, a wrong option value, a malformed model or bundle.

The commands are enumerated from the argparse parsers, so a new one is covered (at least by its
missing-file and bad-option cases) without touching this file; values for arguments that are not files
come from the tables below, and a command gaining such an argument fails ``test_arguments_are_known``.
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest

from cuvil_agent import cli as agent
from cuvil_edge import CuvilModel, Target
from cuvil_edge.cli import app as host
from cuvil_edge.signing import Keyring
from cuvil_edge.testing.zoo import NetBuilder

ROOT = Path(__file__).resolve().parents[2]
CLIS: dict[str, tuple[Callable[[list[str]], int], argparse.ArgumentParser, set[int]]] = {
    # argparse's own usage errors exit 2 as well
    name: (mod.main, mod.build_parser(), {code for _, code, _ in mod.EXIT_CODES} | {2})
    for name, mod in (("cuvil-edge", host), ("cuvil-agent", agent))
}
#: arguments that name a file or directory the command reads (or, for keyring/state_dir, opens)
FILE_ARGS = {"model", "bundle", "keyring", "root", "config", "sign_key", "calib", "inputs", "state_dir",
             "tls_ca", "tls_cert", "tls_key", "state_file", "replay"}
#: valid values for the other arguments a command may require, so the error comes from the one under test
PLAIN_ARGS = {"key_id": "0123", "device": "dev-1", "action": "report", "name": "raspberry-pi-4", "fleet": "f",
              "hardware_id": "hw", "store": "postgresql://127.0.0.1:1/none"}  # a store URL: creates no file
#: option values that parse but are wrong, checked by the command rather than argparse
BAD_VALUES = {"input_shape": "x=1,a", "precision": "int3", "targets": "foo", "broker": "no-port",
              "profile": "no-such-profile", "canary": "150%", "stages": "25,x", "halt_on": "-1"}
#: optional arguments given in every case (unless under test), or the command would stop at "give
#: --sign-key", "needs --release N and a --hardware-id", "give --state-dir", "holds no trust state", "no
#: socket" or a bundle for another hardware id before the argument under test
GIVEN = {"cuvil-edge": ("sign_key", "release", "hardware_id"),
         "cuvil-agent": ("state_dir", "root", "socket", "hardware_id")}
#: options the argument under test needs beside it to be read at all (calibration data only by a quantized
#: build), and those that would be used instead of it (``--sign-key`` rather than ``--keyring``)
WITH = {"calib": {"precision": "int8"}}
WITHOUT = {"keyring": "sign_key"}
#: GIVEN options a command declares only to refuse them with a hint (``status`` reads; trust rotates)
REFUSES = {("status",): {"root"}}
#: file arguments a command creates rather than reads: no malformed-input case for those
CREATES = {("keys", "init"): {"keyring"}}
#: commands whose valid model is a built model directory rather than an .onnx file
RUNS_BUILT = {("run",)}
BROKER_TIMEOUT_S = "0.5"


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """(command words, parser) of every runnable command, nested groups (``keys``, ``fleet``) included."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for word, child in action.choices.items():
            yield from leaves(child, (*path, word))


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    skip = (argparse._HelpAction, argparse._SubParsersAction)
    return [a for a in parser._actions if not isinstance(a, skip)]


COMMANDS = [(cli, words, parser) for cli, (_, top, _) in CLIS.items() for words, parser in leaves(top)]


@dataclass(frozen=True)
class Files:
    """Inputs the cases point at: a path that cannot exist, a valid model and malformed ones."""

    missing: Path  # below a regular file, so not even a command that creates it can
    onnx: Path
    built: Path  # tiny.onnx built (``cuvil-edge run`` wants a model directory)
    garbage: dict[str, Path]  # argument -> malformed file or directory
    spec_dirs: tuple[Path, ...]  # model directories without model.json, and with a malformed one
    port: int  # nothing listens there
    given: dict[str, Path | str]  # values of GIVEN: an empty state directory, a valid release key...
    out: Path  # where a command writes (nothing should be written: every case fails)
    valid: dict[str, Path]  # argument -> a file it accepts: a bundle signed for "hw", its root, inputs...

    def valid_for(self, cli: str, words: tuple[str, ...]) -> dict[str, Path]:
        """Valid files for every argument of ``cli words`` (``run`` wants a built model directory, the
        agent's ``infer`` a .npy per input)."""
        chosen = {"model": self.built if words in RUNS_BUILT else self.onnx}
        return {**self.valid, **chosen, **({"inputs": self.valid["npy"]} if cli == "cuvil-agent" else {})}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Files:
    d = tmp_path_factory.mktemp("cli-errors")
    (d / "a-file").write_text("not a directory")
    b = NetBuilder("tiny", seed=1)
    onnx.save(b.build([("x", [1, 4])], b.gemm("x", 4, 3), [1, 3]), d / "tiny.onnx")
    noise = os.urandom(512)
    for name in ("random.onnx", "garbage.cvb", "garbage.toml", "garbage.json", "garbage.npz", "garbage.key"):
        (d / name).write_bytes(noise)
    (d / "no-spec.cuvil").mkdir()  # a model directory without model.json
    (d / "bad-spec.cuvil").mkdir()
    (d / "bad-spec.cuvil" / "model.json").write_bytes(noise)
    (d / "bad-keyring" / "roots").mkdir(parents=True)  # a keyring whose signed root is garbage
    (d / "bad-keyring" / "root.json").write_bytes(noise)
    (d / "bad-keyring" / "roots" / "1.root.json").write_bytes(noise)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    garbage = {"model": d / "random.onnx", "bundle": d / "garbage.cvb", "config": d / "garbage.toml",
               "root": d / "garbage.json", "calib": d / "garbage.npz", "sign_key": d / "garbage.key",
               "keyring": d / "bad-keyring", "inputs": d / "garbage.npz", "state_file": d / "garbage.json"}
    spec_dirs = (d / "no-spec.cuvil", d / "bad-spec.cuvil")
    Keyring.init(d / "keys", 1, 1, 1, 1)
    key = next((d / "keys").glob("release-*.key"))
    given: dict[str, Path | str] = {"state_dir": d / "state", "sign_key": key, "release": "1",
                                    "hardware_id": PLAIN_ARGS["hardware_id"], "socket": d / "no-agent.sock",
                                    "root": d / "keys" / "root.json"}
    with CuvilModel.load(d / "tiny.onnx").optimize(targets=[Target()]) as m:
        m.save(d / "tiny.cuvil")
    assert host.main(["bundle", str(d / "tiny.cuvil"), "-o", str(d / "tiny.cvb"), "--sign-key", str(key),
                      "--release", "1", "--hardware-id", PLAIN_ARGS["hardware_id"]]) == 0
    x = np.random.default_rng(0).standard_normal((4, 1, 4)).astype(np.float32)
    np.savez(d / "calib.npz", x=x)
    np.savez(d / "inputs.npz", x=x[0])
    np.save(d / "x.npy", x[0])
    valid = {"bundle": d / "tiny.cvb", "root": d / "keys" / "root.json", "keyring": d / "keys",
             "calib": d / "calib.npz", "inputs": d / "inputs.npz", "npy": d / "x.npy"}
    return Files(d / "a-file" / "missing", d / "tiny.onnx", d / "tiny.cuvil", garbage, spec_dirs, port, given,
                 d / "out", valid)


def _option(action: argparse.Action) -> str:
    return max(action.option_strings, key=len)


def argv_for(cli: str, words: tuple[str, ...], parser: argparse.ArgumentParser, files: Files,
             paths: dict[str, Path], extra: dict[str, str] | None = None) -> list[str]:
    """``words`` and every positional and required option filled: files from ``paths`` (by dest, else a
    missing one), the rest from ``PLAIN_ARGS``; ``extra`` sets options by dest (the argument under test,
    with its ``WITH``). Brokers: a closed port."""
    extra = {k: v for dest in extra or {} for k, v in WITH.get(dest, {}).items()} | dict(extra or {})
    given = set(GIVEN[cli]) - {WITHOUT[dest] for dest in extra if dest in WITHOUT} - REFUSES.get(words, set())
    dests = {a.dest for a in arguments(parser)}
    if "broker" in dests:
        extra.setdefault("broker", f"127.0.0.1:{files.port}")
        extra.setdefault("connect_timeout_s", BROKER_TIMEOUT_S)
    argv = list(words)
    for a in arguments(parser):
        value = extra.pop(a.dest, None)
        if value is None and a.dest in given:
            value = str(paths.get(a.dest, files.given[a.dest]))
        if value is None and not (a.required or not a.option_strings):
            continue
        if value is None:
            plain = PLAIN_ARGS.get(a.dest, str(files.out))
            value = str(paths.get(a.dest, files.missing)) if a.dest in FILE_ARGS else plain
        if a.dest == "inputs" and not a.option_strings:  # cuvil-agent infer: NAME=FILE.npy
            value = f"x={value}"
        argv += [value] if not a.option_strings else [_option(a), value]
    return argv


def cases(files: Files) -> Iterator[tuple[str, list[str], tuple[str, ...]]]:
    """(cli, argv, what the error must mention) of every error case of every command. A wrong value is
    the only thing wrong in its invocation (every other file valid, every other option given validly),
    and its error names the option or the value, so it cannot pass by failing on something else."""
    for cli, words, parser in COMMANDS:
        acts = arguments(parser)
        reads = [a for a in acts if a.dest in FILE_ARGS]

        command = functools.partial(argv_for, cli, words, parser, files)
        # (a) the files it reads do not exist (each optional one too, one at a time)
        if any(not a.option_strings or a.required for a in reads):
            yield cli, command({}), ()
        valid = files.valid_for(cli, words)
        for a in reads:
            if a.option_strings and not a.required:
                yield cli, command(valid, {a.dest: str(files.missing)}), ()
        # (b) a wrong option value; every number here is a count, size, duration, port or threshold: none
        # may be negative
        yield cli, [*command(valid), "--no-such-option"], ("--no-such-option",)
        for a in acts:
            if not a.option_strings or a.nargs == 0:
                continue
            bad = [BAD_VALUES[a.dest]] if a.dest in BAD_VALUES else []
            bad += ["bogus"] if a.dest not in BAD_VALUES and (a.choices or a.type is not None) else []
            bad += ["-1"] if a.type is not None and not a.choices and a.dest not in BAD_VALUES else []
            for value in bad:
                yield cli, command(valid, {a.dest: value}), (_option(a), value)
        # (c) malformed models, bundles, configs, keys...; a model directory without a (readable) spec
        for a in reads:
            if a.dest in files.garbage and a.dest not in CREATES.get(words, ()):
                garbage = files.garbage[a.dest]
                yield cli, command({**valid, a.dest: garbage},
                                   {a.dest: str(garbage)} if a.option_strings else None), ()
        if any(a.dest == "model" and not a.option_strings for a in acts):  # the agent's --model is a name
            for spec in files.spec_dirs:
                yield cli, command({**valid, "model": spec}), ()


def test_arguments_are_known():
    """Each argument a command requires has a value in the tables (a new one must be added there)."""
    for cli, words, parser in COMMANDS:
        for a in arguments(parser):
            known = FILE_ARGS | set(PLAIN_ARGS) | {"output"}
            if (a.required or not a.option_strings) and a.dest not in known:
                pytest.fail(f"{cli} {' '.join(words)}: no test value for required argument {a.dest!r}")


def test_every_command_fails_cleanly(files: Files, capsys, monkeypatch, tmp_path):
    """Each case exits with a documented code and one stderr line (or argparse's usage block) that, for a
    wrong value, names it. Run in a scratch directory: a publisher's default state file lands in the cwd."""
    monkeypatch.chdir(tmp_path)
    covered: set[tuple[str, tuple[str, ...]]] = set()
    failures = []
    for cli, argv, mentions in cases(files):
        main, _, codes = CLIS[cli]
        covered |= {(c, w) for c, w, _ in COMMANDS if c == cli and tuple(argv[:len(w)]) == w}
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse, or a usage message of the command's own
            code = exc.code if isinstance(exc.code, int) else 1
            if not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
        except Exception as exc:  # collected, so that one run lists every command that fails
            code = f"uncaught {type(exc).__name__}: {exc}"
        out, err = capsys.readouterr()
        lines = [line for line in err.splitlines() if line.strip()]
        usage = bool(lines) and lines[0].startswith("usage:") and ": error: " in lines[-1]
        problems = [what for what, bad in (
            (f"exit {code} not in {sorted(codes)}", code not in codes),
            (f"{len(lines)} stderr lines", not usage and len(lines) != 1),
            ("usage block with an exit code other than 2", usage and code != 2),
            ("a traceback", "Traceback" in out + err),
            (f"the error mentions none of {mentions}", mentions and not any(m in err for m in mentions)),
        ) if bad]
        if problems:
            failures.append(f"{cli} {' '.join(argv)}: {', '.join(problems)}\n{err[-1500:]}")
    assert not failures, "\n\n".join(failures)
    assert covered == {(cli, words) for cli, words, _ in COMMANDS}


@pytest.mark.parametrize(("module", "argv", "code", "line"), [
    ("cuvil_edge.cli", ["inspect", "missing.cuvil"], 1, "error: FileNotFoundError: "),
    ("cuvil_edge.cli", ["build", "{onnx}", "--precision", "int8", "-q"], 2,
     "error: QuantizationError: int8 (static) needs calibration data: give --calib FILE"),
    ("cuvil_agent.cli",
     ["install", "missing.cvb", "--state-dir", "{tmp}/state", "--root", "{tmp}/missing.json"], 1,
     "error: FileNotFoundError: "),
    ("cuvil_agent.cli", ["run", "--config", "{config}"], 1,
     "error: ConfigError: {config}: not a TOML file: "),
    ("cuvil_agent.cli", ["infer", "--text", "hi", "--state-dir", "{tmp}", "--socket", "{tmp}/agent.sock"], 1,
     "error: ServerUnreachable: agent socket {tmp}/agent.sock: No such file or directory"),
], ids=["host-missing-file", "host-int8-without-calib", "agent-missing-root", "agent-binary-config",
        "agent-no-socket"])
def test_real_process(files: Files, tmp_path, module: str, argv: list[str], code: int, line: str):
    """As a user sees it: a separate interpreter, the exit status and the first stderr line (naming the
    file at fault where there is one)."""
    paths = {"onnx": files.onnx, "tmp": tmp_path, "config": files.garbage["config"]}
    argv, line = [a.format(**paths) for a in argv], line.format(**paths)
    proc = subprocess.run([sys.executable, "-m", module, *argv], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    lines = [x for x in proc.stderr.splitlines() if x.strip()]
    assert (proc.returncode, len(lines)) == (code, 1) and lines[0].startswith(line), proc.stderr
