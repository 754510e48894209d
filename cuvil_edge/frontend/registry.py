"""A converter table keyed by op name, shared by the frontends: one registration per op, families
loaded on first use (each public module of the frontend's package registers one family)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable[..., None])


class ConverterTable(Generic[F]):
    """``what`` names the table in errors ("TFLite builtin", "TFLite custom"); ``package`` is loaded
    (every module not starting with ``_`` and not in ``skip``) before the first lookup."""

    def __init__(self, what: str, package: str | None = None, skip: tuple[str, ...] = ()) -> None:
        self.what, self._package, self._skip = what, package, skip
        self._table: dict[str, F] = {}
        self._loaded = package is None

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
