"""Resource variables (VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE) and their CALL_ONCE initializers.

A streaming model keeps state in variables that outlive one invoke. The initializer subgraph runs here,
at build time: the values it assigns must be constants and become the states' initial values. In the
entry subgraph a variable it both reads and assigns becomes a ``StateVar`` (``codegen/memplan.py``): its
first read is a graph input, its last value a graph output, which the module copies over the input at the
end of ``run``. One it only reads never changes, so its reads are the initial value, a constant. Values
are kept real (float for a quantized variable); a 4-D one (a streaming conv's frames, NHWC) is kept NCHW,
so the concatenation that appends a frame and the conv that reads the window need no transpose (the
state's layout is the module's own: ``variables.init`` holds the initial value laid the same way).

A variable tensor (the state input of a single-step LSTM, RNN or SVDF: ``convert_cells.py``) becomes a
``StateVar`` the same way, named after the tensor, zero at first and after a reset as LiteRT's interpreter
leaves it (fresh, or after ``reset_all_variables``)."""

from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, TensorType, Value
from .layout import NCHW, Laid, Perm, identity
from .registry import ImportState, TflContext, converter, variable_name


@converter("VAR_HANDLE")
def var_handle(ctx: TflContext) -> None:
    if len(ctx.op.outputs) != 1 or ctx.sg.tensors[ctx.op.outputs[0]].dtype != "resource":
        raise ctx.unsupported("VAR_HANDLE must have one resource output")
    ctx.state.handles[ctx.op.outputs[0]] = variable_name(ctx.options)


def _variable(ctx: TflContext) -> str:
    idx = ctx.op.inputs[0] if ctx.op.inputs else -1
    if idx not in ctx.state.handles:
        raise ctx.unsupported("input 0 must be a resource made by VAR_HANDLE in the same subgraph")
    return ctx.state.handles[idx]


def _layout(rank: int) -> Perm:
    """How a variable of ``rank`` is held (``variables.init`` holds it that way)."""
    return NCHW if rank == 4 else identity(rank)


@converter("READ_VARIABLE")
def read_variable(ctx: TflContext) -> None:
    name, state = _variable(ctx), ctx.state
    value = state.current.get(name)
    if value is None:
        init = state.variables.init.get(name)
        if init is None:
            raise ctx.unsupported(f"variable {name!r} is read before any value is assigned to it "
                                  "(no CALL_ONCE initializer sets it)")
        if state.persistent and name in state.variables.assigned:
            value = ctx.graph.value(name, TensorType(init.shape, str(init.dtype)))
            ctx.graph.inputs.append(value)
            state.variables.reads[name] = value
        else:
            value = ctx.constant(init, name)
        state.current[name] = value
    ctx.set_output(value, _layout(len(value.type.shape)))


@converter("ASSIGN_VARIABLE")
def assign_variable(ctx: TflContext) -> None:
    name, rank = _variable(ctx), len(ctx.laid(1).perm)
    value = ctx.input(1, _layout(rank))
    init = ctx.state.variables.init.get(name)
    if init is not None and (tuple(init.shape), str(init.dtype)) != (value.type.shape, value.type.dtype):
        raise ctx.unsupported(f"variable {name!r} holds {TensorType(init.shape, str(init.dtype))}, "
                              f"assigned {value.type}")
    ctx.state.current[name] = value


@converter("CALL_ONCE")
def call_once(ctx: TflContext) -> None:
    """Run the initializer subgraph now (once per model, as the interpreter does on its first invoke)."""
    from .importer import convert_subgraph

    variables = ctx.state.variables
    index = int(ctx.options.get("InitSubgraphIndex", -1))
    subgraphs = variables.model.subgraphs
    if not 0 <= index < len(subgraphs) or subgraphs[index] is ctx.sg:
        raise ctx.unsupported(f"initializer subgraph {index} (the model has {len(subgraphs)})")
    if index in variables.ran:
        return
    variables.ran.add(index)
    init = subgraphs[index]
    if init.inputs:
        raise ctx.unsupported(f"initializer subgraph {index} takes inputs")
    sub = ImportState(variables, persistent=False)
    convert_subgraph(Graph(f"init{index}"), sub, init)
    for name, value in sub.current.items():
        if not value.is_const:
            raise ctx.unsupported(f"initializer subgraph {index} assigns variable {name!r} a value that is "
                                  "not known at build time")
        variables.init[name] = value.const  # as ASSIGN_VARIABLE laid it


def variable_input(ctx: TflContext, i: int, shape: tuple[int, ...]) -> Value:
    """Input i, a float32 variable tensor of ``shape`` (a cell's state), as this operator reads it: what an
    earlier operator of the run wrote into it, else the value the run starts from (made a state here)."""
    idx = ctx.op.inputs[i] if ctx.has_input(i) else -1
    t = ctx.sg.tensors[idx] if idx >= 0 else None
    if t is None or not t.is_variable or t.data is not None:
        raise ctx.unsupported(f"input {i} (a state) must be a variable tensor without a buffer")
    if (t.dtype, tuple(t.shape)) != ("float32", shape):
        raise ctx.unsupported(f"input {i} (a state) is {t.dtype}{list(t.shape)}, not float32{list(shape)}")
    if idx not in ctx.state.env:
        variables = ctx.state.variables
        if not ctx.state.persistent:
            raise ctx.unsupported(f"input {i} (a state) lives in a subgraph other than the entry one "
                                  "(an IF branch or initializer)")
        if t.name in variables.init:
            raise ctx.unsupported(f"variable tensor {t.name!r} shares its name with a resource variable")
        value = ctx.graph.value(t.name, TensorType(shape, "float32"))
        ctx.graph.inputs.append(value)
        variables.reads[t.name], variables.init[t.name] = value, np.zeros(shape, np.float32)
        write_variable(ctx, i, value)
    return ctx.input(i)


def write_variable(ctx: TflContext, i: int, value: Value) -> None:
    """``value`` (in TFLite order) is what the operator leaves in variable tensor input i: later operators
    of the run read it, and it is the state the next run starts from."""
    idx = ctx.op.inputs[i]
    ctx.state.env[idx] = Laid(value, identity(len(value.type.shape)))
    ctx.state.current[ctx.sg.tensors[idx].name] = value
