"""Signal and linear-algebra ops: ``dft`` (ONNX DFT, and STFT's transform of its frames) and ``det``.

``dft``: input ``[..., n, ..., c]`` (c = 1: real, c = 2: real and imaginary parts) transformed along
``axis`` (never the last). attrs: ``axis`` (non-negative), ``length`` (the DFT length L: the signal is cut
or zero-padded to it), ``inverse`` (e^{+i...} and a 1/L scale), ``onesided``: forward, only bins
``0 .. L/2`` (the rest mirror them for a real signal); inverse, the input holds those bins of a real
signal and the output is that signal, real (``numpy.fft.irfft``: the other bins are the conjugates, so
bins 1 .. (L-1)/2 count twice, and the imaginary parts of bin 0 and of bin L/2 drop out).

A direct O(L * taps) sum per output bin, in double with build-time double twiddle tables (cos and sin of
2 pi m / L, m = jk mod L): generic over the C type (float32 and float64 tensors), no FFT plan, and as
exact as numpy's FFT within float32 for the frame lengths audio models use (a few hundred to a few
thousand). Threads split the transforms.

``det``: ``[..., M, M]`` -> ``[...]``, LU with partial pivoting in double (numpy's ``linalg.det``), one
matrix at a time through an M x M double scratch.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..codegen.kernels.table import dtype_code
from ..errors import ShapeError
from ..ir.graph import Node, TensorType
from ..ir.limits import check_shape
from .common import CTYPES, split_rows
from .registry import OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext

#: the element types the C loops take (they compute in double either way)
FLOATS = frozenset({"float32", "float64"})


# -- dft --------------------------------------------------------------------------------------------------
def _irfft(node: Node) -> bool:
    """An inverse one-sided DFT: a real signal from its first L/2 + 1 bins."""
    return bool(node.attrs["inverse"] and node.attrs["onesided"])


def _taps(node: Node) -> int:
    """Input points each output bin sums over: the signal cut to L (to L/2 + 1 bins for an irfft)."""
    n, length = node.inputs[0].type.shape[node.attrs["axis"]], node.attrs["length"]
    return min(n, length // 2 + 1 if _irfft(node) else length)


def _dft_infer(node: Node) -> list[TensorType]:
    x = node.inputs[0].type
    axis, length = node.attrs["axis"], node.attrs["length"]
    if len(x.shape) < 2 or x.shape[-1] not in (1, 2) or not 0 <= axis < len(x.shape) - 1 or length < 1:
        raise ShapeError(f"{node.name}: dft of {x} on axis {axis} (length {length}) needs "
                         "[..., n, ..., 1 or 2] and an axis other than the last")
    check_shape((2, length), f"{node.name}: dft twiddle tables")
    forward_half = node.attrs["onesided"] and not node.attrs["inverse"]
    shape = list(x.shape)
    shape[axis] = length // 2 + 1 if forward_half else length
    shape[-1] = 1 if _irfft(node) else 2
    return [TensorType(tuple(shape), x.dtype)]


def _dft_fold(node: Node, args) -> list[np.ndarray]:
    x = args[0]
    axis, length = node.attrs["axis"], node.attrs["length"]
    signal = x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0]
    if _irfft(node):
        return [np.fft.irfft(signal, n=length, axis=axis)[..., None].astype(x.dtype)]
    y = (np.fft.ifft if node.attrs["inverse"] else np.fft.fft)(signal, n=length, axis=axis)
    if node.attrs["onesided"]:
        y = np.take(y, range(length // 2 + 1), axis=axis)
    return [np.stack([y.real, y.imag], axis=-1).astype(x.dtype)]


def _dft_emit(node: Node, ctx: EmitContext) -> str:
    """One transform per (outer, inner) position; bin k sums x[j] (cos - i sin)(2 pi jk / L) over the taps
    (+ i sin for an inverse), the twiddle index m = jk mod L stepping by k."""
    x, y = node.inputs[0], node.outputs[0]
    axis, length = node.attrs["axis"], node.attrs["length"]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-dft")
    shape = x.type.shape
    outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:-1])
    cin, cout, bins = shape[-1], y.type.shape[-1], y.type.shape[axis]
    angle = 2 * np.pi * np.arange(length) / length
    cos_t = ctx.weight(np.cos(angle), "double")
    sin_t = ctx.weight((1 if node.attrs["inverse"] else -1) * np.sin(angle), "double")
    scale = f" * {1.0 / length!r}" if node.attrs["inverse"] else ""
    weight = "(j == 0 || 2 * j == L ? 1.0 : 2.0) * " if _irfft(node) else ""
    xi = f", xi = xs[j * {inner * cin} + 1]" if cin == 2 else ""
    sums = [f"re += {weight}(xr * C[m]{' - xi * S[m]' if cin == 2 else ''});"]
    if cout == 2:
        sums.append(f"im += xr * S[m]{' + xi * C[m]' if cin == 2 else ''};")
    writes = [f"ys[k * {inner * cout}] = ({CTYPES[y.type.dtype]})(re{scale});"]
    if cout == 2:
        writes.append(f"ys[k * {inner * cout} + 1] = ({CTYPES[y.type.dtype]})(im{scale});")

    def loop(count: str, first: str) -> str:
        return "\n".join([
            f"{{ const double* C = {cos_t}; const double* S = {sin_t}; const size_t L = {length};",
            f"  for (size_t t = {first}; t < (size_t){first} + {count}; t++) {{",
            f"    const {CTYPES[x.type.dtype]}* xs = {ctx.ptr(x)} + t / {inner} * {n * inner * cin} "
            f"+ t % {inner} * {cin};",
            f"    {CTYPES[y.type.dtype]}* ys = {ctx.ptr(y)} + t / {inner} * {bins * inner * cout} "
            f"+ t % {inner} * {cout};",
            f"    for (size_t k = 0; k < {bins}; k++) {{",
            "      double re = 0, im = 0;",
            f"      for (size_t j = 0, m = 0; j < {_taps(node)}; j++, m = m + k >= L ? m + k - L : m + k) {{",
            f"        const double xr = xs[j * {inner * cin}]{xi};",
            *(f"        {s}" for s in sums),
            "      }",
            *(["      (void)im;"] if cout == 1 else []),
            *(f"      {w}" for w in writes),
            "    }", "  }", "}"])

    work = outer * inner * bins * _taps(node)
    return split_rows(ctx, outer * inner, work, loop, by_row=(x, y) if inner == 1 else ())


register(OpDef("dft", _dft_infer, _dft_fold, _dft_emit, dtypes=FLOATS))


# -- det --------------------------------------------------------------------------------------------------
def _det_infer(node: Node) -> list[TensorType]:
    x = node.inputs[0].type
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"{node.name}: det of {x} needs [..., M, M]")
    return [TensorType(x.shape[:-2], x.dtype)]


def _det_fold(node: Node, args) -> list[np.ndarray]:
    return [np.asarray(np.linalg.det(args[0].astype(np.float64))).astype(args[0].dtype)]


def _det_scratch(node: Node) -> int:
    m = node.inputs[0].type.shape[-1]
    return m * m * 8


def _det_emit(node: Node, ctx: EmitContext) -> str:
    """Gaussian elimination on a double copy: the largest pivot of each column (a zero one ends with 0),
    a row swap flips the sign, the determinant is the product of the pivots."""
    x, y = node.inputs[0], node.outputs[0]
    m = x.type.shape[-1]
    ctx.use_kernel(f"{dtype_code(y.type.dtype)}-det")
    return "\n".join([
        f"for (size_t b = 0; b < {y.type.size}; b++) {{",
        f"  double* a = {ctx.scratch('double', shared=True)};",
        f"  const {CTYPES[x.type.dtype]}* xs = {ctx.ptr(x)} + b * {m * m};",
        f"  for (size_t e = 0; e < {m * m}; e++) a[e] = xs[e];",
        "  double det = 1.0;",
        f"  for (size_t c = 0; c < {m}; c++) {{",
        "    size_t p = c;",
        f"    for (size_t r = c + 1; r < {m}; r++)",
        f"      if (__builtin_fabs(a[r * {m} + c]) > __builtin_fabs(a[p * {m} + c])) p = r;",
        f"    if (a[p * {m} + c] == 0.0) {{ det = 0.0; break; }}",
        "    if (p != c) {",
        f"      for (size_t e = 0; e < {m}; e++) {{ const double t = a[c * {m} + e]; "
        f"a[c * {m} + e] = a[p * {m} + e]; a[p * {m} + e] = t; }}",
        "      det = -det;",
        "    }",
        f"    const double pivot = a[c * {m} + c];",
        "    det *= pivot;",
        f"    for (size_t r = c + 1; r < {m}; r++) {{",
        f"      const double f = a[r * {m} + c] / pivot;",
        f"      for (size_t e = c + 1; e < {m}; e++) a[r * {m} + e] -= f * a[c * {m} + e];",
        "    }",
        "  }",
        f"  {ctx.ptr(y)}[b] = ({CTYPES[y.type.dtype]})det;",
        "}"])


register(OpDef("det", _det_infer, _det_fold, _det_emit, scratch=_det_scratch, dtypes=FLOATS))
