"""TFLite import: models written in the test (``tflite_builder``, no TensorFlow) are compiled, run in
wasmtime and compared with LiteRT on the same inputs; NHWC is converted at import with no transpose
between ops; unsupported and malformed models fail with typed errors."""

from __future__ import annotations

import numpy as np
import pytest

from cuvil_edge import CuvilModel
from cuvil_edge.cli import main
from cuvil_edge.errors import ModelFormatError, UnsupportedOperator
from cuvil_edge.frontend.tflite import custom_converter, import_tflite, read_tflite
from cuvil_edge.frontend.tflite.registry import BUILTINS
from tests.support.tflite_builder import TfliteBuilder
from tests.support.tflite_builtins import litert
from tests.support.tflite_models import (
    RNG,
    S_LOGITS,
    cnn,
    fused_activations,
    int8_cnn,
    int8_pad_pool,
    matmul_slices,
    op_zoo,
    softmax_tail,
)


def check_against_litert(data: bytes, shapes: list[tuple[int, ...]]) -> CuvilModel:
    feeds = [RNG.standard_normal(s).astype(np.float32) for s in shapes]
    want = litert(data, feeds)
    model = CuvilModel.load(data)
    got = model.predict(feeds)
    assert sorted(got) == sorted(want)
    for name, ref in want.items():
        assert got[name].shape == ref.shape, name
        np.testing.assert_allclose(got[name], ref, atol=1e-4, rtol=1e-4, err_msg=name)
    return model


#: what may stand between a graph input/output and its transpose: int8 <-> held uint8 conversions, and
#: the reshape of a flattened output
BOUNDARY_OPS = ("cast", "quantize", "dequantize", "reshape")


def interior_transposes(model: CuvilModel) -> list[str]:
    """Transposes that neither read a graph input nor write a graph output (through the int8 <-> uint8
    conversions of a quantized model's boundary)."""
    g = model.graph
    producers, consumers = g.producers(), g.consumers()
    ends = {id(v) for v in (*g.inputs, *g.outputs)}

    def only_consumer(v):
        users = consumers.get(id(v), [])
        return users[0] if len(users) == 1 else None

    def boundary(v, upward: bool) -> bool:
        while id(v) not in ends:
            nxt = producers.get(id(v)) if upward else only_consumer(v)
            if nxt is None or nxt.op not in BOUNDARY_OPS:
                return False
            v = nxt.inputs[0] if upward else nxt.outputs[0]
        return True

    return [n.name for n in g.nodes if n.op == "transpose"
            and not boundary(n.inputs[0], True) and not boundary(n.outputs[0], False)]


def test_float_cnn_matches_litert_with_no_interior_transposes() -> None:
    model = check_against_litert(cnn(), [(1, 16, 16, 3)])
    assert interior_transposes(model) == []
    transposes = [n for n in model.graph.nodes if n.op == "transpose"]
    assert len(transposes) == 2  # image NHWC -> NCHW, features NCHW -> NHWC
    assert model.graph.op_counts()["conv"] == 3


def test_fp16_weights_dequantized_at_build_time() -> None:
    data = cnn(fp16_weights=True)
    model = check_against_litert(data, [(1, 16, 16, 3)])
    assert "dequantize" not in model.graph.op_counts()
    w = next(n.inputs[1] for n in model.graph.nodes if n.op == "conv")
    assert w.is_const and w.const.dtype == np.float32
    assert np.array_equal(w.const, w.const.astype(np.float16).astype(np.float32))  # fp16 values exactly


def test_batch_matmul_and_strided_slice_match_litert() -> None:
    model = check_against_litert(matmul_slices(), [(2, 4, 6), (2, 3, 6)])
    assert model.graph.op_counts()["matmul"] == 1  # the run-time pair; the constant side became a gemm


def test_cli_build_and_inspect_a_tflite_file(tmp_path, capsys) -> None:
    path = tmp_path / "cnn.tflite"
    path.write_bytes(cnn())
    out = tmp_path / "cnn.cuvil"
    assert main(["build", str(path), "-o", str(out), "--targets", "simd128-x86", "-q"]) == 0
    assert (out / "model.json").is_file()
    capsys.readouterr()
    assert main(["inspect", str(path)]) == 0
    report = capsys.readouterr().out
    assert "input  image: float32[1, 16, 16, 3]" in report
    assert "conv x3" in report
    assert "transpose x2" in report  # at the input and at the NHWC output only


def _one_op(code: str, custom: str | None = None) -> bytes:
    b = TfliteBuilder()
    x, y = b.tensor("x", (1, 4)), b.tensor("y", (1, 4))
    b.op(code, [x], [y], custom=custom)
    return b.build([x], [y])


def test_unsupported_builtin_names_op_code_and_index() -> None:
    with pytest.raises(UnsupportedOperator) as err:
        import_tflite(_one_op("SKIP_GRAM"))
    assert err.value.op_type == "SKIP_GRAM"
    assert err.value.node == "y"
    assert "builtin code 30, operator index 0" in str(err.value)


def test_custom_ops_fail_by_name_until_a_converter_is_registered() -> None:
    data = _one_op("CUSTOM", custom="CuvilTestTimesTwo")
    with pytest.raises(UnsupportedOperator, match="CuvilTestTimesTwo") as err:
        CuvilModel.load(data)
    assert err.value.op_type == "CUSTOM:CuvilTestTimesTwo"

    @custom_converter("CuvilTestTimesTwo")
    def times_two(ctx) -> None:
        x = ctx.laid(0)
        y = ctx.emit1("binary_f32", [x.value, ctx.constant(np.float32(2))], {"kind": "mul"})
        ctx.set_output(y, x.perm)

    x = RNG.standard_normal((1, 4)).astype(np.float32)
    assert np.allclose(CuvilModel.load(data).predict([x])["y"], 2 * x)


def test_truncated_file_is_a_model_format_error(tmp_path) -> None:
    data = cnn()
    path = tmp_path / "cut.tflite"
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ModelFormatError):
        CuvilModel.load(path)
    for cut in range(0, len(data), 97):  # wherever the file ends, the reader says so (no crash, no hang)
        with pytest.raises(ModelFormatError):
            import_tflite(data[:cut])


def test_non_tflite_file_with_tflite_suffix(tmp_path) -> None:
    path = tmp_path / "fake.tflite"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(ModelFormatError, match="TFL3"):
        CuvilModel.load(path)


def test_op_zoo_matches_litert_with_no_interior_transposes() -> None:
    model = check_against_litert(op_zoo(), [(1, 8, 8, 4)])
    assert interior_transposes(model) == []


def test_every_builtin_converter_is_checked_against_litert() -> None:
    """A converter joins the table only with a model above that runs it (a list that only grows). The
    support modules' models are checked against LiteRT in their own tests: test_pretrained and
    tests/unit/test_tflite_{builtins,rnn,more_builtins,stablehlo}.py."""
    from tests.support.pretrained import image_tflite, text_tflite
    from tests.support.tflite_builtins import builtin_models
    from tests.support.tflite_more_builtins import more_models
    from tests.support.tflite_rnn import rnn_models
    from tests.support.tflite_stablehlo import stablehlo_models
    from tests.support.tflite_stateful import streaming
    from tests.support.tflite_third_party import builder_models

    used = {op.op for data in (cnn(), cnn(fp16_weights=True), matmul_slices(), op_zoo(), int8_cnn(),
                               streaming(), *builder_models(), text_tflite(100), image_tflite(),
                               *builtin_models(), *rnn_models(), *more_models(),
                               *stablehlo_models())
            for sg in read_tflite(data).subgraphs for op in sg.operators}
    assert set(BUILTINS) - used == set()


def test_int8_per_channel_cnn_within_one_step_of_litert() -> None:
    """Each layer within one quantization step of LiteRT's on the same inputs: the conv stack and the
    logits on the image, the softmax tail on our logits (a one-step logit difference moves the
    probabilities by several steps, so comparing end to end would measure the amplification)."""
    data = int8_cnn()
    feeds = [RNG.integers(-128, 128, (1, 8, 8, 3), dtype=np.int8)]
    want = litert(data, feeds)
    model = CuvilModel.load(data)
    got = model.predict(feeds)
    assert got["probs"].dtype == np.uint8 and got["d1"].dtype == np.int8 and got["fc"].dtype == np.int8
    for name in ("d1", "fc"):
        diff = np.abs(got[name].astype(np.int32) - want[name].astype(np.int32))
        assert diff.max() <= 1, (name, diff.max())
    tail = TfliteBuilder()
    logits = tail.tensor("fc", (1, 10), "int8", ([S_LOGITS], [0], 0))
    ref_probs = litert(tail.build([logits], [softmax_tail(tail, logits)]), [got["fc"]])["probs"]
    assert np.abs(got["probs"].astype(np.int32) - ref_probs.astype(np.int32)).max() <= 1
    assert ref_probs.astype(np.int32).sum() > 200  # a real distribution, not all zeros
    counts = model.graph.op_counts()
    assert counts.get("qconv") == 2 and counts.get("qgemm") == 1  # on the integer kernels
    assert interior_transposes(model) == []  # the flatten before the FC re-lays the FC weights instead
    concat = next(n for n in model.graph.nodes if n.op == "concat")
    assert concat.outputs[0].type.dtype == "uint8"  # data movement moves the quantized bytes as they are


def test_inspect_shows_the_models_quantization(tmp_path, capsys) -> None:
    path = tmp_path / "int8.tflite"
    path.write_bytes(int8_cnn())
    assert main(["inspect", str(path)]) == 0
    report = capsys.readouterr().out
    # conv, depthwise and FC weights (int8) and biases (int32): all per-channel
    assert "9 quantized activations; 6 quantized constants (int32 x3, int8 x3), 6 per-channel, 0 per-tensor" \
        in report
    assert f"  input  image: int8 scale {np.float32(4 / 255):.6g} zero point 0" in report
    assert "  output probs: uint8 scale 0.00390625 zero point 0" in report
    assert f"  output d1: int8 scale {np.float32(8 / 255):.6g} zero point 3" in report
    float_path = tmp_path / "float.tflite"
    float_path.write_bytes(matmul_slices())
    assert main(["inspect", str(float_path)]) == 0
    assert "source quantization" not in capsys.readouterr().out  # a float model has none


def test_format_is_told_by_the_identifier_whatever_the_suffix(tmp_path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(matmul_slices())
    assert CuvilModel.load(path).graph.meta["source"] == "tflite"


def test_uint8_input_dequantized_at_run_time() -> None:
    b = TfliteBuilder()
    x = b.tensor("codes", (1, 16), "uint8", ([0.05], [128], 0))
    real = b.tensor("real", (1, 16))
    b.op("DEQUANTIZE", [x], [real])
    y = b.tensor("y", (1, 16))
    b.op("TANH", [real], [y])
    data = b.build([x], [y])
    codes = np.arange(0, 256, 16, dtype=np.uint8).reshape(1, 16)
    want = litert(data, [codes])["y"]
    got = CuvilModel.load(data).predict([codes])["y"]
    np.testing.assert_allclose(got, want, atol=1e-4)
    np.testing.assert_allclose(got, np.tanh((codes.astype(np.float32) - 128) * 0.05), atol=1e-4)


def test_int8_pad_and_max_pool_run_on_the_bytes_like_litert() -> None:
    """No dequantize -> float -> quantize round trip: PAD, PADV2 and MAX_POOL_2D run on the held uint8 (the
    u8 max pool kernel), bit-exact with LiteRT; the conv after a PAD stays on the integer kernels."""
    data = int8_pad_pool()
    feeds = [RNG.integers(-128, 128, (1, 9, 40, 4), dtype=np.int8)]
    want = litert(data, feeds)
    model = CuvilModel.load(data)
    got = model.predict(feeds)
    for name in ("wide", "same"):
        assert got[name].dtype == np.int8 and np.array_equal(got[name], want[name]), name
    assert np.abs(got["conv"].astype(np.int32) - want["conv"].astype(np.int32)).max() <= 1
    g = model.graph
    assert {n.inputs[0].type.dtype for n in g.nodes if n.op in ("pad", "pool")} == {"uint8"}
    assert g.op_counts()["qconv"] == 1 and "conv" not in g.op_counts()
    kernels = model.compiled.program.kernels_used
    assert {kernels[n.name] for n in g.nodes if n.op == "pool"} == {"u8-maxpool-s1-16", "u8-maxpool-s2-16"}


def test_fused_activations_match_litert() -> None:
    model = check_against_litert(fused_activations(), [(1, 6, 6, 4), (1, 6, 6, 4)])
    out = model.predict([RNG.standard_normal((1, 6, 6, 4)).astype(np.float32) for _ in range(2)])
    assert (out["max_pool_2d_5"] == 1).any() and (out["transpose_conv_7"] == 0).any()  # the clips bite
