"""``CuvilModel``: load -> optimize -> predict / save, the host-side Python API."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from device_profiles import available_profiles, load_profile
from runtime_wasm import InferenceInputError, ModelSpec, RuntimeWasmError, WasmModel
from runtime_wasm.engine import TIER_SIMD128
from runtime_wasm.errors import ProcessingError, SpecError
from runtime_wasm.loader import SPEC_FILE, WEIGHTS_FILE
from runtime_wasm.processing import AudioWindow, ProcessingConfig, Processor, Result

from .buildcache import (
    BuildCache,
    DeferredFile,
    DeferredFileError,
    build_key,
    compiler_identity,
    data_digest,
    file_state,
)
from .codegen.emit import DEFAULT_THREADS
from .codegen.memplan import graph_states, user_io
from .codegen.toolchain import ALL_TARGETS, Target
from .compiler import CompiledModel, compile_graph, index_bounds, optimize_graph
from .errors import InputError, ModelFormatError, QuantizationError, TargetError, VocabularyMismatch
from .here import host_target, instantiate_here
from .ir.graph import Graph
from .quant import QuantResult, check_precision, quantize
from .sequences import SEQUENCES, flat_feeds, grouped_outputs, shape_record


class CuvilModel:
    """A model on its way to the edge: imported graph, optimized IR, compiled modules, a live instance.

    ``optimize`` looks its build up in the build cache (``cuvil_edge.buildcache``) first. On a hit only
    what ``predict`` and ``save`` need is loaded (spec, modules, weights); the host's view (``graph``,
    ``compiled``, ``quantization``) is rebuilt on first access, so a process that only predicts never
    runs the passes, calibrates or compiles."""

    def __init__(self, graph: Graph | Callable[[], Graph], source_digest: str | None = None,
                 stateful: bool | None = None) -> None:
        """``source_digest`` identifies the imported model (bytes, input shapes, name) for the build
        cache; None: its builds are not cached. ``graph`` may be the import still to run (``load`` on a
        source known to import: ``_import_known``), with ``stateful`` what it will say about states."""
        self._graph_or_import = graph
        self._stateful = stateful
        self._source_digest = source_digest
        #: what ``load`` read (the model's sha256, the import options): the start of the build record
        self._source: dict[str, Any] = {"model_sha256": None}
        self._compiled: CompiledModel | None = None
        self._quantization: QuantResult | None = None
        self._artifact: Artifact | None = None
        self._pending: Callable[[], None] | None = None  # rebuilds the host view after a cache hit
        self._cache_entry: tuple[BuildCache, str] | None = None  # where the last optimize() looked
        self._instance: WasmModel | None = None
        self._optimized = False
        self.build_cache_hit = False
        #: texts or images in, typed results out (``from_pretrained``); None: tensors only
        self.processor: Processor | None = None
        #: threads ``predict`` runs on: 0 uses every available core (up to what the build supports, its
        #: ``max_threads``); outputs are bit-identical whatever the count. Set before the first predict.
        self.threads = 0
        #: determinism mode (``RuntimePolicy.deterministic`` on a device): ``predict`` runs the module and
        #: engine settings every host runs, so outputs are bit-identical across x86 and ARM. Set before
        #: the first predict.
        self.deterministic = False

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str] | bytes | Any,
             input_shapes: Mapping[str, Sequence[int]] | None = None,
             max_trip_count: Mapping[str, int] | None = None,
             max_string_bytes: int | None = None,
             bind: Mapping[str, Any] | None = None) -> CuvilModel:
        """Import an ONNX model (path, bytes or ModelProto) or a TFLite model (path or bytes); input shapes
        fix dynamic dims, and ``max_trip_count`` (Loop node name -> most iterations, ONNX only) bounds
        loops whose trip count is not a build-time constant; ``max_string_bytes`` (ONNX string inputs,
        default 64) the UTF-8 bytes each string may hold; ``bind`` (input name -> value, ONNX only) fixes
        inputs at build time, which then leave the signature: an axis, a shape or pads a model takes as an
        input (its output shapes depend on them, and a compiled module's shapes are static). A file is
        read once and imported from those bytes, so the build cache's key is the digest of what was built.
        A file read before in the same state (``buildcache.file_state``: inode, size, mtime, ctime) is not
        read again until its import runs: its recorded sha256 is the key (a 180 MB encoder: 0.21 s of
        reading and hashing saved)."""
        from .frontend import source_format
        from .frontend.registry import user_converters_digest

        is_file = isinstance(path, (str, os.PathLike))
        name = Path(os.fspath(path)).stem if is_file else None
        tflite = source_format(path) == "tflite"
        cache = BuildCache()
        state = file_state(path) if is_file and cache.config.enabled else None
        data: bytes | None = None
        data_sha256 = cache.recorded_sha256(state)
        if data_sha256 is None:
            data, data_sha256 = _model_bytes(path, tflite)
            if state is not None and file_state(path) != state:  # written while read: not a settled state
                state = None
        strings = {} if max_string_bytes is None else {"max_string_bytes": int(max_string_bytes)}
        if bind and tflite:
            raise InputError("bind= is for ONNX models (a TFLite model's shape inputs are constants)")

        def import_from(source: Any) -> Graph:
            if tflite:
                from .frontend.tflite import import_tflite

                return import_tflite(source, input_shapes, name=name)
            from .frontend.onnx import import_onnx

            return import_onnx(source, input_shapes, name=name, max_trip_count=max_trip_count, bind=bind,
                               **strings)

        if data_sha256 is None:  # tensors in external files: onnx reads them itself, builds are not cached
            return cls(import_from(path))
        shapes = {k: shape_record(v) for k, v in (input_shapes or {}).items()}
        key: list[Any] = [data_sha256, shapes, name]
        loops = {k: int(v) for k, v in (max_trip_count or {}).items()}
        bound = data_digest([dict(bind)])[0] if bind else None  # names and values (None: not numbers)
        for part in (loops, strings, {"bind": bound} if bind else {}):
            if part:  # only then: keys of builds without them stay as they were
                key.append(part)
        if user_converters := user_converters_digest():  # a custom op's converter shapes the import too
            key.append({"converters": user_converters})
        digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()
        # later: a file is read again (and checked), a ModelProto (which may change) imported from its bytes
        later = ((lambda: import_from(_same_bytes(path, data_sha256))) if is_file
                 else functools.partial(import_from, data))
        if not isinstance(path, (str, os.PathLike, bytes, bytearray)):
            now = functools.partial(import_from, path)
        else:  # the bytes hashed, or a file known by its state read now (and checked against its record)
            now = functools.partial(import_from, data) if data is not None else later
        model = cls._import_known(cache, now, later, digest)
        model._source = {"model_sha256": data_sha256, "input_shapes": shapes, **strings,
                         **({"max_trip_count": loops} if loops else {}), **({"bind": bound} if bind else {})}
        if data is not None:  # read and hashed here, and it imports: known by its state from now on
            cache.record_sha256(state, data_sha256)
        return model

    @classmethod
    def _import_known(cls, cache: BuildCache, now: Callable[[], Graph], later: Callable[[], Graph],
                      digest: str) -> CuvilModel:
        """Import now, unless this source imported here before (the build cache's import record; an import
        is a pure function of the bytes, shapes and compiler): then ``later``, when the graph is needed, so a
        new process whose ``optimize`` hits the build cache never parses, checks or converts the model (the
        180 MB encoder: 1.1 s). A source that fails to import has no record, so it still fails here."""
        record_key = build_key({"import": digest})
        stateful = _import_record(cache.get(record_key)) if cache.config.enabled else None
        if stateful is not None:
            return cls(later, digest, stateful)
        graph = now()
        if cache.config.enabled:
            record = {"stateful": bool(graph_states(graph))}
            cache.put(record_key, {IMPORT_RECORD: json.dumps(record).encode()})
        return cls(graph, digest)

    @classmethod
    def from_torch(cls, module: Any, example_inputs: Any, exporter: str = "auto",
                   input_names: Sequence[str] | None = None,
                   output_names: Sequence[str] | None = None) -> CuvilModel:
        """A PyTorch module (in eval mode) exported to ONNX at ``example_inputs``' shapes, by torch's dynamo
        exporter or else the TorchScript one (``frontend.torch_export``); needs the ``torch`` extra."""
        from .frontend.torch_export import export_onnx

        return cls.load(export_onnx(module, example_inputs, exporter, input_names, output_names))

    @classmethod
    def from_pretrained(cls, path_or_id: str | os.PathLike[str], task: str | None = None,
                        input_shapes: Mapping[str, Sequence[int]] | None = None,
                        revision: str | None = None) -> CuvilModel:
        """A Hugging Face-layout directory or hub id (``cuvil_edge.pretrained``): its ONNX export or TFLite
        model (``pretrained.find_model``) with static shapes (batch 1, sequence up to 128 unless
        ``input_shapes`` say otherwise) and the processing that lets ``predict`` take texts or images;
        ``save`` writes it beside the model, so it travels in the signed bundle. ``task`` defaults to what
        config.json says. The tokenizer's vocabulary is checked against the imported graph's embedding
        table (``index_bounds``), whichever format it came from."""
        from .pretrained import load_source

        source = load_source(path_or_id, task, input_shapes, revision)
        model = cls.load(source.model_path, input_shapes=source.input_shapes)
        graph = model._graph
        model.processor = Processor(source.processing, source.files,
                                    {v.name: (v.type.shape, v.type.dtype) for v in graph.inputs})
        text = source.processing.text
        if text is not None:
            ids = next(v for v in graph.inputs if v.name == text["inputs"]["input_ids"])
            table = index_bounds(graph).get(id(ids))
            vocab = model.processor.vocab_size()
            if table is not None and vocab > table:
                raise VocabularyMismatch(f"{source.directory}: the tokenizer has {vocab} tokens but the "
                                         f"model's embedding table only {table} rows: ids past {table - 1} "
                                         "would read no row (a tokenizer from another model?)")
        return model

    @property
    def _graph(self) -> Graph:
        """The imported graph, importing it now if ``load`` left that for later."""
        if not isinstance(self._graph_or_import, Graph):
            self._graph_or_import = self._graph_or_import()
        return self._graph_or_import

    def _has_states(self) -> bool:
        if self._stateful is not None and not isinstance(self._graph_or_import, Graph):
            return self._stateful
        return bool(graph_states(self._graph))

    @property
    def processing(self) -> ProcessingConfig | None:
        """Task, labels and the text or image steps (None: a model that takes tensors only)."""
        return self.processor.config if self.processor is not None else None

    @property
    def graph(self) -> Graph:
        """The model's graph: after ``optimize`` the optimized one (quantized: see ``quantization``)."""
        self._materialize()
        return self._graph

    @property
    def compiled(self) -> CompiledModel | None:
        self._materialize()
        return self._compiled

    @property
    def quantization(self) -> QuantResult | None:
        self._materialize()
        return self._quantization

    def _materialize(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending()

    # -- build --------------------------------------------------------------------------------
    def optimize(self, precision: str = "fp32", targets: Sequence[Target] | str | None = None,
                 progress: Callable[[str], None] | None = None, calibration: Any = None,
                 accuracy_budget: float = 0.01, profiles: Sequence[str] = (),
                 build_cache: BuildCache | None = None, max_threads: int | None = None,
                 **quant_options: Any) -> CuvilModel:
        """Run the passes and compile modules: ``targets`` = "host" (the default: this machine's family,
        both tiers), "all" (every tier x family) or a list of ``Target``; or instead ``profiles``, device
        profile names: only the variants those devices need (``profile_targets``), and the names are
        recorded in the spec so a bundle signed from it targets them. ``precision`` other than fp32
        quantizes the optimized graph (``cuvil_edge.quant``): ``calibration`` is an .npz file, a
        directory of .npy/.npz or an iterable of samples; ``accuracy_budget`` bounds ``mixed``, and
        ``int8-dynamic`` given calibration (its most harmful layers move to fp16, then fp32);
        ``quant_options``: observer ("minmax", "percentile", "mse"), group_size, max_samples,
        kernel_cost (default True: int8 layers whose int8 kernel times slower than fp32 stay fp32), chain
        (default True: int8 layers hand uint8 to int8 readers, ``quant/chain.py``).
        ``build_cache``: where earlier builds are reused (default: ``BuildCacheConfig.from_env()``);
        ``max_threads``: most threads the modules can run on (the device picks how many; 1: plain modules
        without shared memory); default: the most cores any of ``profiles`` has, else 4."""
        check_precision(precision)
        if precision != "fp32" and self._has_states():
            raise QuantizationError("a stateful model builds at fp32 only: calibration cannot feed its state "
                                    "(a quantized TFLite model keeps its own quantization)")
        if profiles and targets is not None:
            raise TargetError("give either targets or profiles: profiles choose the targets")
        chosen = (profile_targets(profiles) if profiles
                  else _resolve_targets("host" if targets is None else targets))
        if max_threads is None:
            max_threads = max((load_profile(p).cores.total for p in profiles), default=DEFAULT_THREADS)
        if self.processor is not None and _raw_items(calibration, self.processor):
            calibration = self.processor.feeds(list(calibration))  # texts, images or waveforms -> feeds
        self._close_instance()
        self._pending = None
        key = None
        calib_sha256 = None
        if precision != "fp32" and calibration is not None:
            calib_sha256, calibration = data_digest(calibration)
        inputs = self._build_inputs(precision, chosen, profiles, calib_sha256, accuracy_budget, quant_options,
                                    max_threads)
        if self._source_digest is not None:
            cache = build_cache or BuildCache()
            hashable = precision == "fp32" or calibration is None or calib_sha256 is not None
            if cache.config.enabled and hashable:  # calibration that is not numeric data: not cached
                key = self._build_key(inputs)
        build = functools.partial(self._build, precision, chosen, progress, calibration, accuracy_budget,
                                  profiles, quant_options, max_threads, inputs)
        # the weights stay in the entry's file until an instance reads them into linear memory, checked
        artifact = _artifact_from_files(cache.get(key, defer=_DEFERRED)) if key is not None else None
        self.build_cache_hit = artifact is not None
        self._cache_entry = (cache, key) if key is not None else None
        if artifact is not None:
            self._artifact, self._compiled, self._quantization, self._pending = artifact, None, None, build
            return self
        if key is not None:
            cache.discard(key)  # an entry that verified but does not parse as a model: rebuild it
        self._build_and_store(build)
        return self

    def _build_and_store(self, build: Callable[[], None]) -> None:
        build()
        if self._cache_entry is not None:
            assert self._artifact is not None
            cache, key = self._cache_entry
            cache.put(key, self._artifact.files())

    def _with_checked_weights(self, use: Callable[[Artifact], Any]) -> Any:
        """``use(artifact)``; if it finds a cache entry's deferred weights changed since the lookup (damaged
        on disk: nothing ran on them), the entry is dropped and the model built again, then ``use`` of the
        new build."""
        built = self._built()
        try:
            return use(built)
        except (SpecError, DeferredFileError):
            if not isinstance(built.weights, DeferredFile) or not self._cache_entry or not self._pending:
                raise
        cache, key = self._cache_entry
        cache.rejected += 1
        cache.discard(key)
        build, self._pending = self._pending, None
        self._build_and_store(build)
        return use(self._built())

    def _build_inputs(self, precision: str, targets: Sequence[Target], profiles: Sequence[str],
                      calibration_sha256: str | None, accuracy_budget: float,
                      quant_options: Mapping[str, Any], max_threads: int) -> dict[str, Any]:
        """The build record (``spec.extra["build"]``): digests of everything a build's bytes follow from
        (model, options, calibration data, compiler), so anyone can rebuild and compare. No time and no
        host in it: the same inputs give the same bytes (docs/REPRODUCIBLE.md)."""
        inputs: dict[str, Any] = {**self._source, "precision": precision,
                                  "targets": [t.name for t in targets], "profiles": list(profiles),
                                  "max_threads": max_threads}
        if precision != "fp32":
            inputs.update(calibration_sha256=calibration_sha256, accuracy_budget=float(accuracy_budget),
                          quant_options=json.loads(json.dumps(quant_options, sort_keys=True, default=repr)))
        return {**inputs, "compiler": dict(compiler_identity())}

    def _build_key(self, inputs: Mapping[str, Any]) -> str:
        """The build-cache key of a build with these ``_build_inputs``."""
        parts = {k: v for k, v in inputs.items() if k != "compiler"}  # build_key adds the fingerprint
        return build_key({**parts, "model": self._source_digest})

    def _build(self, precision: str, targets: Sequence[Target], progress: Callable[[str], None] | None,
               calibration: Any, accuracy_budget: float, profiles: Sequence[str],
               quant_options: Mapping[str, Any], max_threads: int = DEFAULT_THREADS,
               inputs: Mapping[str, Any] | None = None) -> None:
        graph = self._graph
        if not self._optimized:
            optimize_graph(graph, progress)
            self._optimized = True
        extra: dict[str, Any] = {"profiles": list(profiles)} if profiles else {}
        for key in ("source_quantization", SEQUENCES):  # the source's own quantization, for inspect; and
            if key in graph.meta:  # its sequence inputs and outputs, for predict
                extra[key] = graph.meta[key]
        self._quantization = None
        if precision != "fp32":
            self._quantization = quantize(graph, precision, calibration, accuracy_budget,
                                          progress=progress, **quant_options)
            graph, extra = self._quantization.graph, {**extra, "quantization": self._quantization.record}
        if inputs is not None:
            cost = extra.get("quantization", {}).get("kernel_cost")
            extra["build"] = {**inputs, **({"kernel_cost": cost} if cost else {})}
        self._compiled = compile_graph(graph, targets, progress, extra=extra, threads=max_threads)
        self._artifact = Artifact(self._compiled.spec, self._compiled.modules, self._compiled.weights)

    # -- run ----------------------------------------------------------------------------------
    @property
    def instance(self) -> WasmModel:
        if self._instance is None:
            self._instance = self._with_checked_weights(lambda a: instantiate_here(
                a, threads=self.threads, deterministic=self.deterministic))
        return self._instance

    @property
    def spec(self) -> ModelSpec:
        """The built model's I/O signature, variants and kernel table (builds first if needed); cheap on a
        build-cache hit, unlike ``compiled``, which rebuilds the host view."""
        return self._built().spec

    def _built(self) -> Artifact:
        if self._artifact is None:
            self.optimize()
        assert self._artifact is not None
        return self._artifact

    def predict(self, inputs: Mapping[str, Any] | Sequence[Any] | np.ndarray | str | os.PathLike[str] | bytes,
                hop_s: float | None = None) -> (dict[str, np.ndarray] | Result | list[Result]
                                                | list[AudioWindow] | list[list[AudioWindow]]):
        """Run in wasmtime. Inputs: dict by name, list in order, or one array for one input. With a
        ``processor`` (``from_pretrained``), anything but a dict is items: a string, an image (HWC uint8
        array or a path), a waveform (1-D samples, a .wav path or its bytes) or a list of them, giving one
        typed result each (``Classification``, a list of ``Span``, an embedding vector); a dict of tensors
        still runs raw. ``hop_s`` (audio): each clip is cut into the model's window every ``hop_s``
        seconds, giving a list of ``AudioWindow`` (start, end, class) per clip."""
        if self.processor is not None and not isinstance(inputs, Mapping):
            single = isinstance(inputs, (str, os.PathLike, np.ndarray, bytes))
            items = [inputs] if single else list(inputs)
            try:
                if hop_s is not None:
                    results: list[Any] = self.processor.run_windows(items, self.instance.predict, hop_s)
                else:
                    results = self.processor.run(items, self.instance.predict)
            except (InferenceInputError, ProcessingError) as exc:
                raise InputError(str(exc)) from exc
            return results[0] if single else results
        if hop_s is not None:
            raise InputError("hop_s cuts waveforms: it needs an audio model from from_pretrained")
        if isinstance(inputs, np.ndarray):
            inputs = [inputs]
        record = self.spec.extra.get(SEQUENCES, {})  # a list of arrays for each sequence input and output
        try:
            return grouped_outputs(record, self.instance.predict(flat_feeds(record, inputs)))
        except InferenceInputError as exc:
            raise InputError(str(exc)) from exc

    def reset_state(self) -> None:
        """Restore a stateful model's state (TFLite resource variables) to its initial values: each
        ``predict`` carries it on from the one before. Stateless models have nothing to reset."""
        if self._instance is not None:  # none yet: the next instance starts from the initial values
            self._instance.reset_state()

    @property
    def input_names(self) -> list[str]:
        if self._artifact is not None:
            return [t.name for t in self._artifact.spec.inputs]
        return [v.name for v in user_io(self.graph)[0]]

    # -- persistence --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write spec, modules, weights and the processing, if any, to a directory (written aside, then
        renamed into place)."""
        files = {**self._with_checked_weights(Artifact.files),
                 **(self.processor.files() if self.processor is not None else {})}
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        for name, data in files.items():
            (tmp / name).write_bytes(data)
        if out.exists():
            import shutil

            old = out.with_name(f".{out.name}.old")
            os.replace(out, old)
            os.replace(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, out)
        return out

    def close(self) -> None:
        self._close_instance()

    def _close_instance(self) -> None:
        if self._instance is not None:
            self._instance.close()
            self._instance = None

    def __enter__(self) -> CuvilModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Artifact:
    """What ``predict`` and ``save`` need of a build: the model directory's contents."""

    spec: ModelSpec
    modules: dict[str, bytes]  # variant name -> wasm bytes
    weights: bytes | DeferredFile  # a build-cache hit's weights: the entry's file, read by the instance

    def files(self) -> dict[str, bytes]:
        """File name -> bytes, as in a model directory (``runtime_wasm.loader.load_model_dir``); deferred
        weights are read and checked (``DeferredFileError`` if they changed)."""
        weights = self.weights.read() if isinstance(self.weights, DeferredFile) else self.weights
        return {SPEC_FILE: self.spec.to_json().encode(), WEIGHTS_FILE: weights,
                **{v.file: self.modules[v.name] for v in self.spec.variants}}


#: build-cache files left in the entry on a hit (the weights: read once, into linear memory)
_DEFERRED = frozenset({WEIGHTS_FILE})


def _artifact_from_files(files: Mapping[str, bytes | DeferredFile] | None) -> Artifact | None:
    """None when absent, or when verified files do not make a model (a spec this version cannot read)."""
    if files is None:
        return None
    try:
        spec_json = files[SPEC_FILE]
        if not isinstance(spec_json, bytes):
            return None
        spec = ModelSpec.from_json(spec_json)
        modules = {v.name: files[v.file] for v in spec.variants}
        wasm = {name: m for name, m in modules.items() if isinstance(m, bytes)}
        return Artifact(spec, wasm, files[WEIGHTS_FILE]) if len(wasm) == len(modules) else None
    except (KeyError, RuntimeWasmError):
        return None


def _model_bytes(model: Any, tflite: bool = False) -> tuple[bytes, str] | tuple[None, None]:
    """The serialized model and its sha256, or Nones when the bytes may not hold all of it: ONNX tensors in
    external files name them under the key ``location``, so a model without that string has none (a chance
    match inside weights only turns caching off); a TFLite file is always whole. The search (which holds
    the GIL) and the hash (which does not) run side by side: each is ~0.1 s for a 180 MB model."""
    if not isinstance(model, (str, os.PathLike, bytes, bytearray)):
        import onnx  # only here: a path or bytes is hashed without it (importing onnx costs ~0.1 s)

        if isinstance(model, onnx.ModelProto):
            if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
                return None, None
            data = model.SerializeToString(deterministic=True)
            return data, hashlib.sha256(data).hexdigest()
    data = bytes(model) if isinstance(model, (bytes, bytearray)) else Path(os.fspath(model)).read_bytes()
    sha = hashlib.sha256()
    # not runtime_wasm's _Sha256Behind: its thread parks on a queue, and the search below holds the GIL, so
    # the hash would wait for it (measured: 0.32 vs 0.21 s for 180 MB); a thread started inside the update
    # is already hashing (GIL released) when start() returns
    hashing = threading.Thread(target=sha.update, args=(data,), name="cuvil-model-sha256")
    hashing.start()
    external = not tflite and b"location" in data
    hashing.join()
    return (None, None) if external else (data, sha.hexdigest())


#: the one file of a build-cache import record: what ``optimize`` asks of a graph not yet imported
IMPORT_RECORD = "import.json"


def _import_record(files: Mapping[str, bytes] | None) -> bool | None:
    """Whether the recorded import has states; None: no record, or one that does not parse."""
    try:
        stateful = json.loads(files[IMPORT_RECORD])["stateful"] if files is not None else None
    except (KeyError, ValueError, TypeError):
        return None
    return stateful if isinstance(stateful, bool) else None


def _same_bytes(path: str | os.PathLike[str], sha256: str) -> bytes:
    """The file's bytes, which must still be those ``load`` hashed (its builds are keyed by them)."""
    data = Path(os.fspath(path)).read_bytes()
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ModelFormatError(f"{path} changed since CuvilModel.load read it: load it again")
    return data


def _raw_items(calibration: Any, processor: Processor) -> bool:
    """Calibration given as the processor's items (not tensors): a list of strings or paths, uint8 images,
    or for an audio model 1-D waveforms and .wav bytes."""
    audio = processor.config.audio is not None
    return isinstance(calibration, (list, tuple)) and bool(calibration) and all(
        isinstance(x, (str, os.PathLike)) or isinstance(x, np.ndarray) and x.dtype == np.uint8
        or audio and (isinstance(x, bytes) or isinstance(x, np.ndarray) and x.ndim == 1)
        for x in calibration)


def profile_targets(profiles: Sequence[str]) -> tuple[Target, ...]:
    """The variants devices of these classes need, in ``ALL_TARGETS`` order: each profile's family at the
    relaxed tier when its runtime accepts relaxed SIMD, and always at simd128, which ``select_variant``
    falls back to on an engine that does not validate relaxed-SIMD modules."""
    known = available_profiles()
    unknown = sorted(set(profiles) - set(known))
    if unknown or not profiles:
        raise TargetError(f"unknown device profile(s) {unknown}; known: {known}" if unknown
                          else f"no device profile given; known: {known}")
    chosen = [load_profile(name) for name in profiles]
    return tuple(t for t in ALL_TARGETS
                 if any(p.family == t.family and (t.tier == TIER_SIMD128 or p.relaxed_simd) for p in chosen))


def _resolve_targets(targets: Sequence[Target] | str) -> tuple[Target, ...]:
    if targets == "all":
        return ALL_TARGETS
    if targets == "host":
        fam = host_target().family
        return tuple(t for t in ALL_TARGETS if t.family == fam)
    if isinstance(targets, str):
        raise TargetError(f"unknown targets {targets!r}: use 'host', 'all' or a list of Target")
    return tuple(targets)
