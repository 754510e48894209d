"""A streaming TFLite model whose state lives in resource variables (VAR_HANDLE, READ_VARIABLE,
ASSIGN_VARIABLE), written by ``tflite_builder``: the stateful tests check it against LiteRT call after
call, and the TFLite converter coverage counts its operators."""

from __future__ import annotations

import numpy as np

from tests.support.tflite_builder import TfliteBuilder

RNG = np.random.default_rng(7)
HIDDEN = 8
INIT = {"ema": np.full((1, 4), 0.5, np.float32), "total": np.zeros((1, 4), np.float32),
        "h": (RNG.standard_normal((1, HIDDEN)) * 0.5).astype(np.float32),
        "gain": np.float32([[1.5, -0.5, 2.0, 0.25]])}


def variable_handle(b: TfliteBuilder, name: str) -> int:
    h = b.tensor(f"{name}variable_handle", (), "resource")
    b.op("VAR_HANDLE", [], [h], ("VarHandleOptions", {"SharedName": name}))
    return h


def streaming(init: dict[str, np.ndarray] = INIT, h_width: int = HIDDEN) -> bytes:
    """Per step: an exponential moving average and a running sum of x, a recurrent cell
    h = tanh(FC(x) + FC(h)) (FULLY_CONNECTED over the state, multi-threaded in the module), and a gain
    held in a variable the step only reads; outputs y = h and ema * gain."""
    b = TfliteBuilder()
    first = b.subgraph()
    for name, value in init.items():
        first.op("ASSIGN_VARIABLE", [variable_handle(first, name), first.const(f"{name}_0", value)], [])
    x = b.tensor("x", (1, 4))
    b.op("CALL_ONCE", [], [], ("CallOnceOptions", {"InitSubgraphIndex": 1}))
    hs = {name: variable_handle(b, name) for name in init}

    def read(name: str, shape: tuple[int, ...]) -> int:
        t = b.tensor(f"{name}_prev", shape)
        b.op("READ_VARIABLE", [hs[name]], [t])
        return t

    def binary(code: str, a: int, c: int, name: str, shape: tuple[int, ...] = (1, 4)) -> int:
        t = b.tensor(name, shape)
        b.op(code, [a, c], [t], (f"{code.capitalize()}Options", {}))
        return t

    ema = binary("ADD", binary("MUL", read("ema", (1, 4)), b.const("decay", np.float32([0.9])), "kept"),
                 binary("MUL", x, b.const("rate", np.float32([0.1])), "fresh"), "ema")
    b.op("ASSIGN_VARIABLE", [hs["ema"], ema], [])
    total = binary("ADD", read("total", (1, 4)), x, "total")
    b.op("ASSIGN_VARIABLE", [hs["total"], total], [])
    wx = b.tensor("wx", (1, HIDDEN))
    b.op("FULLY_CONNECTED", [x, b.const("w_in", (RNG.standard_normal((HIDDEN, 4)) * 0.5).astype(np.float32)),
                             b.const("b_in", (RNG.standard_normal(HIDDEN) * 0.1).astype(np.float32))], [wx],
         ("FullyConnectedOptions", {}))
    wh = b.tensor("wh", (1, HIDDEN))
    w_rec = (RNG.standard_normal((HIDDEN, h_width)) * 0.4).astype(np.float32)
    b.op("FULLY_CONNECTED", [read("h", (1, h_width)), b.const("w_rec", w_rec)], [wh],
         ("FullyConnectedOptions", {}))
    pre = b.tensor("pre", (1, HIDDEN))
    b.op("ADD", [wx, wh], [pre], ("AddOptions", {}))
    h = b.tensor("y", (1, HIDDEN))
    b.op("TANH", [pre], [h])
    b.op("ASSIGN_VARIABLE", [hs["h"], h], [])
    scaled = binary("MUL", ema, read("gain", (1, 4)), "scaled_ema")
    return b.build([x], [h, scaled, total], subgraphs=((first, [], []),))
