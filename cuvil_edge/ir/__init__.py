"""The typed IR and its verifier."""

from .graph import DTYPES, Graph, Node, TensorType, Value
from .verify import verify

__all__ = ["DTYPES", "Graph", "Node", "TensorType", "Value", "verify"]
