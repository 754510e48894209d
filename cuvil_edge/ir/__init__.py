"""The typed IR (its verifier, which checks nodes against the op registry, is ``passes.verify``)."""

from .graph import DTYPES, Graph, Node, TensorType, Value

__all__ = ["DTYPES", "Graph", "Node", "TensorType", "Value"]
