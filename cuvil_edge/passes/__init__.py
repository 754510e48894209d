"""Graph passes as named stages; the verifier runs after each one."""

from .pipeline import DEFAULT_PIPELINE, Pass, run_passes
from .verify import verify

__all__ = ["DEFAULT_PIPELINE", "Pass", "run_passes", "verify"]
