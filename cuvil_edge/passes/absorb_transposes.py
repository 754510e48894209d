"""Transposes absorbed where they meet a producer or another transpose: after import's layout work, the
ones left inside a graph are mostly a conv output moved channels-last for a reshape that reads it in NHWC
order (SSD / BlazeFace-style detector heads: conv -> transpose(0, 2, 3, 1) -> reshape -> concat of
anchors), and transposes on either side of a reshape that only merges dims.

- A pointwise f32 conv (1x1 taps, stride 1, unpadded, one group) whose one reader is a transpose to
  channels-last becomes ``conv_nhwc``: the 1x1 kernel stores its tiles transposed, no pass of its own.
- A ``depth_to_space`` / ``space_to_depth`` whose one reader is a transpose to channels-last writes NHWC
  itself (``channels_last``: another permutation of the same 6-D view, still one pass), e.g. a detector's
  DEPTH_TO_SPACE feeding a graph output that TFLite wants NHWC.
- transpose -> reshape (merging consecutive dims) -> transpose is one transpose, then the reshape.

Runs after activation fusion, so a conv_nhwc carries its activation and no later pass needs to know its
layout.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir.graph import Graph, Node, TensorType
from ..ops.conv import conv_geometry, is_pointwise


def _channels_last(rank: int) -> list[int]:
    return [0, *range(2, rank), 1]


def _absorb_into_conv(graph: Graph, conv: Node, uses: dict[int, list[Node]]) -> bool:
    y = conv.outputs[0]
    t = graph.sole_consumer(y, uses)
    if (t is None or t.op != "transpose" or y.type.dtype != "float32" or conv.attrs.get("group", 1) != 1
            or list(t.attrs["perm"]) != _channels_last(len(y.type.shape)) or not conv.inputs[1].is_const
            or not is_pointwise(conv_geometry(conv))):
        return False
    conv.op, conv.outputs = "conv_nhwc", t.outputs
    graph.nodes.remove(t)
    return True


def _absorb_into_block_move(graph: Graph, node: Node, uses: dict[int, list[Node]]) -> bool:
    t = graph.sole_consumer(node.outputs[0], uses)
    if t is None or t.op != "transpose" or node.attrs.get("channels_last", False) or \
            list(t.attrs["perm"]) != _channels_last(4):
        return False
    node.attrs["channels_last"], node.outputs = True, t.outputs
    graph.nodes.remove(t)
    return True


def merge_groups(src: Sequence[int], dst: Sequence[int]) -> list[list[int]] | None:
    """For a reshape ``src`` -> ``dst`` that only merges consecutive dims: the ``src`` dims each ``dst`` dim
    is made of (size-1 dims join the group before them), else None."""
    groups: list[list[int]] = []
    i = 0
    for d in dst:
        group, size = [], 1
        while i < len(src) and (size < d or (src[i] == 1 and d == 1 and not group)):
            group.append(i)
            size *= src[i]
            i += 1
        if size != d:
            return None
        groups.append(group)
    if any(src[j] != 1 for j in range(i, len(src))):
        return None
    if groups:
        groups[-1] += list(range(i, len(src)))
    return groups


def _merge_across_reshape(graph: Graph, first: Node, uses: dict[int, list[Node]]) -> bool:
    r = graph.sole_consumer(first.outputs[0], uses)
    second = graph.sole_consumer(r.outputs[0], uses) if r is not None and r.op == "reshape" else None
    if second is None or second.op != "transpose":
        return False
    groups = merge_groups(first.outputs[0].type.shape, r.outputs[0].type.shape)
    if groups is None:
        return False
    expanded = [d for k in second.attrs["perm"] for d in groups[k]]
    perm = [first.attrs["perm"][d] for d in expanded]
    x = first.inputs[0]
    moved = graph.value(f"{first.outputs[0].name}/merged",
                        TensorType(tuple(x.type.shape[p] for p in perm), x.type.dtype))
    first.attrs["perm"], first.outputs = perm, [moved]
    r.inputs, r.outputs, r.attrs["shape"] = [moved], second.outputs, list(second.outputs[0].type.shape)
    graph.nodes.remove(second)
    if perm == sorted(perm):  # the two cancel: the reshape reads the input itself
        r.inputs = [x]
        graph.nodes.remove(first)
    return True


#: op -> the rewrite tried on each of its nodes
_REWRITES = {"conv": _absorb_into_conv, "transpose": _merge_across_reshape,
             "depth_to_space": _absorb_into_block_move, "space_to_depth": _absorb_into_block_move}


def absorb_transposes(graph: Graph) -> bool:
    changed = False
    uses = graph.consumers()
    for n in list(graph.nodes):
        rewrite = _REWRITES.get(n.op)
        if rewrite is not None and any(m is n for m in graph.nodes) and rewrite(graph, n, uses):
            changed, uses = True, graph.consumers()
    return changed
