"""Every harness, by name (``fuzz.run`` and the tests take them from here): each module of this package
that defines ``target()`` is one."""

from __future__ import annotations

import importlib
import pkgutil

from ..engine import Target


def all_targets() -> dict[str, Target]:
    modules = (importlib.import_module(f"{__name__}.{m.name}") for m in pkgutil.iter_modules(__path__))
    return {t.name: t for t in (m.target() for m in modules if hasattr(m, "target"))}
