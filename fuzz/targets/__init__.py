"""Every harness, by name (``fuzz.run`` and the tests take them from here)."""

from __future__ import annotations

from ..engine import Target
from . import http_api, http_download, oip_request

_MODULES = (oip_request, http_api, http_download)


def all_targets() -> dict[str, Target]:
    return {t.name: t for t in (m.target() for m in _MODULES)}
