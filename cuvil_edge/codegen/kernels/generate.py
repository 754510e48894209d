"""Expand kernel templates (``templates/*.c.in``) into ``gen/*.c``.

Template syntax (after XNNPACK's xngen): a line whose first non-blank character is ``$`` is a
Python statement (``$for MR in (1, 2, 3, 4):``, ``$if ...:``, ``$elif ...:``, ``$else:``) and
``$end`` closes the innermost block; ``${expr}`` anywhere else is replaced by the expression's value.

    python -m cuvil_edge.codegen.kernels.generate          # rewrite gen/
    python -m cuvil_edge.codegen.kernels.generate --check  # exit 1 if gen/ is stale
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from . import GEN_DIR, TEMPLATE_DIR

_SUBST = re.compile(r"\$\{([^}]+)\}")


def expand(template: str, name: str = "<template>") -> str:
    code = ["_out = []"]
    depth = 0
    for lineno, line in enumerate(template.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("$") and not stripped.startswith("${"):
            stmt = stripped[1:].strip()
            if stmt == "end":
                depth -= 1
                if depth < 0:
                    raise SyntaxError(f"{name}:{lineno}: $end without a block")
                continue
            if stmt.startswith(("elif", "else")):
                code.append("    " * (depth - 1) + stmt)
                continue
            code.append("    " * depth + stmt)
            if stmt.endswith(":"):
                depth += 1
            continue
        parts = _SUBST.split(line)
        pieces = [repr(p) if i % 2 == 0 else f"str({p})" for i, p in enumerate(parts)]
        code.append("    " * depth + f"_out.append({' + '.join(pieces)})")
    if depth:
        raise SyntaxError(f"{name}: {depth} unclosed $-block(s)")
    scope: dict[str, object] = {}
    exec(compile("\n".join(code), name, "exec"), scope)  # noqa: S102 - our own templates only
    return "\n".join(scope["_out"]) + "\n"  # type: ignore[arg-type]


def render(path: Path) -> str:
    header = (f"/* generated from {path.parent.name}/{path.name} by "
              "cuvil_edge/codegen/kernels/generate.py; do not edit */\n")
    return header + expand(path.read_text(), path.name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if gen/ differs from the templates")
    args = ap.parse_args(argv)
    stale = []
    GEN_DIR.mkdir(exist_ok=True)
    for tpl in sorted(TEMPLATE_DIR.glob("*.c.in")):
        out = GEN_DIR / tpl.name[: -len(".in")]
        text = render(tpl)
        if not out.exists() or out.read_text() != text:
            stale.append(out.name)
            if not args.check:
                out.write_text(text)
    orphans = sorted(p.name for p in GEN_DIR.glob("*.c")
                     if not (TEMPLATE_DIR / f"{p.name}.in").exists())
    if orphans:
        stale += orphans
        if not args.check:
            for name in orphans:
                (GEN_DIR / name).unlink()
    if args.check and stale:
        print("stale generated kernels: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
