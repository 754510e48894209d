"""Code generation, the last stages of a build: ``memplan`` gives every run-time tensor its place in one
arena, ``emit`` lowers the planned graph to one C translation unit (the kernels of ``kernels/``, generated
from templates, plus each node's call), and ``toolchain`` compiles it to wasm32 + SIMD128 with clang."""
