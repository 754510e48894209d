"""Package exports loaded on first use (PEP 562): one mechanism for every device package whose
``__init__`` would otherwise import its heavy modules at ``import`` time (``runtime_wasm``,
``cuvil_agent``)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, where: Mapping[str, str]) -> tuple[list[str], Callable[[str], Any],
                                                                   Callable[[], list[str]]]:
    """(``__all__``, ``__getattr__``, ``__dir__``) for ``package``, whose public names live in the
    submodules ``where`` maps them to; a name is imported once, then kept in the package's namespace."""

    def getattr_(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{where[name]}", package), name)
        vars(sys.modules[package])[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return sorted(where), getattr_, dir_
