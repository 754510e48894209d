"""The architectures people export, as the exporters write them: tiny random-weight Hugging Face models
built here from configs (no hub), each exported by torch's dynamo exporter and by the TorchScript one,
then built and run against onnxruntime on the same ONNX file and the same seeded inputs.

A cell (architecture x exporter) is one of
- ``pass``: fp32 within 1e-4 relative of onnxruntime, and int8 (dynamic) keeping the argmax of every
  row of the first output: plain int8 first; where that changes an argmax, int8 as a user who needs the
  argmax builds it, ``accuracy_budget=0`` measured on ``CALIBRATION`` other seeded inputs (the checked
  inputs stay held out), and the cell says how many layers that kept in float;
- ``export``: the exporter itself failed (not ours to fix; its first line is kept);
- ``refused``: a ``CuvilError`` at import or build (an unsupported op or dtype, named with the node);
- ``int8``: fp32 passes, int8 changes an argmax;
- ``wrong``: fp32 runs and differs; ``crash``: any other exception (a bug).

    python -m tests.conformance.exporter_sweep [--jobs J] [--json out.json] [--markdown] [ARCH ...]

``--update`` records the passing cells in ``exporter_sweep_passing.txt`` (the list only grows:
``test_exporter_sweep.py`` holds every listed cell to it).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

PASSING_FILE = Path(__file__).with_name("exporter_sweep_passing.txt")
EXPORTERS = ("dynamo", "torchscript")
RTOL = 1e-4
SEQ, IMAGE = 16, 32
CALIBRATION = 8
#: text encoders: the common small config, per model type (vocabulary, widths, layers kept tiny)
_TEXT = dict(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=64, num_labels=3)


def _text(model_type: str, **over: Any) -> tuple[str, dict[str, Any], str]:
    return model_type, {**_TEXT, **over}, "AutoModelForSequenceClassification"


def _vision(model_type: str, **config: Any) -> tuple[str, dict[str, Any], str]:
    return model_type, {"num_labels": 3, "image_size": IMAGE, **config}, "AutoModelForImageClassification"


#: architecture -> (model type, config, auto class); inputs follow from the auto class
ARCHITECTURES: dict[str, tuple[str, dict[str, Any], str]] = {
    "bert": _text("bert"),
    "distilbert": ("distilbert", dict(vocab_size=128, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                      max_position_embeddings=64, num_labels=3),
                   "AutoModelForSequenceClassification"),
    "roberta": _text("roberta", pad_token_id=1),
    "albert": _text("albert", embedding_size=16),
    "electra": _text("electra", embedding_size=16),
    "mobilebert": _text("mobilebert", embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16,
                        num_feedforward_networks=1),
    "deberta-v2": _text("deberta-v2", position_buckets=8, max_relative_positions=16),
    "xlm-roberta": _text("xlm-roberta", pad_token_id=1),
    "vit": _vision("vit", hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                   patch_size=8),
    "deit": ("deit", {"num_labels": 3, "image_size": IMAGE, "hidden_size": 32, "num_hidden_layers": 2,
                      "num_attention_heads": 2, "intermediate_size": 64, "patch_size": 8},
             "DeiTForImageClassification"),
    "mobilevit": _vision("mobilevit", hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
                         num_attention_heads=2, image_size=64),
    "convnext": _vision("convnext", hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1]),
    "resnet": _vision("resnet", embedding_size=8, hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1]),
    "efficientnet": _vision("efficientnet", width_coefficient=0.1, depth_coefficient=0.1, hidden_dim=128),
    "swin": _vision("swin", embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=2, patch_size=4),
    "whisper-encoder": ("whisper", dict(vocab_size=128, d_model=32, encoder_layers=2, decoder_layers=1,
                                        encoder_attention_heads=2, decoder_attention_heads=2,
                                        encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
                                        max_source_positions=16, max_target_positions=16, pad_token_id=0,
                                        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1),
                        "encoder"),
    "wav2vec2": ("wav2vec2", dict(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, conv_dim=[16, 16], conv_stride=[5, 4],
                                  conv_kernel=[10, 4], num_conv_pos_embeddings=16,
                                  num_conv_pos_embedding_groups=2, num_labels=3, do_stable_layer_norm=True),
                 "AutoModelForAudioClassification"),
    "clip-text": ("clip_text_model", dict(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                                          num_attention_heads=2, intermediate_size=64,
                                          max_position_embeddings=64), "CLIPTextModel"),
    "clip-vision": ("clip_vision_model", dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                              intermediate_size=64, image_size=IMAGE, patch_size=8),
                    "CLIPVisionModel"),
    "t5-encoder": ("t5", dict(vocab_size=128, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2),
                   "T5EncoderModel"),
    "gpt2": ("gpt2", dict(vocab_size=128, n_embd=32, n_layer=2, n_head=2, n_positions=64),
             "AutoModelForCausalLM"),
    "llama": ("llama", dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64),
              "AutoModelForCausalLM"),
}


def _model(arch: str) -> tuple[Any, dict[str, Any], list[str]]:
    """(seeded torch module returning one tensor, example inputs by name, output name)."""
    import torch
    import transformers

    model_type, config_kw, auto = ARCHITECTURES[arch]
    config = transformers.AutoConfig.for_model(model_type, **config_kw)
    torch.manual_seed(0)
    if auto == "encoder":  # Whisper's encoder alone (the decoder needs a cache loop)
        inner = transformers.WhisperModel(config).get_encoder()
    elif auto.startswith("Auto"):
        inner = getattr(transformers, auto).from_config(config)
    else:
        inner = getattr(transformers, auto)(config)
    inner.eval()
    gen = torch.Generator().manual_seed(1)
    if auto in ("AutoModelForImageClassification", "CLIPVisionModel", "DeiTForImageClassification"):
        size = config_kw.get("image_size", IMAGE)
        feeds = {"pixel_values": torch.randn(1, 3, size, size, generator=gen)}
    elif auto == "AutoModelForAudioClassification":
        feeds = {"input_values": torch.randn(1, 1600, generator=gen)}
    elif auto == "encoder":
        feeds = {"input_features": torch.randn(1, 16, 32, generator=gen)}
    else:
        ids = torch.randint(3, config_kw["vocab_size"], (1, SEQ), generator=gen)
        mask = torch.ones(1, SEQ, dtype=torch.int64)
        mask[0, SEQ - 4:] = 0  # padding, so the mask path is exercised
        feeds = {"input_ids": ids} if auto in ("T5EncoderModel", "CLIPTextModel") else \
            {"input_ids": ids, "attention_mask": mask}
    output = "logits" if "logits" in type(inner(**feeds)).__dataclass_fields__ else "last_hidden_state"
    names = list(feeds)

    class One(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *inputs: Any) -> Any:
            kw = dict(zip(names, inputs))
            if auto == "AutoModelForCausalLM":
                kw["use_cache"] = False
            return getattr(self.inner(**kw, return_dict=True), output)

    return One().eval(), feeds, [output]


def _calibration(feeds: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """``CALIBRATION`` seeded inputs other than ``feeds``: new token ids (the same mask), new signals."""
    rng = np.random.default_rng(2)

    def other(name: str, value: np.ndarray) -> np.ndarray:
        if name == "input_ids":
            return rng.integers(3, int(value.max()) + 1, value.shape).astype(value.dtype)
        if value.dtype.kind == "f":
            return rng.standard_normal(value.shape).astype(value.dtype)
        return value

    return [{k: other(k, v) for k, v in feeds.items()} for _ in range(CALIBRATION)]


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"


def run_cell(arch: str, exporter: str) -> tuple[str, str]:
    """(outcome, detail) of one architecture through one exporter."""
    from cuvil_edge import CuvilError, CuvilModel, Target
    from cuvil_edge.frontend.torch_export import export_once
    from cuvil_edge.oracle import ort_session

    warnings.simplefilter("ignore")
    try:
        module, feeds, outputs = _model(arch)
        args = tuple(feeds.values())
        try:
            proto = export_once(module, args, exporter, list(feeds), outputs)
        except Exception as exc:  # noqa: BLE001 (the exporter's own failure, whatever it raises)
            return "export", _first_line(exc)
        numpy_feeds = {k: v.numpy() for k, v in feeds.items()}
        want = ort_session(proto).run(None, numpy_feeds)[0]
        try:
            fp32 = CuvilModel.load(proto).optimize(targets=[Target()])
            got = fp32.predict(numpy_feeds)[outputs[0]]
        except CuvilError as exc:
            return "refused", _first_line(exc)
        if got.shape != want.shape:
            return "wrong", f"shape {got.shape} vs {want.shape}"
        scale = max(float(np.abs(want).max()), 1e-30)
        if not np.allclose(got, want, rtol=RTOL, atol=RTOL * scale):
            return "wrong", f"max error {np.abs(got - want).max() / scale:.2e} of the largest output"
        rows = lambda a: a.reshape(-1, a.shape[-1]).argmax(-1)  # noqa: E731
        try:
            int8 = CuvilModel.load(proto).optimize("int8-dynamic", targets=[Target()])
            q = int8.predict(numpy_feeds)[outputs[0]]
            if np.array_equal(rows(q), rows(want)):
                return "pass", ""
            top2 = np.sort(want.reshape(-1, want.shape[-1]), -1)[:, -2:]
            plain = (f"{int((rows(q) != rows(want)).sum())} of {len(rows(want))} argmaxes changed "
                     f"(logits off by {np.abs(q - want).max() / scale:.1%} of the largest; smallest "
                     f"fp32 top-2 gap {(top2[:, 1] - top2[:, 0]).min() / scale:.1e} of it)")
            int8 = CuvilModel.load(proto).optimize("int8-dynamic", targets=[Target()], accuracy_budget=0.0,
                                                   calibration=_calibration(numpy_feeds))
            q = int8.predict(numpy_feeds)[outputs[0]]
        except CuvilError as exc:
            return "refused", f"int8: {_first_line(exc)}"
        if not np.array_equal(rows(q), rows(want)):
            return "int8", f"{plain}; with accuracy_budget=0 still {int((rows(q) != rows(want)).sum())}"
        layers = int8.quantization.record["layers"]
        kept = sum(layer["choice"] != "int8" for layer in layers)
        return "pass", f"budget 0 kept {kept} of {len(layers)} layers float (plain int8: {plain})"
    except Exception as exc:  # noqa: BLE001 (a crash is an outcome the sweep reports)
        return "crash", _first_line(exc) + " | " + traceback.format_exc().strip().splitlines()[-3][:200]


def _worker(cell: tuple[str, str]) -> tuple[str, str, str, str]:
    return (*cell, *run_cell(*cell))


def sweep(archs: list[str], jobs: int, on_result: Callable[[tuple[str, str, str, str]], None] | None = None
          ) -> list[tuple[str, str, str, str]]:
    cells = [(a, e) for a in archs for e in EXPORTERS]
    results = []
    ctx = multiprocessing.get_context("spawn")  # a fresh torch per worker; a crash loses one cell
    with ctx.Pool(jobs, maxtasksperchild=4) as pool:
        for r in pool.imap_unordered(_worker, cells):
            results.append(r)
            if on_result:
                on_result(r)
    return sorted(results)


def passing() -> list[str]:
    if not PASSING_FILE.exists():
        return []
    lines = (ln.strip() for ln in PASSING_FILE.read_text().splitlines())
    return [ln for ln in lines if ln and not ln.startswith("#")]


def markdown(results: list[tuple[str, str, str, str]]) -> str:
    table = {(a, e): (o, d) for a, e, o, d in results}
    rows = ["| architecture | dynamo | TorchScript |", "|---|---|---|"]
    for arch in dict.fromkeys(a for a, *_ in results):
        cells = []
        for e in EXPORTERS:
            outcome, detail = table[(arch, e)]
            if outcome == "pass":
                cells.append(f"fp32 + int8 ({detail.split(' (')[0]})" if detail else "fp32 + int8")
            else:
                cells.append(f"{outcome}: {detail[:70]}")
        rows.append(f"| {arch} | {' | '.join(cells)} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.conformance.exporter_sweep",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("archs", nargs="*", choices=[[], *ARCHITECTURES])
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", action="store_true", help="print the table as markdown")
    ap.add_argument("--update", action="store_true", help=f"add the passing cells to {PASSING_FILE.name}")
    args = ap.parse_args(argv)
    archs = args.archs or list(ARCHITECTURES)
    results = sweep(archs, args.jobs, lambda r: print(f"{r[0]:16s} {r[1]:12s} {r[2]:8s} {r[3]}", flush=True))
    ok = [f"{a} {e}" for a, e, o, _ in results if o == "pass"]
    print(f"{len(ok)} of {len(results)} cells pass")
    if args.markdown:
        print(markdown(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.update:
        kept = sorted(set(passing()) | set(ok))
        PASSING_FILE.write_text("# architecture exporter: cells that pass (python -m tests.conformance."
                                "exporter_sweep --update)\n" + "\n".join(kept) + "\n")
    return 1 if any(o == "crash" for _, _, o, _ in results) else 0


if __name__ == "__main__":
    sys.exit(main())
