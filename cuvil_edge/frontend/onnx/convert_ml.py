"""Converters for the ONNX-ML (``ai.onnx.ml``) operators scikit-learn's exporters write for numeric models:
Binarizer, ArrayFeatureExtractor, and the tree ensembles (TreeEnsemble of ai.onnx.ml 5 and
TreeEnsembleRegressor) as one ``trees`` node (ops/trees.py). The tree tables are checked here: every
reference inside the tables, every feature inside the input's columns, and no tree that loops back on
itself (the generated walk would never end)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...ops.trees import AGGREGATES, MODES
from .registry import ConvertContext, ml_converter

#: TreeEnsembleRegressor's mode strings, in ``MODES`` order (LEAF marks a leaf)
_MODE_NAMES = tuple(f"BRANCH_{m.upper()}" for m in MODES)
#: post_transform as TreeEnsemble numbers it, and its name; PROBIT and SOFTMAX_ZERO are refused
_POSTS = {0: "none", 1: "softmax", 2: "logistic"}


@ml_converter("Binarizer")
def binarizer(ctx: ConvertContext) -> None:
    x = ctx.input(0)
    seen = x  # integers are compared with the float threshold as numbers, as the reference does
    if not x.type.dtype.startswith("float"):
        seen = ctx.emit1("cast", [x], {"to": "float64"}, name=f"{ctx.name}/float")
    threshold = ctx.constant(np.asarray(float(ctx.attr("threshold", 0.0)), seen.type.dtype), "threshold")
    above = ctx.emit1("compare", [seen, threshold], {"kind": "gt"}, name=f"{ctx.name}/above")
    ctx.set_outputs(ctx.emit1("cast", [above], {"to": x.type.dtype}))


@ml_converter("ArrayFeatureExtractor")
def array_feature_extractor(ctx: ConvertContext) -> None:
    """``X[..., Y]`` with Y flattened; a 1-D X gives one row ``[1, k]``, as onnxruntime does."""
    x, ind = ctx.input(0), ctx.input(1)
    if ind.type.dtype != "int64":
        raise ctx.unsupported(f"indices are {ind.type.dtype}, not int64")
    if len(ind.type.shape) != 1:
        ind = ctx.emit1("reshape", [ind], {"shape": [ind.type.size]}, name=f"{ctx.name}/flat")
    picked = ctx.emit1("gather", [x, ind], {"axis": len(x.type.shape) - 1},
                       name=f"{ctx.name}/gather" if len(x.type.shape) == 1 else None)
    if len(x.type.shape) == 1:
        picked = ctx.emit1("reshape", [picked], {"shape": [1, ind.type.size]})
    ctx.set_outputs(picked)


def _ints(ctx: ConvertContext, name: str) -> list[int]:
    return [int(v) for v in ctx.attr(name, []) or []]


def _floats(ctx: ConvertContext, name: str) -> list[float]:
    """A float-list attribute, or its ``<name>_as_tensor`` spelling (double precision, ai.onnx.ml 3)."""
    tensor = ctx.attr(f"{name}_as_tensor")
    if tensor is not None:
        from onnx import numpy_helper

        return [float(v) for v in numpy_helper.to_array(tensor).reshape(-1)]
    return [float(v) for v in ctx.attr(name, []) or []]


def _tensor(ctx: ConvertContext, name: str) -> np.ndarray:
    from onnx import numpy_helper

    t = ctx.attr(name)
    return np.zeros(0) if t is None else numpy_helper.to_array(t).reshape(-1)


def _nan_split(values: np.ndarray) -> list[list[float]]:
    """``[1, 2, nan, 3, nan]`` -> ``[[1, 2], [3]]``: membership sets as TreeEnsemble lists them."""
    groups: list[list[float]] = [[]]
    for v in values.astype(np.float64):
        if np.isnan(v):
            groups.append([])
        else:
            groups[-1].append(float(v))
    return groups


def _check_trees(ctx: ConvertContext, nodes: Sequence[tuple], n_leaves: int, roots: Sequence[int],
                 features: int) -> None:
    """Every ref in range, every feature a column, and each tree a tree (no ref reached twice on one
    path: a cycle would make the walk endless)."""
    def ok(ref: int) -> bool:
        return -n_leaves <= ref < len(nodes)

    bad = next((i for i, n in enumerate(nodes) if not (ok(n[3]) and ok(n[4]) and 0 <= n[0] < features)), None)
    if bad is not None or not all(ok(r) for r in roots):
        raise ctx.unsupported(f"node {bad} refers outside the {len(nodes)} nodes, {n_leaves} leaves "
                              f"or {features} features" if bad is not None else "a root outside the tables")
    for root in roots:
        stack, on_path = [(root, 0)], [False] * len(nodes)
        while stack:  # iterative DFS: children pushed after the node is marked, unmarked when done
            ref, state = stack.pop()
            if ref < 0:
                continue
            if state:
                on_path[ref] = False
                continue
            if on_path[ref]:
                raise ctx.unsupported(f"tree rooted at node {root} loops back to node {ref}")
            on_path[ref] = True
            stack += [(ref, 1), (nodes[ref][3], 0), (nodes[ref][4], 0)]


def _emit_trees(ctx: ConvertContext, nodes: list[tuple], leaves: list[tuple], roots: list[int],
                members: list[float], counts: list[int], attrs: dict[str, Any],
                name: str | None = None) -> Any:
    x = ctx.input(0)
    if len(x.type.shape) != 2:
        raise ctx.unsupported(f"input of rank {len(x.type.shape)}: rows of features [N, F]")
    if x.type.dtype not in ("float32", "float64"):
        x = ctx.emit1("cast", [x], {"to": "float32"}, name=f"{ctx.name}/float")
    _check_trees(ctx, nodes, len(leaves), roots, x.type.shape[1])
    targets = attrs["targets"]
    if targets < 1 or any(not 0 <= t < targets for lf in leaves for t, _ in lf):
        raise ctx.unsupported(f"a leaf targets outside the {targets} targets")
    return ctx.emit1("trees", [x], {"nodes": tuple(nodes), "leaves": tuple(leaves), "roots": tuple(roots),
                                    "members": tuple(members), "member_counts": tuple(counts), **attrs},
                     name=name)


@ml_converter("TreeEnsemble")
def tree_ensemble(ctx: ConvertContext) -> None:
    """ai.onnx.ml 5's TreeEnsemble: interior nodes by index, leaves by index, a root per tree."""
    true_ids, false_ids = _ints(ctx, "nodes_truenodeids"), _ints(ctx, "nodes_falsenodeids")
    true_leaf, false_leaf = _ints(ctx, "nodes_trueleafs"), _ints(ctx, "nodes_falseleafs")
    features, modes = _ints(ctx, "nodes_featureids"), [int(m) for m in _tensor(ctx, "nodes_modes")]
    splits = [float(v) for v in _tensor(ctx, "nodes_splits")]
    missing = _ints(ctx, "nodes_missing_value_tracks_true") or [0] * len(features)
    ctx.attr("nodes_hitrates")  # a hint for ordering, not part of the result
    n = len(features)
    if any(len(a) != n for a in (true_ids, false_ids, true_leaf, false_leaf, modes, splits, missing)):
        raise ctx.unsupported(f"the nodes_* attributes differ in length (nodes_featureids has {n})")
    if any(not 0 <= m < len(MODES) for m in modes):
        raise ctx.unsupported(f"a node mode outside 0..{len(MODES) - 1}")
    members: list[float] = []
    counts, groups = [0] * n, iter(_nan_split(_tensor(ctx, "membership_values")))
    for i, m in enumerate(modes):
        if MODES[m] == "member":  # the sets, NaN-delimited, in the order member nodes appear
            group = next(groups, [])
            splits[i], counts[i] = float(len(members)), len(group)
            members += group
    weights, leaf_targets = [float(v) for v in _tensor(ctx, "leaf_weights")], _ints(ctx, "leaf_targetids")
    if len(weights) != len(leaf_targets):
        raise ctx.unsupported(f"{len(weights)} leaf_weights for {len(leaf_targets)} leaf_targetids")

    def ref(node: int, leaf: int) -> int:
        return -1 - node if leaf else node

    nodes = [(features[i], modes[i], splits[i], ref(true_ids[i], true_leaf[i]),
              ref(false_ids[i], false_leaf[i]), bool(missing[i])) for i in range(n)]
    roots = []
    for r in _ints(ctx, "tree_roots"):
        if not 0 <= r < n:
            raise ctx.unsupported(f"tree root {r} outside the {n} nodes")
        single = true_leaf[r] and false_leaf[r] and true_ids[r] == false_ids[r]  # a tree that is one leaf
        roots.append(ref(true_ids[r], 1) if single else r)
    aggregate, post = int(ctx.attr("aggregate_function", 1)), int(ctx.attr("post_transform", 0))
    if post not in _POSTS or not 0 <= aggregate < 4:
        raise ctx.unsupported(f"post_transform {post} / aggregate_function {aggregate} (post: NONE, SOFTMAX, "
                              "LOGISTIC)")
    attrs = {"aggregate": ("average", "sum", "min", "max")[aggregate], "base": (), "post": _POSTS[post],
             "targets": int(ctx.attr("n_targets", 0) or 0)}
    ctx.set_outputs(_emit_trees(ctx, nodes, [((t, w),) for t, w in zip(leaf_targets, weights)], roots,
                                members, counts, attrs))


@ml_converter("TreeEnsembleRegressor")
def tree_ensemble_regressor(ctx: ConvertContext) -> None:
    """ai.onnx.ml 1/3's regressor: nodes named (tree id, node id), LEAF nodes carry target weights; a
    tree's root is its first node listed; the result is float32 whatever the input."""
    tree_ids, node_ids = _ints(ctx, "nodes_treeids"), _ints(ctx, "nodes_nodeids")
    features, values = _ints(ctx, "nodes_featureids"), _floats(ctx, "nodes_values")
    true_ids, false_ids = _ints(ctx, "nodes_truenodeids"), _ints(ctx, "nodes_falsenodeids")
    modes = ctx.texts("nodes_modes")
    missing = _ints(ctx, "nodes_missing_value_tracks_true") or [0] * len(tree_ids)
    _floats(ctx, "nodes_hitrates")  # a hint for ordering, not part of the result
    n = len(tree_ids)
    if any(len(a) != n for a in (node_ids, features, values, true_ids, false_ids, modes, missing)):
        raise ctx.unsupported(f"the nodes_* attributes differ in length (nodes_treeids has {n})")
    if bad := sorted({m for m in modes if m != "LEAF" and m not in _MODE_NAMES[:6]}):
        raise ctx.unsupported(f"node mode {bad[0]!r}")
    where: dict[tuple[int, int], int] = {}
    leaf_of: dict[int, int] = {}
    for i, key in enumerate(zip(tree_ids, node_ids)):
        if key in where:
            raise ctx.unsupported(f"tree {key[0]} lists node {key[1]} twice")
        where[key] = i
        if modes[i] == "LEAF":
            leaf_of[i] = len(leaf_of)
    pairs: list[list[tuple[int, float]]] = [[] for _ in leaf_of]
    t_trees, t_nodes = _ints(ctx, "target_treeids"), _ints(ctx, "target_nodeids")
    t_ids, t_weights = _ints(ctx, "target_ids"), _floats(ctx, "target_weights")
    if not len(t_trees) == len(t_nodes) == len(t_ids) == len(t_weights):
        raise ctx.unsupported("the target_* attributes differ in length")
    for key, target, w in zip(zip(t_trees, t_nodes), t_ids, t_weights):
        if leaf_of.get(where.get(key, -1)) is None:
            raise ctx.unsupported(f"a target weight on tree {key[0]} node {key[1]}, which is not a leaf")
        pairs[leaf_of[where[key]]].append((target, w))
    index, branches = {}, 0  # listed node -> ref: leaves by leaf number, branches in order
    for i in range(n):
        index[i] = -1 - leaf_of[i] if i in leaf_of else branches
        branches += i not in leaf_of

    def child(i: int, node_id: int) -> int:
        j = where.get((tree_ids[i], node_id))
        if j is None:
            raise ctx.unsupported(f"tree {tree_ids[i]} node {node_ids[i]} points to missing node {node_id}")
        return index[j]

    nodes = [(features[i], _MODE_NAMES.index(modes[i]), values[i], child(i, true_ids[i]),
              child(i, false_ids[i]), bool(missing[i])) for i in range(n) if i not in leaf_of]
    first = {t: i for i, t in reversed(list(enumerate(tree_ids)))}  # a tree's first listed node
    roots = [index[i] for i in sorted(first.values())]
    aggregate = str(ctx.attr("aggregate_function", "SUM")).lower()
    post = {"NONE": "none", "SOFTMAX": "softmax", "LOGISTIC": "logistic"}.get(ctx.attr("post_transform",
                                                                                        "NONE"))
    targets, base = int(ctx.attr("n_targets", 0) or 0), _floats(ctx, "base_values")
    if post is None or aggregate not in AGGREGATES or (base and len(base) != targets):
        raise ctx.unsupported(f"post_transform {ctx.attr('post_transform')!r}, aggregate_function "
                              f"{aggregate.upper()!r} or {len(base)} base_values for {targets} targets")
    attrs = {"aggregate": aggregate, "base": tuple(base), "post": post, "targets": targets}
    wide = ctx.input(0).type.dtype == "float64"  # compared in double, given back as float32
    y = _emit_trees(ctx, nodes, [tuple(p) for p in pairs], roots, [], [0] * len(nodes), attrs,
                    name=f"{ctx.name}/trees" if wide else None)
    ctx.set_outputs(ctx.emit1("cast", [y], {"to": "float32"}) if wide else y)
