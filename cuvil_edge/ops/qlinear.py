"""Quantized linear ops on the integer kernels (``qs8-gemm``, ``qs8-dwconv``, ``qb4-gemm`` templates).

Every op takes f32 activations (or uint8 ones already quantized by an imported QuantizeLinear) and
writes f32: it quantizes its input into scratch (statically, or dynamically at run time), runs the
int32-accumulating kernel and dequantizes in the epilogue with bias and fused activation. So a
quantized layer drops in for a float one anywhere in the graph, and layers mix freely. Where a qconv /
qgemm's one reader is another static one, it writes that reader's uint8 instead (``yq``,
``quant/chain.py``): the same bytes the reader's quantize pass would have made.

``xq`` attr: how the op gets its quantized activations, an ``ActQuant`` (static, dynamic or input).
Every op here has an attribute schema (``ops/attrs.py``) the verifier checks.

Ops:  qgemm   [x, w int8 [K,N], w_scale [N], bias?]             int8 per-channel symmetric weights
      qconv   [x, w int8 [M,C/G,kh,kw], w_scale [M], bias?]     + conv attrs (depthwise: qs8-dwconv)
      qb4gemm [x, q uint8 [N,K], scale [N,K/G], zp int32 [N,K/G], bias?]   4-bit group-wise
      qb4conv [x, q uint8 [M,C,kh,kw], scale, zp, bias?]        + conv attrs (group 1)

Quantized activations are always uint8 here: an ONNX int8 tensor is held as uint8 with its values and
zero point shifted by +128 (same products after zero-point subtraction, same order for max pooling); the
run-time quantize / dequantize ops that make and read them are in ``ops/quantize.py``.

Threads: every op here with enough work splits it (``ctx.parallel``; smaller ones run on thread 0):
quantization by ranges of values (a large per-tensor dynamic range reduced per thread, then combined in a
fixed order), GEMMs by 8-row weight panels after the threads pack the activations together (a GEMV's
token each thread quantizes and packs itself), convolutions by pixels or output channels per chunk,
depthwise ones by channels. Integer sums are exact and each output meets the same epilogue, so every
thread count gives the same bits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from .attrs import ACT, INT, Attr, declare
from .common import act_c, cfloat
from .conv import conv_geometry, conv_infer, is_depthwise, is_pointwise, is_pointwise_strided, kernel_tile
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

COL_BYTES = 262144  # im2col rows per chunk: about 256 KiB of uint8 patches
#: the ``ActQuant`` modes
STATIC, DYNAMIC, INPUT = "static", "dynamic", "input"


@dataclass(frozen=True)
class ActQuant:
    """A quantized op's activation quantization (its ``xq`` attr), in one of three modes:

    static   quantized with ``scale`` and ``zero_point`` (from calibration)
    dynamic  range measured at run time, per row (``per_row``) or per tensor (as ONNX does)
    input    input 0 is already uint8 (imported QDQ / QLinear* / *Integer ops, or qmax 127: a quantized
             producer's requantized output, ``quant/chain.py``); its scale (f32) and zero point (uint8)
             are the node's last two inputs, constants or run-time values
    ``qmax``: 127 (our quantizer: 7-bit activations, the exact relaxed-dot path) or 255 (8-bit).

    A qconv / qgemm's ``yq`` attr (static) is the grid its output is requantized onto: its one reader's
    static ``xq``, so the output is uint8 (``QOut`` in the qs8 kernels).
    """

    mode: str
    qmax: int = 255
    scale: float = 1.0
    zero_point: int = 0
    per_row: bool = False

    def __post_init__(self) -> None:
        if self.mode not in (STATIC, DYNAMIC, INPUT) or self.qmax not in (127, 255):
            raise ValueError(f"not an activation quantization: {self}")

    @classmethod
    def static(cls, scale: float, zero_point: int, qmax: int) -> ActQuant:
        return cls(STATIC, qmax, float(scale), int(zero_point))

    @classmethod
    def dynamic(cls, qmax: int, per_row: bool) -> ActQuant:
        return cls(DYNAMIC, qmax, per_row=per_row)

    @classmethod
    def input(cls, qmax: int = 255) -> ActQuant:
        return cls(INPUT, qmax)

    @property
    def extra_inputs(self) -> int:
        """Inputs after the op's own: the activation's scale and zero point in "input" mode."""
        return 2 if self.mode == INPUT else 0


#: the attrs of a conv (``ops/conv.py``), which qconv and qb4conv share
CONV_ATTRS = {"strides": Attr((list, tuple), items=INT), "dilations": Attr((list, tuple), items=INT),
              "pads": Attr((list, tuple), items=INT), "group": Attr(INT, required=False), "act": ACT}
#: the attrs of a float gemm
GEMM_ATTRS = {"act": ACT}
XQ = {"xq": Attr(ActQuant), "yq": Attr(ActQuant, required=False)}


def requantized(infer: Callable[[Node], list[TensorType]]) -> Callable[[Node], list[TensorType]]:
    """``infer`` of a qs8 op whose output is uint8 when it carries ``yq``."""
    def infer_q(node: Node) -> list[TensorType]:
        (t,) = infer(node)
        yq = node.attrs.get("yq")
        if yq is not None and yq.mode != STATIC:
            raise ShapeError(f"{node.name}: {node.op} requantizes its output onto a static grid, got {yq}")
        return [TensorType(t.shape, "uint8")] if yq is not None else [t]
    return infer_q


def qout(node: Node, ctx: EmitContext) -> str:
    """The qs8 kernels' ``QOut`` for the node's output: f32, or uint8 on its ``yq`` grid."""
    y, yq = ctx.ptr(node.outputs[0]), node.attrs.get("yq")
    if yq is None:
        return f"(QOut){{{y}, 0.0f, 0, 0}}"
    return f"(QOut){{{y}, {cfloat(yq.scale)}, {yq.zero_point}, {yq.qmax}}}"


def _ceil(n: int, m: int) -> int:
    return -(-n // m) * m


def _pad(v: np.ndarray, n: int, dtype: str) -> np.ndarray:
    out = np.zeros(n, dtype)
    out[: v.size] = v.reshape(-1)
    return out


def pack_s8(wq: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, groups: int = 1
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """[I, K] int8 rows (I = groups x rows per group) -> the qs8 kernel's 8-row panels [rows/8][K4/4][8][4]
    per group (rows padded to 8, K to 4, zeros), plus the row sums (zero-point compensation), scales and
    bias padded the same way."""
    i_all, k = wq.shape
    rows = i_all // groups
    rp, k4 = _ceil(rows, 8), _ceil(k, 4)
    w = np.zeros((groups, rp, k4), np.int8)
    w[:, :rows, :k] = wq.reshape(groups, rows, k)
    w = w.reshape(groups, rp // 8, 8, k4 // 4, 4).transpose(0, 1, 3, 2, 4)
    wsum, ws, b = (np.concatenate([_pad(v.reshape(groups, rows)[g], rp, v.dtype.name) for g in range(groups)])
                   for v in row_params(wq, scale, bias))
    return np.ascontiguousarray(w).reshape(-1), wsum, ws, b


def row_params(wq: np.ndarray, scale: np.ndarray, bias: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The qs8 epilogue's per-output-row operands of [I, K] int8 rows: row sums (zero-point
    compensation, int32), weight scales and bias (f32, zeros when there is none)."""
    return (wq.astype(np.int32).sum(1, dtype=np.int32), scale.astype(np.float32),
            np.zeros(len(wq), np.float32) if bias is None else bias.astype(np.float32))


def s8_tile(rows: int) -> str:
    """The qs8 kernel's tile for ``rows`` activation rows: 8x4 (8 output rows x 4 tokens) from 4 rows on,
    else 8x1 (the tokens left over after the 4-token tiles run one at a time)."""
    return "8x4" if rows >= 4 else "8x1"


def xpack_bytes(rows: int, k: int, xbits: int) -> int:
    """Scratch for the qs8 kernel's packed activations (qu8_pack_x4), with the 1-token loop's over-read:
    7-bit ones take 4 bytes a token and k (relaxed SIMD packs their groups broadcast, QXB7; one module
    source serves every tier, so every tier's scratch has that room), 8-bit ones 1."""
    return _ceil(rows, 4) * _ceil(k, 4) * (4 if xbits == 7 else 1) + 64


def b4_tile(rows: int) -> str:
    """The qb4 kernel's tile for ``rows`` activation rows: 8x4 (weights unpacked once per 8-row panel, 4
    tokens per tile) from 4 rows on, else the 8x1 GEMV on the packed nibbles."""
    return "8x4" if rows >= 4 else "8x1"


def b4_scratch_bytes(rows: int, k: int) -> int:
    """qb4_gemm's working space (see its template): packed activations and one unpacked 8-row panel from
    4 rows on (the GEMV works on the threads' stacks)."""
    return xpack_bytes(rows, k, 7) + 8 * k if rows >= 4 else 0


def pack_b4(q: np.ndarray, scale: np.ndarray, zp: np.ndarray, bias: np.ndarray | None, group: int
            ) -> tuple[np.ndarray, ...]:
    """[I, K] nibbles (0..15) with [I, K/G] scales and zero points -> the qb4 kernel layout (see its
    template): per 8-row panel and 4 k one 16-byte vector, rows 0-3 in the low nibbles and rows 4-7 in
    the high ones; scales (f32) and zero points (uint8) per 32-k block [I/8][K/32][8] (a group's repeated
    per block, so the kernel knows one block size); wsc and bias padded to 8."""
    i, k = q.shape
    nb, ip = k // 32, _ceil(i, 8)
    qp = np.zeros((ip, k), np.uint8)
    qp[:i] = q
    zpp = np.zeros((ip, nb), np.uint8)
    zpp[:i] = np.repeat(zp, group // 32, axis=1)
    sp = np.zeros((ip, nb), np.float32)
    sp[:i] = np.repeat(scale, group // 32, axis=1)
    halves = qp.reshape(ip // 8, 2, 4, k // 4, 4)  # panel, rows 0-3 / 4-7, row, step of 4 k, k in step
    packed = (halves[:, 0] | (halves[:, 1] << 4)).transpose(0, 2, 1, 3)
    qsum = qp.reshape(ip, nb, 32).astype(np.int64).sum(2)
    wsc = (sp * (qsum - 32 * zpp.astype(np.int64))).sum(1).astype(np.float32)
    lay = lambda a: np.ascontiguousarray(a.reshape(ip // 8, 8, nb).transpose(0, 2, 1)).reshape(-1)  # noqa: E731
    b = np.zeros(i, np.float32) if bias is None else bias.astype(np.float32)
    return (np.ascontiguousarray(packed).reshape(-1), lay(sp), lay(zpp), wsc, _pad(b, ip, "float32"))


def _bias(node: Node, index: int) -> np.ndarray | None:
    """The optional bias; in "input" mode the activation's scale and zero point follow it."""
    n = len(node.inputs) - node.attrs["xq"].extra_inputs
    return node.inputs[index].const if n > index else None


class _Act:
    """Where the kernel finds its quantized activations: scratch layout and the C to fill it."""

    def __init__(self, node: Node, rows: int, k: int) -> None:
        self.xq: ActQuant = node.attrs["xq"]
        self.rows, self.k = rows, k
        self.n = rows * k

    @property
    def qmax(self) -> int:
        return self.xq.qmax

    @property
    def xbits(self) -> int:
        return 7 if self.qmax == 127 else 8

    @property
    def xstep(self) -> int:
        return int(self.xq.mode == DYNAMIC and self.xq.per_row)

    def scratch_bytes(self) -> int:
        return _ceil(self.n, 64) + 8 * self.rows + 64

    def _input_zp(self, node: Node, ctx: EmitContext) -> tuple[str, str, str]:
        """"input" mode: (C declaring the zero point as the int32 the kernels read, scale, zero point)."""
        s, z = node.inputs[-2:]
        return f"const int32_t xz = {ctx.ptr(z)}[0];", ctx.ptr(s), "&xz"

    def _static(self, ctx: EmitContext) -> tuple[str, str]:
        return (ctx.weight(np.array([self.xq.scale], np.float32)),
                ctx.weight(np.array([self.xq.zero_point], np.int32), "int32_t"))

    def emit(self, node: Node, ctx: EmitContext, mem: str, threads: str, own: bool = False
             ) -> tuple[str, str, str, str, int]:
        """(C that quantizes x into scratch at ``mem`` (a uint8_t* expression), uint8 pointer, scale pointer,
        zero-point pointer, bytes used). ``threads`` (``split_threads``) share the scratch: each quantizes a
        part, then they meet; in ``own`` scratch (each thread's: a GEMV's few rows) each quantizes all of
        x, waiting for no one. The C declares locals: the caller puts the node's code in braces."""
        x = ctx.ptr(node.inputs[0])
        if self.xq.mode == INPUT:
            pre, s, z = self._input_zp(node, ctx)
            return pre, x, s, z, 0
        threads = ONE if own else threads
        meet = "" if threads == ONE else "\ncuvil_barrier();"
        if self.xq.mode == STATIC:
            s, z = self._static(ctx)
            call = f"qu8_quantize_part({self.n}, {x}, {mem}, {s}, {z}, {self.qmax}, {threads});"
            return call + meet, mem, s, z, _ceil(self.n, 64)
        off = _ceil(self.n, 64)
        s, z = f"((float*)({mem} + {off}))", f"((int32_t*)({mem} + {off + 4 * self.rows}))"
        rows, k = (self.rows, self.k) if self.xstep else (1, self.n)
        call = f"qu8_quantize_dyn({rows}, {k}, {x}, {mem}, {s}, {z}, {self.qmax}, {threads});"
        return call + meet, mem, s, z, self.scratch_bytes()

    def emit_params(self, node: Node, ctx: EmitContext, threads: str) -> tuple[str, str, str, str, str]:
        """For kernels that quantize as they go (qs8-dwconv): (C that sets up the parameters, f32 input or
        0, uint8 input or 0, scale pointer, zero-point pointer); the C declares locals as ``emit``'s."""
        x = ctx.ptr(node.inputs[0])
        if self.xq.mode == INPUT:
            pre, s, z = self._input_zp(node, ctx)
            return pre, "0", x, s, z
        if self.xq.mode == STATIC:
            return "", x, "0", *self._static(ctx)
        pre = f"float xs;\nint32_t xz;\nqu8_dyn_tensor({self.n}, {x}, {self.qmax}, &xs, &xz, {threads});"
        return pre, x, "0", "&xs", "&xz"


def _gemm_scratch(ctx: EmitContext, rows: int) -> str:
    """A GEMM's scratch: shared from 4 activation rows on (the threads quantize and pack parts of them),
    else each thread's own (a GEMV's token is quantized and packed by every thread, waiting for no one)."""
    return ctx.scratch("uint8_t", shared=rows >= 4)


#: the kernels' (tid, nt) arguments: every thread its share, or thread 0 alone
ALL, ONE = "tid, nt", "0, 1"
#: work below which a node runs on one thread: splitting it would save less than the barriers it costs
#: (microseconds each): multiply-adds, or values (de)quantized
SPLIT_MACS, SPLIT_VALUES = 1 << 18, 1 << 14


def split_threads(ctx: EmitContext, work: int, least: int) -> str:
    """The (tid, nt) arguments of the node's kernels: ``ALL`` (and the node split) when its ``work`` is
    at least ``least``, else ``ONE``."""
    if work < least:
        return ONE
    ctx.parallel()
    return ALL


def braced(*lines: str) -> str:
    """A node's code in braces: its locals stay its own (split nodes run unwrapped in one function)."""
    return "{\n" + "\n".join(line for line in lines if line) + "\n}"


# -- qgemm / qb4gemm: y[..., N] = act(x[..., K] . W + bias) --------------------------------------
def _gemm_shape(node: Node, k: int, n: int) -> list[TensorType]:
    x = node.inputs[0].type
    if x.shape[-1] != k:
        raise ShapeError(f"{node.name}: {node.op} input {x.shape} does not end in K={k}")
    return [TensorType((*x.shape[:-1], n), "float32")]


def _qgemm_infer(node: Node) -> list[TensorType]:
    k, n = node.inputs[1].type.shape
    return _gemm_shape(node, k, n)


def _gemm_rows(node: Node) -> tuple[int, int]:
    k = node.inputs[0].type.shape[-1]
    return node.inputs[0].type.size // k, k


def _qgemm_scratch(node: Node) -> int:
    m, k = _gemm_rows(node)
    act = _Act(node, m, k)
    return act.scratch_bytes() + xpack_bytes(m, k, act.xbits)


def _qgemm_emit(node: Node, ctx: EmitContext) -> str:
    m, k = _gemm_rows(node)
    n = node.inputs[1].type.shape[1]
    w, wsum, ws, b = pack_s8(node.inputs[1].const.T, node.inputs[2].const, _bias(node, 3))
    act = _Act(node, m, k)
    threads = split_threads(ctx, m * k * n, SPLIT_MACS)
    mem = _gemm_scratch(ctx, m)
    pre, xq, s, z, used = act.emit(node, ctx, mem, threads, own=m < 4)
    ctx.use_kernel(f"qs8-gemm{'' if act.xbits == 7 else '-x8'}-{s8_tile(m)}")
    return braced(pre, (
        f"qs8_gemm_x{act.xbits}({n}, {m}, {k}, {ctx.weight(w, 'int8_t')}, {xq}, {k}, "
        f"({mem} + {used}), {s}, {z}, {act.xstep}, {ctx.weight(wsum, 'int32_t')}, "
        f"{ctx.weight(ws)}, {ctx.weight(b)}, {qout(node, ctx)}, 1, {n}, {act_c(node)}, {threads});"))


register(OpDef("qgemm", requantized(_qgemm_infer), None, _qgemm_emit, kernels=("qs8-gemm",),
               scratch=_qgemm_scratch))
declare("qgemm", {**GEMM_ATTRS, **XQ})


def _qb4gemm_infer(node: Node) -> list[TensorType]:
    n, k = node.inputs[1].type.shape
    return _gemm_shape(node, k, n)


def _qb4gemm_scratch(node: Node) -> int:
    m, k = _gemm_rows(node)
    return _Act(node, m, k).scratch_bytes() + b4_scratch_bytes(m, k)


def _qb4gemm_emit(node: Node, ctx: EmitContext) -> str:
    m, k = _gemm_rows(node)
    n = node.inputs[1].type.shape[0]
    group = k // node.inputs[2].type.shape[1]
    w, ws, wz, wsc, b = pack_b4(node.inputs[1].const, node.inputs[2].const, node.inputs[3].const,
                                _bias(node, 4), group)
    act = _Act(node, m, k)
    threads = split_threads(ctx, m * k * n, SPLIT_MACS)
    mem = _gemm_scratch(ctx, m)
    pre, xq, s, z, used = act.emit(node, ctx, mem, threads, own=m < 4)
    ctx.use_kernel(f"qb4-gemm-{b4_tile(m)}")
    return braced(pre, (
        f"qb4_gemm({n}, {m}, {k}, {ctx.weight(w, 'uint8_t')}, {ctx.weight(ws)}, "
        f"{ctx.weight(wz, 'uint8_t')}, {ctx.weight(wsc)}, {xq}, {k}, {s}, {z}, {act.xstep}, "
        f"{ctx.weight(b)}, {ctx.ptr(node.outputs[0])}, 1, {n}, ({mem} + {used}), "
        f"{act_c(node)}, {threads});"))


register(OpDef("qb4gemm", _qb4gemm_infer, None, _qb4gemm_emit, kernels=("qs8-gemm", "qb4-gemm"),
               scratch=_qb4gemm_scratch))
declare("qb4gemm", {**GEMM_ATTRS, **XQ})


# -- qconv, depthwise: the qs8-dwconv kernels over zero-point-bordered planes (see their template) ------
DW_STEP = 8  # output pixels per step of the qs8-dwconv row loops


def dw_variant(g: dict[str, int]) -> str:
    """C suffix of the qs8 depthwise kernel: constant 3x3 / 5x5 taps or "kxk", then its row loop: s1/s2
    (width stride 1 or 2, dilation 1 across: each 4-tap group is one shuffled load) or sN (gathered)."""
    shuffled = g["dw"] == 1 and g["sw"] in (1, 2)
    taps = f"{g['kh']}x{g['kw']}" if shuffled and (g["kh"], g["kw"]) in ((3, 3), (5, 5)) else "kxk"
    return taps + (f"s{g['sw']}" if shuffled else "sN")


def dw_plane(g: dict[str, int]) -> tuple[int, int]:
    """Hp, Wp of the zero-point-bordered plane: every row the output rows read and, in each row, the
    padded input, the 16-byte row copies and every byte the last 8-pixel step loads (Wp a multiple of 16)."""
    kwg = -(-g["kw"] // 4)
    last = _ceil(g["OW"], DW_STEP) - DW_STEP  # first output of the last step
    if dw_variant(g).endswith("sN"):
        end = (last + DW_STEP - 1) * g["sw"] + (4 * kwg - 1) * g["dw"] + 1
    else:
        end = g["sw"] * last + 4 * (kwg - 1) + (16 if g["sw"] == 1 else 24)
    wp = max(g["pl"] + g["W"] + g["pr"], g["pl"] + _ceil(g["W"], 16), end)
    hp = max(g["pt"] + g["H"] + g["pb"], (g["OH"] - 1) * g["sh"] + (g["kh"] - 1) * g["dh"] + 1)
    return hp, _ceil(wp, 16)


def dw_scratch_bytes(g: dict[str, int], quantize: bool = False) -> int:
    """The plane, then (kxk kernels) the splatted tap groups, 16 bytes each, then (``quantize``: f32 input)
    one quantized channel and the 16 bytes its row copies over-read."""
    hp, wp = dw_plane(g)
    groups = g["kh"] * -(-g["kw"] // 4) if dw_variant(g).startswith("kxk") else 0
    return _ceil(hp * wp, 16) + 16 * groups + (_ceil(g["H"] * g["W"], 16) + 16 if quantize else 0)


def _qdwconv_emit(node: Node, ctx: EmitContext, g: dict[str, int]) -> str:
    """The qs8-dwconv call (each thread its channels, in its own scratch), quantizing the input channel by
    channel; its epilogue operands are the GEMM's (``row_params``), so a depthwise layer gives the bits the
    im2col path gave."""
    act = _Act(node, 1, node.inputs[0].type.size)
    ctx.use_kernel(qconv_kernel(g, act.xbits))
    m, kh, kw = g["M"], g["kh"], g["kw"]
    wq = node.inputs[1].const.reshape(m, kh, kw)
    taps = np.zeros((m, kh, _ceil(kw, 4)), np.int8)  # [C][kh][kwg][4], zero past kw
    taps[..., :kw] = wq
    wsum, ws, b = row_params(wq.reshape(m, -1), node.inputs[2].const, _bias(node, 3))
    hp, wp = dw_plane(g)
    threads = split_threads(ctx, g["N"] * m * g["OH"] * g["OW"] * kh * kw, SPLIT_MACS)
    pre, xf, xq, s, z = act.emit_params(node, ctx, threads)
    return braced(pre, (
        f"qs8_dwconv_x{act.xbits}_{dw_variant(g)}({xf}, {xq}, {g['N']}, {g['C']}, {g['H']}, {g['W']}, "
        f"{ctx.weight(taps.reshape(-1), 'int8_t')}, {ctx.weight(wsum, 'int32_t')}, {ctx.weight(ws)}, "
        f"{ctx.weight(b)}, {s}, {z}, {act.qmax}, {qout(node, ctx)}, {g['OH']}, {g['OW']}, {kh}, "
        f"{kw}, {g['sh']}, {g['sw']}, {g['dh']}, {g['dw']}, {g['pt']}, {g['pl']}, {g['pr']}, {hp}, {wp}, "
        f"{ctx.scratch('uint8_t')}, {act_c(node)}, {threads});"))


# -- qconv / qb4conv: NCHW convolution (im2col rows, or the depthwise kernels above) -----------------
def _conv_k(g: dict[str, int]) -> int:
    return g["C"] // g["G"] * g["kh"] * g["kw"]


def _pchunk(g: dict[str, int]) -> int:
    return max(1, min(g["OH"] * g["OW"], COL_BYTES // max(_conv_k(g), 1)))


def _col_bytes(g: dict[str, int]) -> int:
    """im2col rows of one pixel chunk; none for 1x1 convs, whose planes are packed as they lie; strided
    unpadded 1x1 convs: one image's subsampled planes."""
    if is_pointwise(g):
        return 0
    if is_pointwise_strided(g):
        return _ceil(g["C"] * g["OH"] * g["OW"], 64)
    return _ceil(_pchunk(g), 64) * _conv_k(g)  # rows a cache line apart (qs8_conv2d)


def _qconv_scratch(node: Node) -> int:
    g = conv_geometry(node)
    if is_depthwise(g):
        return dw_scratch_bytes(g, node.attrs["xq"].mode != INPUT)
    act = _Act(node, 1, node.inputs[0].type.size)
    return act.scratch_bytes() + _col_bytes(g) + xpack_bytes(_pchunk(g), _conv_k(g), act.xbits) + 64


def qconv_kernel(g: dict[str, int], xbits: int) -> str:
    """Grammar name of the int8 conv kernel, a pure function of geometry and activation bits: depthwise
    convs run qs8-dwconv, 1x1 stride-1 unpadded ones pack their planes straight into the GEMM panels
    (qs8-conv1x1-gemm), strided unpadded 1x1 ones subsample their planes first (qs8-conv1x1-subsample-gemm),
    the rest im2col rows (qs8-conv-im2col-gemm); tile as ``s8_tile``."""
    x8 = "" if xbits == 7 else "-x8"
    if is_depthwise(g):
        return f"qs8-dwconv{x8}-{kernel_tile(g)}"
    op = ("conv1x1-gemm" if is_pointwise(g) else "conv1x1-subsample-gemm" if is_pointwise_strided(g)
          else "conv-im2col-gemm")
    return f"qs8-{op}{x8}-{s8_tile(_pchunk(g))}"


def _conv_args(g: dict[str, int]) -> str:
    return (f"{g['M']}, {g['OH']}, {g['OW']}, {g['G']}, {g['kh']}, {g['kw']}, {g['sh']}, {g['sw']}, "
            f"{g['dh']}, {g['dw']}, {g['pt']}, {g['pl']}")


def _conv_prologue(node: Node, ctx: EmitContext
                   ) -> tuple[dict[str, int], _Act, str, str, str, str, str, str]:
    """Geometry, activation quantization (per tensor), the free scratch after it (shared) and the
    kernels' thread arguments."""
    g = conv_geometry(node)
    act = _Act(node, 1, node.inputs[0].type.size)
    threads = split_threads(ctx, g["N"] * g["M"] * g["OH"] * g["OW"] * _conv_k(g), SPLIT_MACS)
    mem = ctx.scratch("uint8_t", shared=True)
    pre, xq, s, z, used = act.emit(node, ctx, mem, threads)
    return g, act, pre, xq, s, z, f"({mem} + {used})", threads


def _qconv_emit(node: Node, ctx: EmitContext) -> str:
    g = conv_geometry(node)
    if is_depthwise(g):
        return _qdwconv_emit(node, ctx, g)
    g, act, pre, xq, s, z, col, threads = _conv_prologue(node, ctx)
    ctx.use_kernel(qconv_kernel(g, act.xbits))
    w, wsum, ws, b = pack_s8(node.inputs[1].const.reshape(g["M"], -1), node.inputs[2].const, _bias(node, 3),
                             g["G"])
    xp = f"({col} + {_col_bytes(g)})"
    operands = (f"{ctx.weight(w, 'int8_t')}, {ctx.weight(wsum, 'int32_t')}, {ctx.weight(ws)}, "
                f"{ctx.weight(b)}, {s}, {z}, {qout(node, ctx)}")
    if is_pointwise(g):
        call = (f"qs8_conv1x1_x{act.xbits}({xq}, {g['N']}, {g['C']}, {g['D'] * g['H'] * g['W']}, {operands}, "
                f"{g['M']}, {g['G']}, {_pchunk(g)}, {xp}")
    elif is_pointwise_strided(g):
        call = (f"qs8_conv1x1_sub_x{act.xbits}({xq}, {g['N']}, {g['C']}, {g['H']}, {g['W']}, {operands}, "
                f"{g['M']}, {g['OH']}, {g['OW']}, {g['G']}, {g['sh']}, {g['sw']}, {_pchunk(g)}, {col}, {xp}")
    else:
        call = (f"qs8_conv2d_x{act.xbits}({xq}, {g['N']}, {g['C']}, {g['H']}, {g['W']}, {operands}, "
                f"{_conv_args(g)}, {_pchunk(g)}, {col}, {xp}")
    return braced(pre, f"{call}, {act_c(node)}, {threads});")


register(OpDef("qconv", requantized(conv_infer), None, _qconv_emit, kernels=("qs8-gemm", "qs8-dwconv"),
               scratch=_qconv_scratch))
declare("qconv", {**CONV_ATTRS, **XQ})


def _qb4conv_emit(node: Node, ctx: EmitContext) -> str:
    g, _, pre, xq, s, z, col, threads = _conv_prologue(node, ctx)
    k = _conv_k(g)
    group = k // node.inputs[2].type.shape[1]
    w, ws, wz, wsc, b = pack_b4(node.inputs[1].const.reshape(g["M"], k), node.inputs[2].const,
                                node.inputs[3].const, _bias(node, 4), group)
    ctx.use_kernel(f"qb4-conv-im2col-gemm-{b4_tile(_pchunk(g))}")
    return braced(pre, (
        f"qb4_conv2d({xq}, {g['N']}, {g['C']}, {g['H']}, {g['W']}, {ctx.weight(w, 'uint8_t')}, "
        f"{ctx.weight(ws)}, {ctx.weight(wz, 'uint8_t')}, {ctx.weight(wsc)}, {ctx.weight(b)}, {s}, {z}, "
        f"{ctx.ptr(node.outputs[0])}, {g['M']}, {g['OH']}, {g['OW']}, {g['kh']}, {g['kw']}, {g['sh']}, "
        f"{g['sw']}, {g['dh']}, {g['dw']}, {g['pt']}, {g['pl']}, {_pchunk(g)}, {col}, "
        f"({col} + {_b4_col_bytes(g)}), {act_c(node)}, {threads});"))


def _b4_col_bytes(g: dict[str, int]) -> int:
    """im2col rows of one pixel chunk: qb4 convs take them at every kernel size, 1x1 included."""
    return _ceil(_pchunk(g) * _conv_k(g), 64)


def _qb4conv_scratch(node: Node) -> int:
    """Quantized input, im2col rows of one pixel chunk, then qb4_gemm's working space for the chunk."""
    g = conv_geometry(node)
    act = _Act(node, 1, node.inputs[0].type.size).scratch_bytes()
    return act + _b4_col_bytes(g) + b4_scratch_bytes(_pchunk(g), _conv_k(g))


register(OpDef("qb4conv", conv_infer, None, _qb4conv_emit, kernels=("qs8-gemm", "qb4-gemm"),
               scratch=_qb4conv_scratch))
declare("qb4conv", {**CONV_ATTRS, **XQ})
