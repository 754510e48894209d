"""Kernel families: C templates in ``templates/`` expanded by ``generate.py`` into checked-in ``gen/``.

Regenerate with ``python -m cuvil_edge.codegen.kernels.generate`` (CI checks ``gen/`` is fresh).
Kernel names follow the grammar in ``NAMING.md``.
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


def kernel_name(dtype: str, op: str, tile: str, tier: str, family: str) -> str:
    """Kernel name per NAMING.md: ``<dtype>-<op>[-<tile>]-<tier>-<host family>``."""
    return "-".join(p for p in (dtype, op, tile, tier, family) if p)
