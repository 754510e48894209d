"""One error hierarchy for the device runtime (no host dependencies)."""

from __future__ import annotations


class RuntimeWasmError(Exception):
    """Base class of every error the device runtime raises."""


class SpecError(RuntimeWasmError):
    """A model spec (I/O signature, offsets, variants) is malformed or does not match its module."""


class NoUsableVariant(RuntimeWasmError):
    """None of a model's module variants can run on this host (tier or family mismatch)."""


class ModuleLoadError(RuntimeWasmError):
    """wasmtime rejected a module, or it does not export what a cuvil-edge model must."""


class CacheKeyError(RuntimeWasmError):
    """The precompiled-module cache key exists but cannot be read, or was put inside the cache directory."""


class InferenceInputError(RuntimeWasmError, ValueError):
    """Inputs do not match the model signature: wrong names, count, dtype or shape."""


class InferenceTrap(RuntimeWasmError):
    """The module trapped while running (out of bounds, deadline, stack)."""


class PolicyError(RuntimeWasmError, ValueError):
    """A ``RuntimePolicy`` setting is missing, mistyped or out of range."""


class DeadlineExceeded(RuntimeWasmError):
    """A request missed its deadline: its worker was killed (runaway guest) or it expired in the queue."""


class WorkerCrashed(RuntimeWasmError):
    """A supervised worker process died or broke its protocol; it is restarted for the next request."""


class StaleInput(RuntimeWasmError, ValueError):
    """The input was captured longer ago than the policy's freshness bound: answering would mislead."""


class Overloaded(RuntimeWasmError):
    """The request was refused: queue full, or load shed while over the thermal/energy budget."""


class ProcessingError(RuntimeWasmError, ValueError):
    """A bundle's pre/post-processing config or tokenizer is malformed or missing, or an input (text,
    image) cannot be turned into the model's tensors."""
