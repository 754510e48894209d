"""What ``cuvil-edge bench`` and ``demo`` run on this machine: ``bench`` (side-by-side timing against
onnxruntime, GEMM ceilings) and ``demo`` (the whole pipeline on a generated model, and a fleet
rollout to a local agent). The build never imports them."""
