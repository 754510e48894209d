"""Kernel families: C templates in ``templates/`` expanded by ``generate.py`` into checked-in ``gen/``.

Regenerate with ``python -m cuvil_edge.codegen.kernels.generate`` (CI checks ``gen/`` is fresh).
Kernel names follow the grammar in ``NAMING.md``; ``table.py`` lists every name, its family and C symbols.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

GEN_DIR = Path(__file__).parent / "gen"
TEMPLATE_DIR = Path(__file__).parent / "templates"


@cache
def kernel_source(family: str) -> str:
    path = GEN_DIR / f"{family}.c"
    if not path.exists():
        raise FileNotFoundError(f"kernel family {family!r} has no generated source ({path})")
    return path.read_text()
