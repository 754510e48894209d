"""The import structure of our packages, read statically (``ast`` over the source files, nothing imported):
no import cycle among modules at module level, no private name (``_x``) reached across modules, the
device packages free of the host compiler, the device side layered by role (the update path ``ota`` under
the agent ``cuvil_agent``, which alone puts it together with serving) and no module too long to read.
Plus one check that does import: ``ota`` loads nothing heavy (MQTT client, HTTP server, metrics, the model
runtime) until it is used.

Imports are listed in three kinds: ``module`` (run when the module loads, class bodies and ``try``
included), ``function`` (inside a def: run on first call) and ``typing`` (under ``if TYPE_CHECKING:``,
never run). Importing ``a.b.c`` runs the packages ``a`` and ``a.b`` first, so it is an import of them too
(unless the importer is inside them). A registry that loads a package's families by name
(``importlib.import_module(f"{__package__}.{name}")``, ``ConverterTable(what, package)``) imports every
public module of that package.

Only ``module`` imports can fail at load time, but a ``function`` import that closes a cycle is a cycle
hidden rather than removed (move the shared piece to a lower module instead), so the graph of both kinds
is checked too, over every package: its only cycles are the host's plug-in ones, each inside the package of
the registry that loads it (a family registers itself in its registry; the registry loads the families on
first lookup).

The tests' own imports: their helpers live in the package ``tests.support`` and are imported by name; no
file under ``tests/``, ``fuzz/`` or ``benchmarks/`` imports ``conftest``, a ``test_*`` module or a test
folder's helper by bare name (pytest's basename imports put the test folders on ``sys.path``, so such an
import works under pytest only, and loads a second copy of a module pytest imports), nor loads a module
from a file path.

Private names: ``from m import _x``, ``m._x`` through an imported module, a private submodule imported from
outside its package, and ``obj._x`` where this module defines no ``_x`` but another of ours does (the
static guess that ``obj`` is that module's object, e.g. a pass writing ``graph._names``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HOST = ("cuvil_edge",)
DEVICE = ("runtime_wasm", "ota", "cuvil_agent", "device_profiles")
PACKAGES = HOST + DEVICE
#: the agent's serving code: the Unix socket, the HTTP API with its protocol and metrics, processed requests
SERVING = ("cuvil_agent.serve", "cuvil_agent.http_api", "cuvil_agent.oip", "cuvil_agent.metrics",
           "cuvil_agent.payloads", "cuvil_agent.http_client")
#: what ``import ota`` (or any of its modules) must not load: the MQTT client, the HTTP server, the metrics
#: library, the model runtime's scheduler and workers, wasmtime itself
HEAVY = ("paho", "h11", "prometheus_client", "runtime_wasm.scheduler", "runtime_wasm.supervisor", "wasmtime")
#: the longest a module may be (generated kernels and templates are C, not modules here)
MAX_LINES = 600
#: the folders whose files import the tests' helpers (``tests.support``)
TEST_USERS = ("tests", "fuzz", "benchmarks")


@dataclass(frozen=True)
class Import:
    importer: str
    target: str  #: the module imported (a package's ``__init__`` under the package's name)
    name: str  #: the name taken from ``target`` ("" for ``import target``)
    kind: str  #: "module", "function" or "typing"
    line: int
    plugin: bool = False  #: a registry loading ``target`` as one of its package's families

    def __str__(self) -> str:
        what = f"from {self.target} import {self.name}" if self.name else f"import {self.target}"
        return f"{self.importer}:{self.line} ({self.kind}{', plug-in' if self.plugin else ''}) {what}"


@dataclass(frozen=True)
class ReachIn:
    importer: str
    target: str
    name: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer}:{self.line} uses {self.target}.{self.name}"


@cache
def modules() -> dict[str, Path]:
    """Every module of our packages by dotted name (``pkg/__init__.py`` as ``pkg``)."""
    found: dict[str, Path] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _is_package_name(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "__package__"


class _Collector(ast.NodeVisitor):
    """Imports of our modules and attribute reads of their private names, from one module's tree."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.imports: list[Import] = []
        self.reach_ins: list[ReachIn] = []
        #: private names this module defines (defs, classes, assignments, ``self._x``, keywords) and the
        #: private attributes it reads on other objects (``graph._names``): (name, line)
        self.defines: set[str] = set()
        self.foreign: list[tuple[str, int]] = []
        self._bound: dict[str, str] = {}  # local name -> our module it names
        self._constants: dict[str, ast.expr] = {}  # module-level NAME = (tuple, ...)
        self._kind = "module"

    def _resolve(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = self.package.split(".")
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def _add(self, target: str, name: str, line: int, plugin: bool = False, kind: str | None = None) -> None:
        if target.split(".")[0] in PACKAGES:
            self.imports.append(Import(self.module, target, name, kind or self._kind, line, plugin))

    def _add_families(self, package: str, skip: set[str], line: int, kind: str | None = None) -> None:
        for mod in modules():
            head, _, last = mod.rpartition(".")
            if head == package and not last.startswith("_") and last not in skip:
                self._add(mod, "", line, plugin=True, kind=kind)

    def _visit_scoped(self, node: ast.AST, kind: str) -> None:
        outer, self._kind = self._kind, kind if self._kind == "module" else self._kind
        self.generic_visit(node)
        self._kind = outer

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.defines.add(node.name)
        self._visit_scoped(node, "function")

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_scoped(node, "function")

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.defines.add(node.name)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.defines.add(node.id)

    def visit_keyword(self, node: ast.keyword) -> None:
        self.defines.add(node.arg or "")
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self._visit_scoped(ast.Module(body=node.body, type_ignores=[]), "typing")
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, "", node.lineno)
            bound = alias.name if alias.asname else alias.name.split(".")[0]
            if bound.split(".")[0] in PACKAGES:
                self._bound[alias.asname or bound] = bound

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._resolve(node)
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if sub in modules():
                self._add(sub, "", node.lineno)
                self._bound[alias.asname or alias.name] = sub
            else:
                self._add(base, alias.name, node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        """The two ways a registry loads its package's families by name."""
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "import_module" and node.args and \
                isinstance(node.args[0], ast.JoinedStr) and node.args[0].values and \
                isinstance(node.args[0].values[0], ast.FormattedValue) and \
                _is_package_name(node.args[0].values[0].value):
            self._add_families(self.package, set(), node.lineno)
        if isinstance(func, ast.Name) and func.id == "ConverterTable" and len(node.args) > 1:
            package = node.args[1]
            name = self.package if _is_package_name(package) else getattr(package, "value", None)
            skip = next((kw.value for kw in node.keywords if kw.arg == "skip"), None)
            if isinstance(skip, ast.Name):  # a module-level tuple of names
                skip = self._constants.get(skip.id)
            names = {e.value for e in getattr(skip, "elts", ())}
            if isinstance(name, str):  # loaded on the table's first lookup
                self._add_families(name, names, node.lineno, kind="function")
        self.generic_visit(node)

    def visit_Module(self, node: ast.Module) -> None:
        self._constants = {t.id: a.value for a in node.body if isinstance(a, (ast.Assign, ast.AnnAssign))
                           for t in (a.targets if isinstance(a, ast.Assign) else [a.target])
                           if isinstance(t, ast.Name) and isinstance(a.value, ast.Tuple)}
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        chain: list[str] = []
        value: ast.expr = node
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(node.value, ast.Name) and _is_private(node.attr):
            if node.value.id in ("self", "cls"):
                self.defines.add(node.attr)
            elif node.value.id not in self._bound:
                self.foreign.append((node.attr, node.lineno))
        if isinstance(value, ast.Name) and value.id in self._bound:
            target = self._bound[value.id]
            for attr in reversed(chain):
                if f"{target}.{attr}" not in modules():
                    if _is_private(attr) and target != self.module:
                        self.reach_ins.append(ReachIn(self.module, target, attr, node.lineno))
                    break
                target = f"{target}.{attr}"
            return  # the whole chain is read; its inner Attribute nodes add nothing
        self.generic_visit(node)


@cache
def scan() -> tuple[tuple[Import, ...], tuple[ReachIn, ...]]:
    imports: list[Import] = []
    reach_ins: list[ReachIn] = []
    collectors = []
    for name, path in modules().items():
        collector = _Collector(name, path.name == "__init__.py")
        collector.visit(ast.parse(path.read_text(), filename=str(path)))
        imports += collector.imports
        reach_ins += collector.reach_ins
        collectors.append(collector)
    # ``obj._x`` where this module defines no ``_x`` but another of ours does: another module's private
    # state (the static guess at an object's type: the module that defines the name)
    for c in collectors:
        for attr, line in c.foreign:
            owners = [o.module for o in collectors if o is not c and attr in o.defines]
            if attr not in c.defines and owners:
                reach_ins.append(ReachIn(c.module, "/".join(owners), attr, line))
    return tuple(imports), tuple(reach_ins)


def _edges(imp: Import) -> Iterator[str]:
    """What ``imp`` runs: its target and the target's packages that are not already the importer's."""
    parts = imp.target.split(".")
    for i in range(1, len(parts) + 1):
        mod = ".".join(parts[:i])
        if mod in modules() and mod != imp.importer and not _within(imp.importer, mod):
            yield mod


def _graph(kinds: set[str], plugins: bool, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for imp in scan()[0]:
        if imp.kind in kinds and (plugins or not imp.plugin) and imp.importer.split(".")[0] in packages:
            edges[imp.importer].update(_edges(imp))
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _describe(cycles: list[list[str]], kinds: set[str]) -> str:
    out = []
    for cycle in cycles:
        members = set(cycle)
        lines = [str(i) for i in scan()[0]
                 if i.kind in kinds and i.importer in members and members & set(_edges(i))]
        out.append(" <-> ".join(cycle) + "\n    " + "\n    ".join(lines))
    return "\n".join(out)


def test_the_scan_sees_every_kind_of_import() -> None:
    """The walk itself works: known imports of each kind are found (a broken walker passes nothing)."""
    assert len(modules()) > 100 and "cuvil_edge.ops.registry" in modules()
    found = {(i.importer, i.target, i.kind, i.plugin) for i in scan()[0]}
    assert ("cuvil_edge.ops.conv", "cuvil_edge.ops.registry", "module", False) in found
    assert ("cuvil_edge.ops.registry", "cuvil_edge.ops._load_all", "function", False) in found
    assert ("cuvil_edge.ops.registry", "cuvil_edge.codegen.emit", "typing", False) in found
    assert ("cuvil_edge.ops._load_all", "cuvil_edge.ops.conv", "module", True) in found
    assert ("cuvil_edge.frontend.tflite.registry", "cuvil_edge.frontend.tflite.convert_nn", "function",
            True) in found
    assert not any(i.target == "cuvil_edge.frontend.tflite.reader" and i.plugin for i in scan()[0])


def test_each_violation_is_caught() -> None:
    """The detectors on a made-up module: a private import, a reach-in through a module, another module's
    private state, a type-only import; and a cycle found as one component."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from .conv import _infer\n"
        "from . import conv\n"
        "if TYPE_CHECKING:\n"
        "    from ..codegen.emit import EmitContext\n"
        "def f(g):\n"
        "    from ..ir import graph\n"
        "    return conv._pad(g), g._names\n")
    c = _Collector("cuvil_edge.ops.made_up", False)
    c.visit(ast.parse(source))
    kinds = {(i.target, i.name): i.kind for i in c.imports}
    assert kinds == {("cuvil_edge.ops.conv", "_infer"): "module", ("cuvil_edge.ops.conv", ""): "module",
                     ("cuvil_edge.codegen.emit", "EmitContext"): "typing",
                     ("cuvil_edge.ir.graph", ""): "function"}
    assert [(r.target, r.name) for r in c.reach_ins] == [("cuvil_edge.ops.conv", "_pad")]
    assert ("_names", 8) in c.foreign and "_names" not in c.defines
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c"]]


def test_no_module_level_import_cycle() -> None:
    cycles = _cycles(_graph({"module"}, plugins=True))
    assert not cycles, "import cycles at module level:\n" + _describe(cycles, {"module"})


def test_no_cycle_hidden_in_a_function_level_import() -> None:
    kinds = {"module", "function"}
    cycles = _cycles(_graph(kinds, plugins=False, packages=PACKAGES))
    assert not cycles, "cycles through function-level imports:\n" + _describe(cycles, kinds)


def test_plug_in_cycles_stay_inside_their_package() -> None:
    """A family registers itself in its registry, which loads the families: that cycle is the design,
    but nothing outside the package may sit on it (``ops`` importing the emitter that looks ops up)."""
    plugged = {i.target.rpartition(".")[0] for i in scan()[0] if i.plugin}
    kinds = {"module", "function"}
    bad = [c for c in _cycles(_graph(kinds, plugins=True, packages=HOST))
           if not any(all(_within(m, p) for m in c) for p in plugged)]
    assert not bad, "cycles through a plug-in registry that leave its package:\n" + _describe(bad, kinds)


def test_no_private_name_imported_across_modules() -> None:
    imports, reach_ins = scan()
    bad = [str(i) for i in imports if _is_private(i.name)]
    # a private submodule is the business of its own package only
    for i in imports:
        package, _, last = i.target.rpartition(".")
        if not i.name and not i.plugin and _is_private(last) and not _within(i.importer, package):
            bad.append(str(i))
    bad += [str(r) for r in reach_ins]
    assert not bad, "private names used outside their module:\n" + "\n".join(bad)


def test_only_the_demo_uses_the_test_fixtures() -> None:
    """``cuvil_edge.testing`` (generated nets, a throwaway broker, a tiny release) is for the demo, the tests
    and the benchmarks: no build, ship or serve module may come to depend on it."""
    pkg = "cuvil_edge.testing"
    users = {i.importer for i in scan()[0] if _within(i.target, pkg) and not _within(i.importer, pkg)}
    assert users == {"cuvil_edge.tools.demo"}, f"product modules importing {pkg}: {sorted(users)}"


def test_device_packages_never_import_the_host_compiler() -> None:
    bad = [str(i) for i in scan()[0] if i.importer.split(".")[0] in DEVICE and i.target.split(".")[0] in HOST]
    assert not bad, "device packages importing cuvil_edge:\n" + "\n".join(bad)


def test_the_update_path_imports_nothing_heavy():
    """The host reads ``ota``'s formats (``from ota.config import OtaConfig``) and the agent drives it: a
    fresh interpreter importing ``ota`` and every one of its modules has loaded no MQTT client, HTTP server,
    metrics library, scheduler, worker supervisor or wasmtime (each loads inside what uses it)."""
    ota_modules = sorted(m for m in modules() if _within(m, "ota"))
    assert "ota.transport" in ota_modules and "ota.installer" in ota_modules
    script = ("import importlib, sys\n"
              f"for m in {ota_modules!r}:\n"
              "    importlib.import_module(m)\n"
              f"print(sorted(h for h in {HEAVY!r} if h in sys.modules))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"importing ota loads {proc.stdout.strip()}"


def test_the_agent_console_script_loads_nothing_until_it_runs():
    """Every supervised worker re-runs the parent's ``__main__`` (multiprocessing does, so that callables
    defined there unpickle); for the agent that is the ``cuvil-agent`` console script, which imports its
    entry point. The entry point is ``cuvil_agent.launch:main``, and importing it loads neither the CLI nor
    any package the CLI needs (``cuvil_agent.launch``'s docstring has the cost this saves every worker)."""
    assert '\ncuvil-agent = "cuvil_agent.launch:main"\n' in (ROOT / "pyproject.toml").read_text()
    script = ("import sys\nimport cuvil_agent.launch\n"
              "heavy = ('ota', 'device_profiles', 'numpy', 'wasmtime', 'paho')\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m == 'cuvil_agent.cli'))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"importing the entry point loads {proc.stdout.strip()}"


def test_the_agent_alone_composes_the_update_path_and_serving():
    """The device side by role: ``ota`` (update path, fleet protocol) never imports the agent; serving is
    the agent's, imported from nowhere else but the demo (which runs a device on the host, as the tests
    do); so ``cuvil_agent`` is the one package importing both ``ota`` and the serving code."""
    imports = scan()[0]
    below = [str(i) for i in imports
             if i.importer.split(".")[0] in ("ota", "runtime_wasm", "device_profiles")
             and _within(i.target, "cuvil_agent")]
    assert not below, "the update path or the runtime importing the agent:\n" + "\n".join(below)
    serving = [str(i) for i in imports if any(_within(i.target, s) for s in SERVING)
               and not _within(i.importer, "cuvil_agent") and i.importer != "cuvil_edge.tools.demo"]
    assert not serving, "serving code imported outside the agent:\n" + "\n".join(serving)
    host = {i.importer for i in imports
            if _within(i.target, "cuvil_agent") and _within(i.importer, "cuvil_edge")}
    assert host <= {"cuvil_edge.tools.demo"}, f"host modules importing the agent: {sorted(host)}"
    product = [i for i in imports if i.importer != "cuvil_edge.tools.demo"]
    both = {pkg for pkg in PACKAGES
            if any(_within(i.importer, pkg) and _within(i.target, "ota") for i in product)
            and any(_within(i.importer, pkg) and any(_within(i.target, s) for s in SERVING) for i in product)}
    assert both == {"cuvil_agent"}, f"packages importing both ota and the serving code: {sorted(both)}"


def test_no_module_is_too_long_to_read():
    lines = {m: path.read_text().count("\n") for m, path in modules().items()}
    long = {m: n for m, n in lines.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by concern): {long}"


def _bare_test_modules() -> set[str]:
    """What pytest's basename imports make importable by bare name: the modules of the test folders (those
    without ``__init__.py``): ``conftest``, the ``test_*`` modules, the conformance scripts."""
    return {p.stem for p in (ROOT / "tests").rglob("*.py") if not (p.parent / "__init__.py").is_file()}


def reaches_into_tests(tree: ast.AST, bare: set[str]) -> list[tuple[int, str]]:
    """(line, what) for each import, at any depth, of a module in ``bare`` by bare name, or of ``conftest``
    or a ``test_*`` module by dotted path; and each module loaded from a file path."""
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "tests" or \
                node.module.startswith("tests.") else [node.module]
        elif isinstance(node, ast.Call) and "spec_from_file_location" in (
                getattr(node.func, "attr", None), getattr(node.func, "id", None)):
            found.append((node.lineno, "spec_from_file_location"))
        for name in names:
            head, *rest = name.split(".")
            if head in bare or (head == "tests" and any(p == "conftest" or p.startswith("test_")
                                                        for p in rest)):
                found.append((node.lineno, name))
    return found


def test_tests_import_their_helpers_from_tests_support_by_name():
    """Helpers live in ``tests.support`` (the one package under ``tests/``) and are imported by name: no
    test module imports another test module or ``conftest``, no helper is imported by bare name (from
    ``tests/``, ``fuzz/`` or ``benchmarks/``), and the support modules import no test module."""
    bare = _bare_test_modules()
    assert {"conftest", "test_structure", "node_cases"} <= bare and "ort_check" not in bare
    made_up = ("import conftest\nfrom test_install import World\nimport node_cases as n\n"
               "from tests.conftest import make_model\nfrom tests.integration import test_tflite\n"
               "import http.client\nfrom tests.support.http import call\n"
               "from tests.conformance.node_cases import sweep\n"
               "def f(path):\n    from tests.integration.test_threads import build\n"
               "    return importlib.util.spec_from_file_location('m', path)\n")
    assert [line for line, _ in reaches_into_tests(ast.parse(made_up), bare)] == [1, 2, 3, 4, 5, 10, 11]
    bad = [f"{path.relative_to(ROOT)}:{line} {what}"
           for folder in TEST_USERS for path in sorted((ROOT / folder).rglob("*.py"))
           for line, what in reaches_into_tests(ast.parse(path.read_text(), filename=str(path)), bare)]
    assert not bad, "imports of test modules or of helpers by bare name (import from tests.support):\n" + \
        "\n".join(bad)
    packages = sorted(str(p.parent.relative_to(ROOT)) for p in (ROOT / "tests").rglob("__init__.py"))
    assert packages == ["tests/support"], f"test folders must stay without __init__.py: {packages}"
