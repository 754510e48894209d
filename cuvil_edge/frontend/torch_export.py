"""PyTorch modules in: exported to ONNX inside the process, then imported like any ONNX file.

Two exporters, tried in turn as Optimum does: torch's dynamo exporter (``torch.export`` then ONNX), then
the TorchScript one (tracing). A module counts as exported when its ONNX imports here; when every
exporter fails (to export, or to give a graph this importer takes) the error names each exporter and why.
Shapes are static, fixed by the example inputs: what the compiler builds for. torch is the ``torch``
extra and is imported only here (the device side never needs it).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from ..errors import CuvilError, ExportError, MissingPretrainedFile, PretrainedError, ToolchainError

if TYPE_CHECKING:
    import onnx

log = logging.getLogger(__name__)
#: exporter names, in the order ``auto`` tries them
EXPORTERS = ("dynamo", "torchscript")
#: the TorchScript exporter's opset (the dynamo one picks its own, 18 or later)
TORCHSCRIPT_OPSET = 17


def require_torch() -> Any:
    """The torch module, or ``ToolchainError`` naming the extra that installs it."""
    try:
        import torch
    except ImportError:
        raise ToolchainError("PyTorch is not installed: pip install 'cuvil-edge[torch]' (the CPU wheel "
                             "torch==2.13.0 is enough)") from None
    return torch


def _as_args(example_inputs: Any) -> tuple[Any, ...]:
    return tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)


def export_once(module: Any, args: tuple[Any, ...], exporter: str, input_names: Sequence[str] | None,
                output_names: Sequence[str] | None) -> onnx.ModelProto:
    """One exporter's ONNX of ``module`` at ``args``, its own exceptions unwrapped (``export_onnx`` tries
    them in turn)."""
    import onnx

    torch = require_torch()
    names = {"input_names": list(input_names) if input_names else None,
             "output_names": list(output_names) if output_names else None}
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # deprecation and tracer warnings: the outcome is checked below
        if exporter == "dynamo":
            program = torch.onnx.export(module, args, dynamo=True, verbose=False, **names)
            return program.model_proto
        buffer = io.BytesIO()
        torch.onnx.export(module, args, buffer, dynamo=False, opset_version=TORCHSCRIPT_OPSET, **names)
        return onnx.load_from_string(buffer.getvalue())


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def export_onnx(module: Any, example_inputs: Any, exporter: str = "auto",
                input_names: Sequence[str] | None = None, output_names: Sequence[str] | None = None,
                ) -> onnx.ModelProto:
    """``module`` (in eval mode) exported at ``example_inputs``' shapes: the first export this importer
    takes. ``exporter``: ``auto`` (dynamo, then TorchScript), ``dynamo`` or ``torchscript``."""
    from .onnx import import_onnx

    if exporter not in ("auto", *EXPORTERS):
        raise ExportError(f"unknown exporter {exporter!r}: auto, {', '.join(EXPORTERS)}")
    torch = require_torch()
    if isinstance(module, torch.nn.Module) and module.training:
        raise ExportError("the module is in training mode (dropout, batch statistics): call .eval() first")
    args = _as_args(example_inputs)
    failures = []
    for kind in EXPORTERS if exporter == "auto" else (exporter,):
        try:
            proto = export_once(module, args, kind, input_names, output_names)
        except Exception as exc:  # noqa: BLE001 (exporters raise anything; each one's reason is reported)
            failures.append(f"{kind} exporter: {_first_line(exc)}")
            continue
        try:  # a graph this importer refuses tries the next exporter
            import_onnx(proto)
        except CuvilError as exc:
            failures.append(f"{kind} export does not import: {_first_line(exc)}")
            continue
        log.info("%s exported with the %s exporter", type(module).__name__, kind)
        return proto
    raise ExportError(f"{type(module).__name__} could not be exported and imported: " + "; ".join(failures))


#: a Hugging Face directory's PyTorch weights, in the order transformers prefers them; each may instead be
#: sharded, its ``<name>.index.json`` mapping tensor names to shard files
PYTORCH_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
#: task -> (transformers auto class, the output exported)
_HEADS = {"text-classification": ("AutoModelForSequenceClassification", "logits"),
          "token-classification": ("AutoModelForTokenClassification", "logits"),
          "sentence-embeddings": ("AutoModel", "last_hidden_state"),
          "image-classification": ("AutoModelForImageClassification", "logits")}


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def shard_names(index: Path) -> list[str]:
    """The shard files a sharded checkpoint's ``index`` names (its ``weight_map`` values), each a relative
    path kept inside the index's directory: a shard named ``../x`` or ``/x`` would have transformers read
    (and the hub client fetch) a file outside the model, so it is refused, not followed."""
    try:
        weight_map = json.loads(index.read_bytes()).get("weight_map")
    except (ValueError, AttributeError):
        weight_map = None
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(name, str) for name in weight_map.values()):
        raise PretrainedError(f"{index} is not a sharded checkpoint's index: no weight_map of tensor names "
                              "to shard file names")
    names = sorted(set(weight_map.values()))
    for name in names:
        parts = PurePosixPath(name).parts
        if "\\" in name or not parts or parts[0] == "/" or ".." in parts:
            raise PretrainedError(f"{index} names shard {name!r}, not a file inside {index.parent}: refused")
    return names


def pytorch_weights(directory: Path) -> list[Path]:
    """The files holding ``directory``'s PyTorch weights, as transformers picks them (``PYTORCH_WEIGHTS``
    in order, each whole or else sharded: then its index and every shard it names), or [] where there are
    none. A shard the index names but the directory lacks is ``MissingPretrainedFile`` naming both, rather
    than transformers' traceback halfway through loading."""
    for name in PYTORCH_WEIGHTS:
        if (directory / name).is_file():
            return [directory / name]
        index = directory / f"{name}.index.json"
        if index.is_file():
            shards = shard_names(index)
            missing = [shard for shard in shards if not (directory / shard).is_file()]
            if missing:
                raise MissingPretrainedFile(f"{index} names {len(missing)} shard(s) that {directory} lacks: "
                                            f"{', '.join(missing)}")
            return [index, *(directory / shard for shard in shards)]
    return []


def export_pretrained(directory: Path, task: str, shapes: Mapping[str, Sequence[int]]) -> Path:
    """A Hugging Face directory with PyTorch weights only, exported with its task's head
    (``AutoModelFor...`` from config.json) at ``shapes`` (input name -> static shape; int64 token inputs,
    float pixels) and kept under the cache (``<CUVIL_CACHE_DIR>/exports/<key>/model.onnx``, the key a
    digest of config.json, the weights, task, shapes and the torch and transformers versions), so a second
    ``from_pretrained`` reuses it."""
    from ..buildcache import default_build_cache_dir

    if task not in _HEADS:
        raise ExportError(f"{directory}: exporting a {task} model from PyTorch weights is not supported "
                          "here; export it to ONNX first (optimum-cli export onnx)")
    torch = require_torch()
    try:
        import transformers
    except ImportError:
        raise ToolchainError("transformers is not installed: pip install 'cuvil-edge[torch]'") from None
    weights = [_file_sha256(path) for path in pytorch_weights(directory)]
    key = hashlib.sha256(json.dumps({
        "config": hashlib.sha256((directory / "config.json").read_bytes()).hexdigest(),
        "weights": weights, "task": task, "shapes": {k: list(v) for k, v in shapes.items()},
        "torch": torch.__version__, "transformers": transformers.__version__, "exporters": EXPORTERS,
    }, sort_keys=True).encode()).hexdigest()[:32]
    out = default_build_cache_dir().parent / "exports" / key / "model.onnx"
    if out.is_file():
        return out
    auto_class, output = _HEADS[task]
    try:
        model = getattr(transformers, auto_class).from_pretrained(directory).eval()
    except (OSError, ValueError, KeyError) as exc:
        raise ExportError(f"{directory}: transformers cannot load it as {auto_class}: {exc}") from None
    names = list(shapes)

    class Head(torch.nn.Module):
        """The model called by input names, returning the one output the task reads."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: Any) -> Any:
            return getattr(self.model(**dict(zip(names, inputs)), return_dict=True), output)

    args = tuple(torch.zeros(tuple(shape), dtype=torch.float32 if name == "pixel_values" else torch.int64)
                 for name, shape in shapes.items())
    if "attention_mask" in shapes:  # a mask of ones: zeros would mask every token out while tracing
        args = tuple(torch.ones_like(a) if n == "attention_mask" else a for n, a in zip(names, args))
    proto = export_onnx(Head().eval(), args, "auto", names, [output])
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_bytes(proto.SerializeToString())
    os.replace(temporary, out)
    return out
