"""``cuvil-edge``, one module per command group: ``app`` (the parser; build, run, inspect, profile,
bench, demo, quantize and the hub commands), ``ota`` (keys, signing, bundles), ``fleet`` (publish,
rollouts, commands, the dashboard, the store), ``args`` (options and validators they share)."""

from .app import main

__all__ = ["main"]
