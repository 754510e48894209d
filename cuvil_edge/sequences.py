"""Sequence graph inputs and outputs at the model's edge. A compiled module holds tensors only: an ONNX
sequence input built with n item shapes (``input_shapes={"x": [(2, 3), (3, 3)]}``) becomes n tensor
inputs ``x[0]`` ... ``x[n-1]``, and a sequence output whose length is known at build time becomes one
tensor output per item, named the same way. The import records both in ``graph.meta[SEQUENCES]``
(``{"inputs": {name: n}, "outputs": {name: n}}``), the build copies that into the spec's ``extra``, so
``predict`` takes and gives a list of arrays there (after a save and load too) while the device, and any
other caller of the module, sees the plain item tensors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runtime_wasm import InferenceInputError

#: the key of the record, in ``graph.meta`` and in ``ModelSpec.extra``
SEQUENCES = "sequences"


def item_name(seq: str, i: int) -> str:
    """The module's tensor for item ``i`` of sequence ``seq`` (any text is a valid spec name)."""
    return f"{seq}[{i}]"


def shape_record(shape: Sequence[Any]) -> list[Any]:
    """An ``input_shapes`` entry as plain ints (the build record's): a shape, or a sequence input's list
    of item shapes."""
    return [shape_record(d) if isinstance(d, Sequence) else int(d) for d in shape]


def flat_feeds(record: Mapping[str, Any], inputs: Any) -> Any:
    """``inputs`` with each sequence input's list of arrays spread over its items' names: a dict by name
    only (a positional list is the module's own, flat, order)."""
    seqs = record.get("inputs", {})
    if not seqs or not isinstance(inputs, Mapping):
        return inputs
    out: dict[str, Any] = {}
    for name, value in inputs.items():
        n = seqs.get(name)
        if n is None:
            out[name] = value
            continue
        if not isinstance(value, (list, tuple)) or len(value) != n:
            got = f"{len(value)} items" if isinstance(value, (list, tuple)) else type(value).__name__
            raise InferenceInputError(f"input {name!r} is a sequence of {n} tensors (as built): give a list "
                                      f"of {n} arrays, got {got}")
        out.update((item_name(name, i), item) for i, item in enumerate(value))
    return out


def grouped_outputs(record: Mapping[str, Any], outputs: dict[str, Any]) -> dict[str, Any]:
    """``outputs`` with each sequence output's items gathered back into one list under its name."""
    for name, n in record.get("outputs", {}).items():
        outputs[name] = [outputs.pop(item_name(name, i)) for i in range(n)]
    return outputs
