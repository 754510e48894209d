"""Resource variables (VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE) and their CALL_ONCE initializers.

A streaming model keeps state in variables that outlive one invoke. The initializer subgraph runs here,
at build time: the values it assigns must be constants and become the states' initial values. In the
entry subgraph a variable it both reads and assigns becomes a ``StateVar`` (``codegen/memplan.py``): its
first read is a graph input, its last value a graph output, which the module copies over the input at the
end of ``run``. One it only reads never changes, so its reads are the initial value, a constant. Values
are kept real (float for a quantized variable); a 4-D one (a streaming conv's frames, NHWC) is kept NCHW,
so the concatenation that appends a frame and the conv that reads the window need no transpose (the
state's layout is the module's own: ``variables.init`` holds the initial value laid the same way)."""

from __future__ import annotations

from ...ir.graph import Graph, TensorType
from .layout import NCHW, Perm, identity
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

