"""The kernel table: every label an op records (``ctx.use_kernel``), the family template whose generated C
runs it, its C entry points, and which families each family's C calls into.

A label follows the grammar in ``NAMING.md`` and names what the node runs as a reader would say it
(``f32-conv-im2col-gemm-4x8``); the C symbol is what the module calls (``f32_conv2d``). This table is
the one place that ties the two, so ``inspect``, tests and the emitter agree: ``resolve`` refuses a
label no entry names, and ``tests/unit/test_kernel_table.py`` checks every entry against ``gen/``.
Family order in a module comes from ``NEEDS`` (``family_order``), never from how an op lists them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from . import kernel_source

#: family -> the families whose functions its C calls (``common`` comes first in every module)
NEEDS: dict[str, tuple[str, ...]] = {
    "common": (),
    "f32-act-param": ("f32-unary",),
    "f32-binary": ("f32-unary",),
    "f32-bmm": ("f32-gemm",),
    "f32-cast": (),
    "f32-conv": ("f32-gemm",),
    "f32-conv-rt": (),
    "f32-deconv": ("f32-gemm",),
    "f32-dwconv": (),
    "f32-gemm": (),
    "f32-lrn": ("f32-unary",),
    "f32-mod": (),
    "f32-norm": (),
    "f32-pool": (),
    "f32-prelu": (),
    "f32-random": ("f64-math",),
    "f32-reduce": ("f32-unary",),
    "f32-resize": (),
    "f32-rnn": ("f32-unary", "f32-gemm", "f32-bmm"),
    "f32-softmax": ("f32-unary",),
    "f32-transformer": ("f32-unary", "f32-gemm", "f32-bmm"),
    "f32-unary": (),
    "f64-math": (),
    "f64-pow": ("f64-math",),
    "qb4-gemm": ("qs8-gemm",),
    "qf16-cvt": (),
    "qs8-dwconv": ("qs8-gemm",),
    "qs8-gemm": (),
    "x32-movement": (),
}

#: IR dtype -> the label's (and C symbols') element-type code
DTYPE_CODES = {"float32": "f32", "float64": "f64", "float16": "h", "int8": "i8", "uint8": "u8",
               "int16": "i16", "uint16": "u16", "int32": "i32", "uint32": "u32", "int64": "i64",
               "uint64": "u64", "bool": "b", "bfloat16": "bf16", "float8_e4m3fn": "f8e4m3",
               "float8_e4m3fnuz": "f8e4m3uz", "float8_e5m2": "f8e5m2", "float8_e5m2fnuz": "f8e5m2uz",
               "float8_e8m0fnu": "f8e8m0", "float4_e2m1fn": "f4e2m1", "int4": "i4", "uint4": "u4",
               "int2": "i2", "uint2": "u2"}

#: what a ``{field}`` of a pattern matches; a field that also appears in a symbol must name a function
#: the family defines (``f32-v{kind}-4`` -> ``f32_v{kind}``), which keeps families' labels apart
FIELDS = {
    "dtype": "|".join(DTYPE_CODES.values()),
    "tile": r"\d+x\d+",                                # MRxNR register tile
    "filter": r"\d+x\d+(?:x\d+)?s\d+(?:x\d+){0,2}",    # <kh>x<kw>s<stride> (3D: <kd>x<kh>x<kw>)
    "n": r"\d+",                                       # rows per step
    "x8": r"(?:-x8)?",                                 # 8-bit activations (absent: 7-bit)
    "kind": r"[a-z0-9]+",
    "act": r"[a-z0-9]+",
    "src": r"[a-z0-9]+",
    "dst": r"[a-z0-9]+",
    "width": r"x8|x32",
    "stride": r"s1|s2|scalar",
    "pool": r"max|avg",
    "inner": r".+",
}


@dataclass(frozen=True)
class Kernel:
    """One table row: the labels ``pattern`` names, the family defining ``symbols`` (None: C the op
    writes inline, no function), and the C entry points a node with such a label calls (one or more;
    ``<family>:<symbol>`` for one another family defines)."""

    pattern: str
    family: str | None
    symbols: tuple[str, ...] = ()
    note: str = ""

    def functions(self) -> tuple[tuple[str | None, str], ...]:
        """(family, C function) of each symbol."""
        return tuple((s.split(":")[0], s.split(":")[1]) if ":" in s else (self.family, s)
                     for s in self.symbols)


KERNELS: tuple[Kernel, ...] = (
    # f32 GEMM-shaped
    Kernel("f32-gemm-{tile}", "f32-gemm", ("f32_gemm_part", "f32-bmm:f32_bmm"), "batched MatMul: f32-bmm"),
    Kernel("f32-conv1x1-gemm-4x8", "f32-conv", ("f32_conv1x1",)),
    Kernel("f32-conv1x1-subsample-gemm-4x8", "f32-conv", ("f32_conv1x1_sub",)),
    Kernel("f32-conv-im2col-gemm-4x8", "f32-conv", ("f32_conv2d",)),
    Kernel("f32-conv-direct-4x8", "f32-conv", ("f32_conv2d_direct",)),
    Kernel("f32-conv-winograd-f2x2-4x8", "f32-conv", ("f32_conv2d_winograd",)),
    Kernel("f32-conv-winograd-f4x4-4x8", "f32-conv", ("f32_conv2d_winograd4",)),
    Kernel("f32-conv-winograd-s2-f2x2-4x8", "f32-conv", ("f32_conv2d_winograd_s2",)),
    Kernel("f32-conv3d-im2col-gemm-4x8", "f32-conv", ("f32_conv3d",)),
    Kernel("f32-dwconv-{filter}", "f32-dwconv",
           ("f32_dwconv_3x3p_s1", "f32_dwconv_3x3p_s2", "f32_dwconv_3x3s1", "f32_dwconv_3x3s2",
            "f32_dwconv_3x3sN", "f32_dwconv_kxks1", "f32_dwconv_kxks2", "f32_dwconv_kxksN")),
    Kernel("f32-deconv-{filter}", "f32-deconv", ("f32_deconv",)),
    Kernel("f32-deconv3d-{filter}", "f32-deconv", ("f32_deconv",)),
    Kernel("f32-conv-rt-4", "f32-conv-rt", ("f32_conv_rt",), "run-time weights: direct, read in place"),
    Kernel("f32-deconv-rt-4", "f32-conv-rt", ("f32_deconv_rt",), "run-time weights: direct, read in place"),
    Kernel("f32-{kind}-{tile}", "f32-rnn", ("f32_{kind}",), "LSTM/GRU/RNN cells over the packed 4x8 GEMM"),
    # f32 elementwise, 4 lanes per step
    Kernel("f32-v{kind}-4", "f32-unary", ("f32_v{kind}",)),
    Kernel("f32-v{kind}-4", "f32-binary", ("f32_v{kind}",)),
    Kernel("f32-v{kind}-4", "f32-act-param", ("f32_v{kind}",)),
    Kernel("f32-v{act}-4", "common", ("f32_act",), "a standalone fused activation (relu, clip, silu, ...)"),
    Kernel("f32-vaffinec-4", "f32-norm", ("f32_channel_affine",)),
    Kernel("f32-vprelu-4", "f32-prelu", ("f32_prelu_planes", "f32_prelu_rows"), "slope per channel"),
    Kernel("f32-copy-4", "common", ("copy_f32",)),
    Kernel("f32-r{kind}-4", "f32-reduce", ("f32_r{kind}",)),
    Kernel("f32-{pool}pool-{stride}-4", "f32-pool", ("f32_{pool}pool2d",)),
    Kernel("f32-global{pool}pool-4", "f32-pool", ("f32_global_{pool}pool",)),
    Kernel("u8-maxpool-{stride}-16", "f32-pool", ("u8_maxpool2d",), "quantized tensors held as uint8"),
    Kernel("f32-softmax-4", "f32-softmax", ("f32_softmax_rows", "f32_softmax_cols")),
    Kernel("f32-logsoftmax-4", "f32-softmax", ("f32_softmax_rows", "f32_softmax_cols")),
    Kernel("f32-lrn-4", "f32-lrn", ("f32_lrn",)),
    Kernel("f32-resize-bilinear-4", "f32-resize", ("f32_resize_bilinear",)),
    Kernel("f32-resize-bicubic-4", "f32-resize", ("f32_resize_taps",)),
    Kernel("f32-resize-antialias-4", "f32-resize", ("f32_resize_taps",),
           "linear/cubic filter stretched by 1/scale on downsampled axes"),
    Kernel("f32-layernorm", "f32-transformer", ("f32_layernorm",)),
    Kernel("f32-gelu", "f32-transformer", ("f32_gelu",)),
    Kernel("f32-gelu-tanh", "f32-transformer", ("f32_gelu",)),
    Kernel("f32-attention-{n}", "f32-transformer", ("f32_attention",), "n: query rows per block"),
    # float64 in double precision
    Kernel("f64-gemm-2x4", "f64-math", ("f64_bmm",), "MatMul, Gemm and Einsum contractions on float64"),
    Kernel("f64-v{kind}-1", "f64-math", ("f64_v{kind}",)),
    Kernel("f64-softmax-1", "f64-math", ("f64_softmax",)),
    Kernel("f64-logsoftmax-1", "f64-math", ("f64_softmax",)),
    # conversions and fp16
    Kernel("{src}-{dst}-vcvt", "f32-cast", ("{src}_{dst}_vcvt",)),
    Kernel("f32-vround{dst}", "f32-cast", ("f32_vround{dst}",), "f32 rounded to a narrower float's grid"),
    Kernel("f16-cvt", "qf16-cvt", ("f16_f32_vcvt",), "fp16-stored weights widened, then +<inner kernel>"),
    Kernel("{dtype}-mod", "f32-mod", ("{dtype}_mod",)),
    Kernel("{dtype}-pow", "f64-pow", ("{dtype}_pow",), "Pow on integers and float64"),
    # random numbers (Philox4x32-10 keyed by seed or node, counted by run)
    Kernel("{dtype}-random-{kind}", "f32-random", ("{dtype}_random_{kind}",), "RandomUniform, RandomNormal"),
    Kernel("{dtype}-multinomial", "f32-random", ("{dtype}_multinomial",)),
    # data movement
    Kernel("{width}-copynd", "x32-movement", ("x32_copy_nd", "x8_copy_nd", "x32_fill")),
    Kernel("{width}-copynd-strided", "x32-movement", ("x32_copy_nd", "x8_copy_nd")),
    Kernel("x32-transpose-4x4", "x32-movement", ("x32_transpose",)),
    Kernel("{width}-depth-to-space", "x32-movement", ("x32_copy_nd", "x8_copy_nd", "x32_transpose"),
           "one permutation of the 6-D block view: a strided copy, or the 2-D transpose it merges to"),
    Kernel("{width}-space-to-depth", "x32-movement", ("x32_copy_nd", "x8_copy_nd", "x32_transpose"),
           "as depth-to-space"),
    Kernel("x32-gathernd", "x32-movement", ("x32_gather_nd", "x8_gather_nd")),
    Kernel("x8-gather-rows", "common", ("memmove",)),
    Kernel("x8-memmove", "common", ("memmove",), "a whole tensor copied as bytes"),
    # quantized
    Kernel("qs8-gemm{x8}-8x{n}", "qs8-gemm", ("qs8_gemm_x7", "qs8_gemm_x8")),
    Kernel("qs8-conv-im2col-gemm{x8}-8x{n}", "qs8-gemm", ("qs8_conv2d_x7", "qs8_conv2d_x8")),
    Kernel("qs8-conv1x1-gemm{x8}-8x{n}", "qs8-gemm", ("qs8_conv1x1_x7", "qs8_conv1x1_x8")),
    Kernel("qs8-conv1x1-subsample-gemm{x8}-8x{n}", "qs8-gemm", ("qs8_conv1x1_sub_x7", "qs8_conv1x1_sub_x8")),
    Kernel("qs8-dwconv{x8}-{filter}", "qs8-dwconv",
           tuple(f"qs8_dwconv_x{b}_{v}" for b in (7, 8)
                 for v in ("3x3s1", "3x3s2", "5x5s1", "5x5s2", "kxks1", "kxks2", "kxksN"))),
    Kernel("qb4-gemm-8x{n}", "qb4-gemm", ("qb4_gemm",)),
    Kernel("qb4-conv-im2col-gemm-8x{n}", "qb4-gemm", ("qb4_conv2d",)),
    Kernel("qu8-quantize", "qs8-gemm", ("qu8_quantize", "qu8_quantize_part")),
    Kernel("qu8-dequantize", "qs8-gemm", ("qu8_dequantize",)),
    Kernel("qu8-quantize-dyn", "qs8-gemm", ("qu8_quantize_dyn", "qu8_dyn_tensor")),
    # C loops the op writes inline, every shape a constant (any element type: ``dtype`` is the node's)
    Kernel("{dtype}-eq", None), Kernel("{dtype}-lt", None), Kernel("{dtype}-gt", None),
    Kernel("{dtype}-le", None), Kernel("{dtype}-ge", None),
    Kernel("b-and", None), Kernel("b-or", None), Kernel("b-xor", None), Kernel("b-not", None),
    Kernel("{dtype}-add", None), Kernel("{dtype}-sub", None), Kernel("{dtype}-mul", None),
    Kernel("{dtype}-div", None), Kernel("{dtype}-max", None), Kernel("{dtype}-min", None),
    Kernel("{dtype}-bitand", None), Kernel("{dtype}-bitor", None), Kernel("{dtype}-bitxor", None),
    Kernel("{dtype}-shl", None), Kernel("{dtype}-shr", None),
    Kernel("{dtype}-reduce-{kind}", None),
    Kernel("{dtype}-where", None),
    Kernel("{dtype}-argmax", None), Kernel("{dtype}-argmin", None),
    Kernel("{dtype}-cumsum", None), Kernel("{dtype}-cumprod", None), Kernel("{dtype}-topk", None),
    Kernel("{dtype}-dft", None), Kernel("{dtype}-det", None),
    Kernel("{dtype}-scatter-{kind}", None), Kernel("{dtype}-scatternd-{kind}", None),
    Kernel("{dtype}-gather-elements", None), Kernel("{dtype}-gathernd", None),
    Kernel("{dtype}-onehot", None),
    Kernel("{dtype}-gridsample-{kind}", None, note="GridSample: kind is the mode (nearest, linear, cubic)"),
    Kernel("{dtype}-affinegrid", None), Kernel("{dtype}-roialign-{pool}", None),
    Kernel("{dtype}-col2im", None), Kernel("{dtype}-deformconv", None), Kernel("{dtype}-maxunpool", None),
    Kernel("f32-maxpool-indices", None, note="MaxPool's Indices output: the max and its flat index"),
    Kernel("{dtype}-tensorscatter-{kind}", None, note="TensorScatter: kind is the mode (linear, circular)"),
    Kernel("{dtype}-reversesequence", None),
    Kernel("{dtype}-nonzero", None), Kernel("{dtype}-unique", None), Kernel("{dtype}-compress", None),
    Kernel("f32-nms", None, note="NonMaxSuppression: per batch and class, sorted candidates, greedy IoU"),
    Kernel("x8-slice-rt", None, note="Slice with run-time bounds: rows copied as bytes"),
    Kernel("{dtype}-range-rt", None, note="Range with run-time bounds"),
    Kernel("x8-strnorm", None, note="ONNX StringNormalizer over fixed-width UTF-8 rows"),
    Kernel("{dtype}-trees", None, note="ONNX-ML tree ensembles: each row walks every tree"),
    Kernel("{dtype}-tfidf", None, note="TfIdfVectorizer: n-grams of token ids looked up in a sorted pool"),
    Kernel("i64-loop", None, note="ONNX Loop (int64 trip count): the body's nodes run their own kernels"),
    Kernel("b-if", None, note="ONNX If on a bool condition: the branches' nodes run their own kernels"),
)


def dtype_code(dtype: str) -> str:
    """An IR dtype's code in labels and C symbols (``int64`` -> ``i64``)."""
    return DTYPE_CODES[dtype]


def _fields(text: str) -> list[str]:
    return re.findall(r"\{(\w+)\}", text)


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    parts = re.split(r"\{(\w+)\}", pattern)
    return re.compile("".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>{FIELDS[p]})"
                              for i, p in enumerate(parts)))


_C_IDENT_CALL = re.compile(r"[{}]|([A-Za-z_]\w*)\s*\(")


@cache
def defined_functions(family: str) -> frozenset[str]:
    """Names of the functions ``gen/<family>.c`` defines (an identifier at brace depth 0 followed by its
    parameter list and a body)."""
    src = re.sub(r"/\*.*?\*/|//[^\n]*", " ", kernel_source(family), flags=re.S)
    src = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", src, flags=re.M)  # preprocessor lines
    out, depth = set(), 0
    for m in _C_IDENT_CALL.finditer(src):
        if m.group(1) is None:
            depth += 1 if m.group(0) == "{" else -1
            continue
        if depth:
            continue
        j, parens = m.end(), 1
        while parens and j < len(src):
            parens += {"(": 1, ")": -1}.get(src[j], 0)
            j += 1
        if src[j:].lstrip().startswith("{"):
            out.add(m.group(1))
    return frozenset(out)


def _act_names() -> frozenset[str]:
    """The fused activations the ``Act`` enum of ``common.c`` names (``ACT_RELU`` -> ``relu``)."""
    return frozenset(a.lower() for a in re.findall(r"\bACT_([A-Z]+)\b", kernel_source("common"))) - {"none"}


@cache
def _resolve_one(label: str) -> Kernel:
    found = []
    for k in KERNELS:
        m = _regex(k.pattern).fullmatch(label)
        if m is None or ("act" in m.groupdict() and m["act"] not in _act_names()):
            continue
        symbols = tuple(s.format(**m.groupdict()) for s in k.symbols)
        if any(_fields(s) for s in k.symbols) and not all(s in defined_functions(k.family) for s in symbols):
            continue  # a symbol-named field must name a function of this family
        found.append(Kernel(label, k.family, symbols, k.note))
    if len(found) != 1:
        raise ValueError(f"kernel label {label!r} is {'in no' if not found else 'ambiguous between'} "
                         f"entries of codegen/kernels/table.py{'' if not found else f': {found}'}")
    return found[0]


def resolve(label: str) -> tuple[Kernel, ...]:
    """The table rows a recorded label names, one per ``+``-joined part (``f16-cvt+f32-gemm-4x8``), with
    their fields filled in; ValueError for a label no row names (a bug in the op that recorded it)."""
    return tuple(_resolve_one(part) for part in label.split("+"))


def family_order(families: Iterable[str]) -> list[str]:
    """``common``, then ``families`` and everything they need, each after the families it needs (first
    use order otherwise): C defines a function before it is called, whatever order ops list them in."""
    out: list[str] = []

    def visit(f: str, path: tuple[str, ...] = ()) -> None:
        if f in path:
            raise ValueError(f"kernel families need each other: {' -> '.join((*path, f))}")
        if f in out:
            return
        if f not in NEEDS:
            raise ValueError(f"kernel family {f!r} is not in codegen/kernels/table.py NEEDS")
        for d in NEEDS[f]:
            visit(d, (*path, f))
        out.append(f)

    for f in ("common", *families):
        visit(f)
    return out
