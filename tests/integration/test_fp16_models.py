"""float16 exports of whole nets against onnxruntime running the same fp16 model.

The fp16 models are made the way many third-party fp16 exports are: onnxruntime's own
``convert_float_to_float16`` over our zoo nets (conv nets with BN, depthwise, Resize; a ViT and a BERT
encoder; LSTM and GRU sequence models; a detection head), with float16 inputs and outputs, or keeping
float32 ones (Casts at run time at both ends). fp16 rounding differs between the two runtimes (each op's
output is rounded to half here, as ONNX defines; onnxruntime's CPU provider drops some roundings between
ops it runs in f32), so outputs must agree within a few fp16 steps at the output's magnitude.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from cuvil_edge import CuvilModel, Target
from cuvil_edge.oracle import ort_session, random_inputs
from cuvil_edge.testing import zoo
from cuvil_edge.testing.zoo_transformers import (
    bert_encoder,
    bert_feeds,
    crnn,
    gru_kws,
    vit_encoder,
    yolo_head,
)

pytestmark = pytest.mark.integration

#: allowed difference in units of the fp16 spacing at the largest reference output
FP16_STEPS = 4
NETS = {
    "resnet": lambda: zoo.resnet(),
    "mobilenet": lambda: zoo.mobilenet(),
    "unet": lambda: zoo.unet(),
    "vit": lambda: vit_encoder(layers=2, image=64, patch=16, hidden=64, heads=2, mlp=128, classes=10),
    "bert": lambda: bert_encoder(layers=2, hidden=64, heads=2, ffn=128, seq=16, vocab=50),
    "crnn": crnn,
    "gru_kws": gru_kws,
    "yolo_head": yolo_head,
}


def fp16_export(net: str, keep_io_types: bool) -> onnx.ModelProto:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    return convert_float_to_float16(NETS[net](), keep_io_types=keep_io_types)


def feeds_for(net: str, model: onnx.ModelProto) -> dict[str, np.ndarray]:
    if net == "bert":
        return bert_feeds(seq=16, vocab=50)
    return next(iter(random_inputs(model, 1, seed=3)))


@pytest.mark.parametrize("keep_io_types", [False, True], ids=["fp16-io", "fp32-io"])
@pytest.mark.parametrize("net", sorted(NETS))
def test_fp16_export_matches_ort(net: str, keep_io_types: bool) -> None:
    model = fp16_export(net, keep_io_types)
    feeds = feeds_for(net, model)
    sess = ort_session(model)
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    with CuvilModel.load(model).optimize(targets=[Target()]) as cm:
        got = cm.predict(feeds)
        assert cm.graph.op_counts().get("round_f16", 0) > 0
    for name, ref in want.items():
        assert got[name].dtype == ref.dtype == (np.float32 if keep_io_types else np.float16), name
        ref32 = ref.astype(np.float32)
        step = 2.0 ** (np.floor(np.log2(np.abs(ref32).max())) - 10)
        np.testing.assert_allclose(got[name].astype(np.float32), ref32, rtol=0, atol=FP16_STEPS * step,
                                   err_msg=f"{net} {name}")
