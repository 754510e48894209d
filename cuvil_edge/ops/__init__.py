"""IR op definitions, one module per op family; importing this package registers them all."""

from .registry import OpDef, get, register, registered

__all__ = ["OpDef", "get", "register", "registered"]
