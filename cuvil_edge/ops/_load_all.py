"""Registers every built-in family: each public module of this package (but the shared registry, common
helpers and attribute schemas) is one family."""

import importlib
import pkgutil
from pathlib import Path

for _mod in pkgutil.iter_modules([str(Path(__file__).parent)]):
    if not _mod.name.startswith("_") and _mod.name not in ("registry", "common", "attrs"):
        importlib.import_module(f"{__package__}.{_mod.name}")
