"""``epilogue_act``: one of the activations a computing op can apply in its epilogue (its ``act`` attr:
relu, clip, hardsigmoid, silu, ...; ``common.ACTS``), as a node of its own.

The fusion pass folds it into its producer's epilogue; what stays standalone runs ``f32_act`` in place.
Activations with no epilogue form are ``standalone_act``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..ir.graph import Node
from .common import act_c, act_numpy, same_type, split_rows
from .registry import F32, OpDef, register

if TYPE_CHECKING:
    from ..codegen.emit import EmitContext


def _fold(node: Node, args) -> list[np.ndarray]:
    return [act_numpy(args[0], node.attrs["act"]).astype(args[0].dtype)]


def _emit(node: Node, ctx: EmitContext) -> str:
    x, y = node.inputs[0], node.outputs[0]
    ctx.use_kernel(f"f32-v{node.attrs['act'][0]}-4")
    in_place = ctx.plan.offset(x) == ctx.plan.offset(y) or x.is_const
    return split_rows(ctx, x.type.size, x.type.size, lambda c, i: (
        ("" if in_place else f"copy_f32({ctx.ptr(y)} + {i}, {ctx.ptr(x)} + {i}, {c}); ")
        + f"f32_act({ctx.ptr(y)} + {i}, {c}, {act_c(node)});"), unit=16, by_row=(x, y))


register(OpDef("epilogue_act", same_type, _fold, _emit, inplace=True, dtypes=F32))
