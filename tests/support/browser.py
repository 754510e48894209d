"""Headless chromium for the dashboard tests (Debian's ``chromium``): a page's DOM after its script ran, and
its visible text."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HANG_S = 120.0


class _Text(HTMLParser):
    """The visible text of a DOM dump (scripts and styles left out), one string."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("script", "style")

    def handle_data(self, data: str) -> None:
        if not self._skip and data.strip():
            self.parts.append(data.strip())


def chromium(url: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Headless chromium on ``url`` with 5 s of virtual time for the page's script (polls included)."""
    assert CHROMIUM, "chromium is not installed (apt-get install -y chromium)"
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args, url],
                          capture_output=True, text=True, timeout=HANG_S, check=True)


def page_text(dom: str) -> str:
    parser = _Text()
    parser.feed(dom)
    return " | ".join(parser.parts)
