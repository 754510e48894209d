"""Model frontends: each turns a file format into the IR (ONNX now; TFLite later)."""
