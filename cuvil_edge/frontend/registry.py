"""A converter table keyed by op name, shared by the frontends: one registration per op, families
loaded on first use (each public module of the frontend's package registers one family)."""

from __future__ import annotations

import hashlib
import importlib
import marshal
import pkgutil
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Graph, Node, Value
from ..ir.limits import charge
from ..ops import get as get_op

F = TypeVar("F", bound=Callable[..., None])


class ConverterTable(Generic[F]):
    """``what`` names the table in errors ("TFLite builtin", "TFLite custom"); ``package`` is loaded
    (every module not starting with ``_`` and not in ``skip``) before the first lookup."""

    #: every table made, for ``user_converters_digest``
    tables: list[ConverterTable[Any]] = []

    def __init__(self, what: str, package: str | None = None, skip: tuple[str, ...] = ()) -> None:
        self.what, self._package, self._skip = what, package, skip
        self._table: dict[str, F] = {}
        self._loaded = package is None
        ConverterTable.tables.append(self)

    def register(self, *names: str) -> Callable[[F], F]:
        """Decorator: ``fn`` converts ops ``names``; a second converter for one name is a bug."""

        def deco(fn: F) -> F:
            for name in names:
                if name in self._table:
                    raise ValueError(f"{self.what} op {name!r} has two converters")
                self._table[name] = fn
            return fn

        return deco

    def _load(self) -> None:
        if self._loaded or self._package is None:
            return
        self._loaded = True
        pkg = importlib.import_module(self._package)
        for mod in pkgutil.iter_modules([str(Path(pkg.__file__).parent)]):
            if not mod.name.startswith("_") and mod.name not in self._skip:
                importlib.import_module(f"{self._package}.{mod.name}")

    def get(self, name: str) -> F | None:
        self._load()
        return self._table.get(name)

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(sorted(self._table))


def user_converters_digest() -> str | None:
    """A digest of the converters registered from outside cuvil_edge (a user's custom ops: name, function
    and its code), which shape an import as much as the bytes do; None when there are none. The compiler
    fingerprint covers cuvil_edge's own."""
    own = __name__.split(".")[0]
    found = sorted((t.what, name, f"{fn.__module__}.{fn.__qualname__}", hashlib.sha256(
        marshal.dumps(fn.__code__)).hexdigest()) for t in ConverterTable.tables
        for name, fn in t._table.items() if fn.__module__.split(".")[0] != own)
    return hashlib.sha256(repr(found).encode()).hexdigest() if found else None


#: ops whose fold only moves a constant's numbers, so its quantization record (``Value.quant``) follows
MOVES_NUMBERS = frozenset({"reshape", "transpose"})


def emit_node(graph: Graph, op: str, inputs: list[Value], attrs: dict[str, Any], name: str,
              n_outputs: int = 1) -> list[Value]:
    """Shared by importers and passes: infer types, fold constant nodes eagerly, else append."""
    opdef = get_op(op)
    probe = Node(op, name, inputs, [], attrs)
    try:
        types = list(opdef.infer(probe))
    except ShapeError as exc:  # a type too large or negative says nothing of where: name the node
        if name in str(exc):
            raise
        raise ShapeError(f"node {name!r} ({op}): {exc}") from exc
    if all(v.is_const for v in inputs) and opdef.fold is not None:
        charge(sum(t.nbytes for t in types), f"node {name!r} ({op})")  # before the fold allocates
        # empty outputs need no fold (numpy's reductions without an identity refuse an empty input)
        arrays = ([np.empty(t.shape, t.dtype) for t in types] if all(t.size == 0 for t in types)
                  else opdef.fold(probe, [v.const for v in inputs]))
        outs = [graph.constant(f"{name}:{i}", np.asarray(a, dtype=t.dtype).reshape(t.shape))
                for i, (a, t) in enumerate(zip(arrays, types))]
        src = inputs[0].quant if op in MOVES_NUMBERS else None
        if src is not None:  # a quantized weight re-laid (QDQ: DequantizeLinear -> Transpose -> MatMul)
            outs[0].quant = src.relaid(inputs[0].type.shape, lambda a: opdef.fold(probe, [a])[0])
        return outs
    outs = [graph.value(f"{name}:{i}" if n_outputs > 1 else name, t) for i, t in enumerate(types)]
    graph.add_node(op, name, inputs, outs, attrs)
    return outs



class IRBuilder:
    """What every frontend's converter context does to produce IR: nodes named after the op being
    converted (``name``) in ``graph``, folded at once when all their inputs are constants."""

    graph: Graph
    name: str

    def emit(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None,
             name: str | None = None, n_outputs: int = 1) -> list[Value]:
        """Add an IR node (or fold it now when every input is a constant) and return its outputs."""
        return emit_node(self.graph, op, list(inputs), attrs or {}, name or self.name, n_outputs)

    def emit1(self, op: str, inputs: Sequence[Value], attrs: dict[str, Any] | None = None,
              name: str | None = None) -> Value:
        return self.emit(op, inputs, attrs, name)[0]

    def materialise(self, nbytes: int) -> None:
        """Count a constant about to be made from shapes alone (a mask, an eye, a ramp) against the
        import's budget, before it is allocated."""
        charge(int(nbytes), f"node {self.name!r}")

    def constant(self, array: np.ndarray, name: str = "const") -> Value:
        return self.graph.constant(f"{self.name}/{name}", np.asarray(array))
