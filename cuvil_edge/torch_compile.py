"""PyTorch modules as callables that run in wasmtime: ``cuvil_edge.compile(module)`` and
``torch.compile(module, backend="cuvil")`` (registered as a ``torch_dynamo_backends`` entry point). Each
builds through ``frontend.torch_export`` for the shapes it is called with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .errors import ExportError
from .frontend.torch_export import export_onnx, require_torch
from .model import CuvilModel


def _numpy(value: Any) -> np.ndarray:
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


class CompiledModule:
    """A PyTorch module as a callable on torch tensors that runs in wasmtime: built on the first call for
    its input shapes and dtypes (and again for each new shape), one wasm call per inference. Outputs come
    back as torch tensors, one or a tuple in the exported graph's order."""

    def __init__(self, module: Any, precision: str = "fp32", exporter: str = "auto",
                 optimize: Mapping[str, Any] | None = None) -> None:
        self.module, self.precision, self.exporter = module, precision, exporter
        self.optimize = dict(optimize or {})
        self._built: dict[tuple[Any, ...], CuvilModel] = {}

    def model_for(self, args: tuple[Any, ...]) -> CuvilModel:
        """The build for these arguments' shapes and dtypes (built now the first time)."""
        key = tuple((tuple(a.shape), str(a.dtype)) for a in args)
        if key not in self._built:
            model = CuvilModel.load(export_onnx(self.module, args, self.exporter))
            model.optimize(self.precision, **self.optimize)
            self._built[key] = model
        return self._built[key]

    def __call__(self, *args: Any) -> Any:
        torch = require_torch()
        model = self.model_for(args)
        names = [t.name for t in model.spec.inputs]
        if len(names) != len(args):
            raise ExportError(f"the exported graph takes {len(names)} inputs ({names}), the call passed "
                              f"{len(args)}: an input the module ignores was dropped by the exporter")
        outputs = model.predict({n: _numpy(a) for n, a in zip(names, args)})
        tensors = tuple(torch.from_numpy(np.array(y)) for y in outputs.values())
        return tensors[0] if len(tensors) == 1 else tensors


def compile(module: Any, precision: str = "fp32", exporter: str = "auto",  # noqa: A001 (the seed's name)
            **optimize: Any) -> Callable[..., Any]:
    """``module`` as a callable on torch tensors running in wasmtime (``CompiledModule``); ``optimize``:
    ``CuvilModel.optimize``'s options (``calibration`` for int8, ``targets``...)."""
    return CompiledModule(module, precision, exporter, optimize)


def _state_positions(graph_module: Any) -> set[int]:
    """The placeholders dynamo lifted from the module's parameters and buffers (its sources name them):
    weights to build in, not inputs."""
    positions = set()
    placeholders = [n for n in graph_module.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        arg = node.meta.get("grapharg")
        source = getattr(getattr(arg, "source", None), "name", "")
        source = source() if callable(source) else source
        if "._parameters[" in source or "._buffers[" in source:
            positions.add(i)
    return positions


def cuvil_backend(graph_module: Any, example_inputs: Sequence[Any], **options: Any) -> Callable[..., Any]:
    """``torch.compile(module, backend="cuvil")``: dynamo hands over each captured graph with example
    inputs, the module's parameters and buffers among them; those are built in as weights (as they are
    at capture: later changes to them are not seen), the rest are the inputs of a graph built for their
    shapes. ``options`` (``torch.compile(..., options={...})``): ``precision`` and
    ``CuvilModel.optimize``'s options."""
    torch = require_torch()
    if not all(isinstance(a, torch.Tensor) for a in example_inputs):
        raise ExportError("the captured graph takes symbolic sizes: compile with torch.compile(..., "
                          "dynamic=False) (shapes are fixed at build time)")
    state = _state_positions(graph_module)
    constants = {i: a.detach() for i, a in enumerate(example_inputs) if i in state}
    count = len(example_inputs)

    class Bound(torch.nn.Module):
        def forward(self, *inputs: Any) -> Any:
            given = iter(inputs)
            return graph_module(*(constants[i] if i in constants else next(given) for i in range(count)))

    precision = options.pop("precision", "fp32")
    # tracing only: torch.export cannot run inside dynamo's compile, and a failed try there leaves dynamo's
    # state broken (the process later dies of SIGFPE in the compiled frame)
    compiled = CompiledModule(Bound().eval(), precision, "torchscript", options)
    compiled.model_for(tuple(a for i, a in enumerate(example_inputs) if i not in state))  # built now
    (returned,) = (n.args[0] for n in graph_module.graph.nodes if n.op == "output")
    several = isinstance(returned, (tuple, list))

    def run(*args: Any) -> Any:
        out = compiled(*(a for i, a in enumerate(args) if i not in state))
        return (out if isinstance(out, tuple) else (out,)) if several else out

    return run
