"""Registers every built-in op family (imported lazily by ``registry.get``)."""

from . import activation, conv, gemm, norm, shape  # noqa: F401
