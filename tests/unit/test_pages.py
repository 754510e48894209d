"""Huge-page advice for the weights (runtime_wasm.pages): only whole 2 MiB pages inside the range are
advised, which the kernel records on the mapping (``hg`` in its VmFlags)."""

from __future__ import annotations

import ctypes
import mmap
import sys

import pytest

from runtime_wasm.pages import HUGE_PAGE, advise_huge_pages
from tests.support.procfs import vm_flags

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="madvise advice is Linux's")


@pytest.fixture
def region():
    m = mmap.mmap(-1, 4 * HUGE_PAGE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(m))
    yield address
    m.close()


def test_whole_huge_pages_inside_the_range_are_advised(region):
    start = region + 100  # unaligned on both ends: only the aligned interior is advised
    aligned = -(-start // HUGE_PAGE) * HUGE_PAGE
    assert advise_huge_pages(start, 3 * HUGE_PAGE)
    assert "hg" in vm_flags(aligned)
    assert "hg" not in vm_flags(region)  # the part before the first whole huge page is left as it was


def test_a_range_without_a_whole_huge_page_is_left_alone(region):
    start = region + HUGE_PAGE - region % HUGE_PAGE + 4096  # 4 KiB past an aligned address
    assert not advise_huge_pages(start, HUGE_PAGE)
    assert "hg" not in vm_flags(start)
