"""ONNX converters for string tensors: StringNormalizer (the one op that reads or writes them, see
``ops/strings.py``). Its output has a data-dependent length: allocated for every input string, with a
``<name>:length`` companion output the runtime slices by, as for a Loop's run-time-length scan outputs."""

from __future__ import annotations

from ...ir.graph import string_width
from .registry import ConvertContext, converter


@converter("StringNormalizer")
def string_normalizer(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    if string_width(x.type.dtype) is None:
        raise ctx.unsupported(f"its input is {x.type.dtype}, not strings")
    padded = ctx.graph.meta.setdefault("padded_scans", {})
    if id(x) in padded:
        raise ctx.unsupported("its input has a run-time length (only model inputs may feed it)")
    # case mapping covers ASCII and Latin-1 alike in every locale (ops/strings.py), except the Turkic ones,
    # whose i and I map to dotted and dotless forms
    locale = str(ctx.attr("locale", "") or "")
    if locale.lower().startswith(("tr", "az")):
        raise ctx.unsupported(f"locale {locale!r} (Turkic case mapping of i and I)")
    action = ctx.attr("case_change_action", "NONE")
    if action not in ("LOWER", "UPPER", "NONE"):
        raise ctx.unsupported(f"case_change_action {action!r} (want LOWER, UPPER or NONE)")
    stopwords = tuple(ctx.texts("stopwords"))
    y, length = ctx.emit("strnorm", [x], {"action": action.lower(),
                                          "case_sensitive": bool(ctx.attr("is_case_sensitive", 0)),
                                          "stopwords": stopwords}, n_outputs=2)
    padded[id(y)] = (length, ctx.name)
    ctx.set_outputs(y)
