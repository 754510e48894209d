"""``strnorm``: ONNX StringNormalizer on string tensors held as fixed-width UTF-8 rows (``S<W>``).

A string tensor exists only at the model's edge: the runtime writes each element as W bytes, zero padded
(``runtime_wasm.spec.encode_strings``), and reads the rows back. The node maps case (``action``: upper,
lower or none) and drops the stopwords: with ``case_sensitive`` a row is compared as given, else both it
and the stopwords are compared folded (to upper case when ``action`` is upper, else lower), onnxruntime's
rule. Kept rows are compacted to the front of the output, ``length`` (int64 scalar, second output) says
how many; none kept: one empty string, as ONNX requires. Case mapping covers ASCII and the Latin-1 letters
(U+00C0-U+00DE <-> U+00E0-U+00FE but for the multiplication and division signs); any other character
(ÿ, µ, Greek, Cyrillic, ...) passes through unchanged, whatever the node's ``locale``: that is the bound.

attrs: ``action`` ("upper", "lower", "none"), ``case_sensitive`` (bool), ``stopwords`` (tuple of str).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType, string_width
from .attrs import Attr, declare
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

ACTIONS = ("upper", "lower", "none")
#: UTF-8 lead byte of U+00C0-U+00FF; the second byte is 0x80 + (code point - U+00C0)
_LATIN1_LEAD = 0xC3
#: second-byte ranges of the Latin-1 upper and lower letters and the two signs between them
_UPPER, _LOWER, _SIGNS = (0x80, 0x9E), (0xA0, 0xBE), (0x97, 0xB7)


def map_case(row: bytes, action: str) -> bytes:
    """The kernel's case mapping in Python (stopwords are folded with it at build time)."""
    if action == "none":
        return row
    lo, hi = (ord("a"), ord("z")) if action == "upper" else (ord("A"), ord("Z"))
    lo2, hi2 = _LOWER if action == "upper" else _UPPER
    shift = -32 if action == "upper" else 32
    out = bytearray(row)
    for j, c in enumerate(row):
        if lo <= c <= hi or (j and row[j - 1] == _LATIN1_LEAD and lo2 <= c <= hi2 and c not in _SIGNS):
            out[j] = c + shift
    return bytes(out)


def fold_action(node: Node) -> str:
    """The mapping rows and stopwords are compared under."""
    if node.attrs["case_sensitive"]:
        return "none"
    return "upper" if node.attrs["action"] == "upper" else "lower"


def _infer(node: Node) -> list[TensorType]:
    x = node.inputs[0].type
    if string_width(x.dtype) is None:
        raise ShapeError(f"{node.name}: strnorm of {x.dtype}, want a string tensor")
    if len(x.shape) not in (1, 2) or (len(x.shape) == 2 and x.shape[0] != 1) or x.size == 0:
        raise ShapeError(f"{node.name}: strnorm takes [C] or [1, C] strings, got {list(x.shape)}")
    return [x, TensorType((), "int64")]


def _case_c(action: str, src: str, dst: str, width: int) -> str:
    """C that writes row ``src`` mapped by ``action`` to ``dst`` (``map_case`` in C)."""
    if action == "none":
        return f"__builtin_memcpy({dst}, {src}, {width});"
    lo, hi = ("'a'", "'z'") if action == "upper" else ("'A'", "'Z'")
    lo2, hi2 = _LOWER if action == "upper" else _UPPER
    sign = _SIGNS[0] if action == "lower" else _SIGNS[1]
    shift = "- 32" if action == "upper" else "+ 32"
    return (f"for (int j = 0; j < {width}; j++) {{ uint8_t c = {src}[j]; "
            f"if ((c >= {lo} && c <= {hi}) || (j && {src}[j - 1] == {_LATIN1_LEAD} && c >= {lo2} "
            f"&& c <= {hi2} && c != {sign})) c = (uint8_t)(c {shift}); {dst}[j] = c; }}")


def _emit(node: Node, ctx: EmitContext) -> str:
    x, (y, length) = node.inputs[0], node.outputs
    width, count = string_width(x.type.dtype), x.type.size
    ctx.use_kernel("x8-strnorm")
    fold = fold_action(node)
    stops = [w for w in dict.fromkeys(map_case(s.encode(), fold) for s in node.attrs["stopwords"])
             if len(w) <= width]  # a longer stopword matches no row
    lines = ["{", f"  const uint8_t* sx = {ctx.ptr(x, 'uint8_t')};",
             f"  uint8_t* sy = {ctx.ptr(y, 'uint8_t')};", "  int64_t kept = 0;",
             f"  for (int i = 0; i < {count}; i++) {{",
             f"    const uint8_t* r = sx + i * {width};", f"    uint8_t* o = sy + kept * {width};",
             "    " + _case_c(node.attrs["action"], "r", "o", width)]
    if stops:
        table = np.frombuffer(b"".join(w.ljust(width, b"\0") for w in stops), np.uint8)
        if fold == node.attrs["action"]:  # the output row is the compared one
            lines += ["    const uint8_t* t = o;"]
        elif fold == "none":
            lines += ["    const uint8_t* t = r;"]
        else:
            lines += [f"    uint8_t t[{width}];", "    " + _case_c(fold, "r", "t", width)]
        lines += [f"    const uint8_t* sw = {ctx.weight(table, 'uint8_t')};", "    int stop = 0;",
                  f"    for (int k = 0; k < {len(stops)} && !stop; k++) {{",
                  f"      const uint8_t* q = sw + k * {width}; int j = 0;",
                  f"      while (j < {width} && t[j] == q[j]) j++;", f"      stop = j == {width};", "    }",
                  "    if (stop) continue;"]
    lines += ["    kept++;", "  }", f"  if (kept == 0) {{ __builtin_memset(sy, 0, {width}); kept = 1; }}",
              f"  *{ctx.ptr(length)} = kept;", "}"]
    return "\n".join(lines)


register(OpDef("strnorm", _infer, None, _emit))
declare("strnorm", {"action": Attr(str), "case_sensitive": Attr(bool),
                    "stopwords": Attr(tuple, items=str)})
