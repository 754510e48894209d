"""The Open Inference Protocol (``cuvil_agent.oip``) for stored element types and TFLite tensor aliases,
through its request and response layer with real compiled models, and once over HTTP to a real server.

Stored types: an ONNX graph with bfloat16, float8 e4m3fn, int4 and float4 inputs and bfloat16, float8
e5m2, int4 and float4 outputs; the oracle is ONNX's reference implementation on the same seeded inputs
(onnxruntime's Python binding neither takes nor gives most of these types). bfloat16 travels as BF16 (JSON
numbers, which the server rounds as ml_dtypes does), int4 as INT8 values, float8/float4 as UINT8 bit
patterns declared by ``parameters.element_type``; a UINT8 tensor without that declaration, an FP8 datatype
and values past a type's range are refused by name. Aliases: a TFLite RELU whose tensors answer to their
signature key and their tensor name, against LiteRT."""

from __future__ import annotations

import http.client
import json
import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from cuvil_agent import oip
from cuvil_agent.config import HttpSettings
from cuvil_agent.http_api import HttpApiServer
from cuvil_agent.serve import ModelHost, ModelRegistry
from cuvil_edge import CuvilModel
from cuvil_edge.signing import Keyring, build_bundle
from ota import Installer
from ota.errors import BadInferenceRequest
from ota.golden import encode_vector
from runtime_wasm.spec import TensorSpec
from tests.support.tflite_builder import TfliteBuilder
from tests.support.tflite_builtins import litert

TP = TensorProto
SHAPE = (2, 4)
RNG = np.random.default_rng(11)
#: seeded inputs, drawn in float32 and rounded by ml_dtypes (the bfloat16 ones are sent as those float32s:
#: the server's rounding must give ml_dtypes' bits)
FLOATS = (RNG.standard_normal(SHAPE) * 4).astype(np.float32)
FEEDS = {"xb": FLOATS.astype(ml_dtypes.bfloat16),
         "xf": (RNG.standard_normal(SHAPE) * 8).astype(np.float32).astype(ml_dtypes.float8_e4m3fn),
         "xi": RNG.integers(-8, 8, SHAPE).astype(ml_dtypes.int4),
         "xp": RNG.choice([-6.0, -1.5, 0.0, 0.5, 2.0, 4.0], SHAPE).astype(ml_dtypes.float4_e2m1fn)}
OUT_TYPES = {"yb": TP.BFLOAT16, "yf": TP.FLOAT8E5M2, "yq": TP.INT4, "yp": TP.FLOAT4E2M1}
HW = "test-device"


def stored_onnx() -> Any:
    """s = xb + xf + xi + xp in float32; yb, yf, yp: s cast to bfloat16, float8 e5m2 and float4;
    yq: s quantized to int4 (scale 2, zero point 1)."""
    n = helper.make_node
    nodes = [*(n("Cast", [k], [k + "32"], to=TP.FLOAT) for k in FEEDS),
             n("Sum", [k + "32" for k in FEEDS], ["s"]), n("QuantizeLinear", ["s", "sc", "zp"], ["yq"]),
             *(n("Cast", ["s"], [k], to=t) for k, t in OUT_TYPES.items() if k != "yq")]
    inits = [helper.make_tensor("sc", TP.FLOAT, [], [2.0]), helper.make_tensor("zp", TP.INT4, [], [1])]
    typed = {k: helper.np_dtype_to_tensor_dtype(v.dtype) for k, v in FEEDS.items()} | OUT_TYPES
    inputs, outputs = ([helper.make_tensor_value_info(k, typed[k], SHAPE) for k in names]
                       for names in (FEEDS, OUT_TYPES))
    graph = helper.make_graph(nodes, "stored", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])


def named_tflite() -> bytes:
    """One RELU whose tensors are named as a TF converter names them, the signature as Keras does."""
    b = TfliteBuilder()
    x = b.tensor("serving_default_input_1:0", SHAPE)
    y = b.tensor("StatefulPartitionedCall:0", SHAPE)
    b.op("RELU", [x], [y])
    return b.build([x], [y], signature_names={x: "input_1", y: "output_0"})


@pytest.fixture(scope="module")
def stored() -> CuvilModel:
    return CuvilModel.load(stored_onnx()).optimize()


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    return dict(zip(OUT_TYPES, ReferenceEvaluator(stored_onnx()).run(None, FEEDS)))


@pytest.fixture(scope="module")
def named() -> CuvilModel:
    return CuvilModel.load(named_tflite())


def signatures(model: CuvilModel) -> list[oip.Signature]:
    return [oip.Signature(model.spec.inputs, model.spec.outputs)]


def round_trip(model: CuvilModel, doc: dict[str, Any], binary: bytes = b"") -> tuple[dict, dict]:
    """A request body through the server's side (parse, run, encode) and the client's (decode): the
    response document and the decoded outputs."""
    body, header = oip.join_body(doc, binary)
    request = oip.parse_infer_request(body, None if header is None else str(header), signatures(model))
    reply, reply_header = oip.encode_infer_response("m", "1", request, model.predict(request.inputs))
    doc, outputs = oip.decode_outputs(reply, None if reply_header is None else str(reply_header))
    return doc, outputs


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Same type, shape and bits."""
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def json_inputs() -> list[dict[str, Any]]:
    """The inputs as a client writes them by hand: BF16 numbers, float8/float4 bit patterns declared,
    int4 values."""
    bits = {k: FEEDS[k].view(np.uint8).ravel().tolist() for k in ("xf", "xp")}
    return [{"name": "xb", "datatype": "BF16", "shape": list(SHAPE), "data": FLOATS.tolist()},
            *({"name": k, "datatype": "UINT8", "shape": list(SHAPE), "data": v,
               "parameters": {"element_type": FEEDS[k].dtype.name}} for k, v in bits.items()),
            {"name": "xi", "datatype": "INT8", "shape": list(SHAPE), "data": FEEDS["xi"].tolist()}]


# -- stored types ---------------------------------------------------------------------------------------
def test_metadata_names_each_stored_type(stored: CuvilModel) -> None:
    meta = {t.name: oip.tensor_metadata(t) for t in (*stored.spec.inputs, *stored.spec.outputs)}
    assert meta["xb"] == {"name": "xb", "datatype": "BF16", "shape": [2, 4]}
    assert meta["xf"]["datatype"] == "UINT8" and meta["xf"]["parameters"] == {"element_type": "float8_e4m3fn"}
    assert meta["xi"]["datatype"] == "INT8" and meta["xi"]["parameters"] == {"element_type": "int4"}
    assert meta["yp"]["datatype"] == "UINT8" and meta["yp"]["parameters"] == {"element_type": "float4_e2m1fn"}


def test_json_stored_types_match_onnx_reference(stored, reference) -> None:
    doc, outputs = round_trip(stored, {"inputs": json_inputs()})
    items = {o["name"]: o for o in doc["outputs"]}
    assert [o["name"] for o in doc["outputs"]] == list(OUT_TYPES)
    # what any client reads: BF16 numbers, INT8 values, UINT8 bit patterns with their declared type
    assert items["yb"]["datatype"] == "BF16" and "parameters" not in items["yb"]
    np.testing.assert_array_equal(np.float32(items["yb"]["data"]), reference["yb"].astype(np.float32).ravel())
    assert items["yq"]["datatype"] == "INT8" and items["yq"]["data"] == reference["yq"].ravel().tolist()
    for k in ("yf", "yp"):
        assert items[k]["datatype"] == "UINT8"
        assert items[k]["parameters"] == {"element_type": reference[k].dtype.name}
        assert items[k]["data"] == reference[k].view(np.uint8).ravel().tolist()
    for k, want in reference.items():  # our client: ml_dtypes arrays again
        assert_same(outputs[k], want)


def test_binary_stored_types_match_onnx_reference(stored, reference) -> None:
    """The binary extension both ways, sent by our client's encoder from ml_dtypes arrays."""
    items, blob = oip.encode_tensors([(k, v, True) for k, v in FEEDS.items()])
    assert [i["datatype"] for i in items] == ["BF16", "UINT8", "INT8", "UINT8"]
    assert blob[:2 * FLOATS.size] == FEEDS["xb"].view(np.uint16).astype("<u2").tobytes()  # Triton's BF16
    doc, outputs = round_trip(stored, {"inputs": items, "parameters": {"binary_data_output": True}}, blob)
    assert all("binary_data_size" in o["parameters"] for o in doc["outputs"])
    for k, want in reference.items():
        assert_same(outputs[k], want)


def test_bfloat16_json_rounds_to_nearest_even_as_ml_dtypes() -> None:
    t = oip.Signature((TensorSpec("b", "bfloat16", (12,), 0),), ())
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8 + 2**-20), 3.4e38, -3.4e38, 1e-40, -0.0, np.inf,
                  -np.inf, 0.1, 65504.0, -2.0], np.float32)
    body = json.dumps({"inputs": [{"name": "b", "datatype": "BF16", "shape": [12], "data": x.tolist()}]})
    got = oip.parse_infer_request(body.encode(), None, [t]).inputs["b"]
    np.testing.assert_array_equal(got, x.astype(ml_dtypes.bfloat16).view(np.uint16))
    nan = body.replace(json.dumps(x.tolist()), json.dumps([float("nan")] * 12))  # JSON's NaN has no sign
    got = oip.parse_infer_request(nan.encode(), None, [t]).inputs["b"]
    assert np.isnan(got.view(ml_dtypes.bfloat16)).all()


def _with(name: str, **changes: Any) -> bytes:
    """The hand-written request with input ``name`` changed (a field set to None: left out)."""
    items = [{k: v for k, v in (i | changes).items() if v is not None} if i["name"] == name else i
             for i in json_inputs()]
    return json.dumps({"inputs": items}).encode()


@pytest.mark.parametrize(("body", "words"), [
    (_with("xf", parameters=None), "UINT8 bit patterns of float8_e4m3fn with parameters.element_type "
                                   "'float8_e4m3fn' (the protocol has no datatype for it), got "
                                   "parameters.element_type None"),
    (_with("xf", parameters={"element_type": "float8_e5m2"}), "got parameters.element_type 'float8_e5m2'"),
    (_with("xf", datatype="FP8"), "got datatype 'FP8'"),
    (_with("xb", datatype="FP32"), "input 'xb' is BF16, got datatype 'FP32'"),
    (_with("xb", data=["1.0"] * 8), "must hold BF16 values"),
    (_with("xi", data=[8] + [0] * 7), "input 'xi' is int4: values must be in [-8, 7], got 0..8"),
    (_with("xi", parameters={"element_type": "uint4"}), "is INT8 (int4 values), got parameters.element_type"),
    (_with("xp", data=[16] + [0] * 7), "input 'xp' is float4_e2m1fn: values must be in [0, 15]"),
    (_with("xb", data=None, parameters={"binary_data_size": 8}), "binary_data_size 8 != 16 bytes"),
])
def test_stored_types_sent_wrong_are_refused_by_name(stored, body: bytes, words: str) -> None:
    with pytest.raises(BadInferenceRequest, match=re.escape(words)):
        oip.parse_infer_request(body, None, signatures(stored))


def test_a_reply_declaring_a_foreign_element_type_is_refused() -> None:
    """The client reads a hostile server's reply as typed as a request."""
    reply = {"outputs": [{"name": "y", "datatype": "UINT8", "shape": [1], "data": [3],
                          "parameters": {"element_type": "float8_e4m3fx"}}]}
    with pytest.raises(BadInferenceRequest, match="got parameters.element_type 'float8_e4m3fx'"):
        oip.decode_outputs(json.dumps(reply).encode(), None)
    reply["outputs"][0]["parameters"] = {"element_type": "int2"}  # int2 travels as INT8, not UINT8
    with pytest.raises(BadInferenceRequest, match="got parameters.element_type 'int2'"):
        oip.decode_outputs(json.dumps(reply).encode(), None)


# -- TFLite aliases -------------------------------------------------------------------------------------
def alias_doc(input_name: str, **extra: Any) -> dict[str, Any]:
    x = {"name": input_name, "datatype": "FP32", "shape": list(SHAPE), "data": FLOATS.tolist()}
    return {"inputs": [x], **extra}


@pytest.mark.parametrize("input_name", ["input_1", "serving_default_input_1:0"])
def test_either_name_goes_in_and_outputs_come_back_as_asked(named: CuvilModel, input_name: str) -> None:
    want = litert(named_tflite(), [FLOATS])["StatefulPartitionedCall:0"]
    doc, outputs = round_trip(named, alias_doc(input_name))
    assert list(outputs) == ["output_0"]  # by default: the canonical name
    np.testing.assert_array_equal(outputs["output_0"], want)
    asked = [{"name": "StatefulPartitionedCall:0"}, {"name": "output_0", "parameters": {"binary_data": True}}]
    doc, outputs = round_trip(named, alias_doc(input_name, outputs=asked))
    assert [o["name"] for o in doc["outputs"]] == ["StatefulPartitionedCall:0", "output_0"]
    for got in outputs.values():
        np.testing.assert_array_equal(got, want)


def test_aliases_in_metadata_and_in_refusals(named: CuvilModel) -> None:
    assert oip.tensor_metadata(named.spec.inputs[0]) == {
        "name": "input_1", "datatype": "FP32", "shape": [2, 4], "aliases": ["serving_default_input_1:0"]}
    assert oip.tensor_metadata(named.spec.outputs[0])["aliases"] == ["StatefulPartitionedCall:0"]
    both = alias_doc("input_1")
    both["inputs"].append(dict(both["inputs"][0], name="serving_default_input_1:0"))
    with pytest.raises(BadInferenceRequest, match=r"'input_1' \(or 'serving_default_in.*given twice"):
        oip.parse_infer_request(json.dumps(both).encode(), None, signatures(named))
    with pytest.raises(BadInferenceRequest, match=r"no input named 'x'; it takes \['input_1' \(or 'serving_"):
        oip.parse_infer_request(json.dumps(alias_doc("x")).encode(), None, signatures(named))
    with pytest.raises(BadInferenceRequest, match=r"no output named 'y'; it has \['output_0' \(or 'Stateful"):
        oip.parse_infer_request(json.dumps(alias_doc("input_1", outputs=[{"name": "y"}])).encode(), None,
                                signatures(named))


# -- over HTTP ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(stored, named, reference, tmp_path_factory):
    """Both models signed, installed and served in supervised workers on an ephemeral loopback port (the
    stored one's golden vector given: the host's ``random_feeds`` draws no stored types)."""
    base = tmp_path_factory.mktemp("oip")
    ring = Keyring.init(base / "keys", root_keys=1, root_threshold=1, release_keys=1, release_threshold=1)
    registry, hosts = ModelRegistry(), []
    for name, model, golden in (("stored", stored, [encode_vector(FEEDS, reference)]),
                                ("named", named, None)):
        build_bundle(model.save(base / name), base / f"{name}.cvb", ring.release_keys(), version="1.0.0",
                     release=1, hardware_ids=[HW], golden=golden)
        Installer(base / f"{name}-state", HW, root=ring.root_envelope()).install(base / f"{name}.cvb")
        hosts.append(ModelHost(Installer(base / f"{name}-state", HW), name=name))
        registry.add(hosts[-1])
    server = HttpApiServer(registry, HttpSettings(port=0))
    yield server.address
    server.close()
    for host in hosts:
        host.close()


def call(address: tuple[str, int], method: str, path: str, doc: Any = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection(*address, timeout=60)
    try:
        conn.request(method, path, None if doc is None else json.dumps(doc).encode())
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def test_over_http(served, reference) -> None:
    status, meta = call(served, "GET", "/v2/models/stored")
    assert status == 200 and meta["inputs"][1]["parameters"] == {"element_type": "float8_e4m3fn"}
    status, doc = call(served, "POST", "/v2/models/stored/infer", {"inputs": json_inputs()})
    assert status == 200, doc
    items = {o["name"]: o for o in doc["outputs"]}
    assert items["yf"]["data"] == reference["yf"].view(np.uint8).ravel().tolist()
    np.testing.assert_array_equal(np.float32(items["yb"]["data"]), reference["yb"].astype(np.float32).ravel())
    status, doc = call(served, "POST", "/v2/models/stored/infer", json.loads(_with("xf", parameters=None)))
    assert status == 400 and doc["type"] == "BadInferenceRequest" and "float8_e4m3fn" in doc["error"]
    status, meta = call(served, "GET", "/v2/models/named")
    assert meta["inputs"][0]["aliases"] == ["serving_default_input_1:0"]
    asked = [{"name": "StatefulPartitionedCall:0"}]
    status, doc = call(served, "POST", "/v2/models/named/infer",
                       alias_doc("serving_default_input_1:0", outputs=asked))
    assert status == 200 and doc["outputs"][0]["name"] == "StatefulPartitionedCall:0"
    np.testing.assert_array_equal(np.float32(doc["outputs"][0]["data"]).reshape(SHAPE), np.maximum(FLOATS, 0))
