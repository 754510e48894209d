"""Transparent huge pages for the weights: fewer page faults while they load.

Weights are written once, in full, into fresh linear memory at load: on 4 KiB pages that is one fault per
page (11,000 for a 46.5 MB int8 encoder), about a fifth of its load. Advising the aligned interior of the
range for huge pages (``MADV_HUGEPAGE``, which Linux honours when transparent huge pages are set to
``madvise`` or ``always``) makes it one fault per huge page (2 MiB on x86-64). Only whole huge pages
inside the range are advised, so memory the model never writes is not rounded up into residence.
Elsewhere, or where the kernel refuses, nothing changes: it is advice, never a condition of loading. Under
a hypervisor that takes freed pages back (free page reporting) a fresh huge page may fault on the host too:
measured here once as a tripled p90, once not at all (docs/BENCHMARKS.md#start-up).
"""

from __future__ import annotations

import ctypes
import sys

_MADV_HUGEPAGE = 14  # Linux, every architecture


def _huge_page_size() -> int:
    """The kernel's transparent huge page: 2 MiB on x86-64 and 4 KiB-page arm64, 32 MiB under the 16 KiB
    pages of a Raspberry Pi 5's kernel."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 2 << 20


HUGE_PAGE = _huge_page_size()


def _madvise() -> ctypes._CFuncPtr | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MADVISE = _madvise()


def advise_huge_pages(address: int, size: int) -> bool:
    """Ask for huge pages on the whole huge pages within [address, address + size); True if advised."""
    lo = -(-address // HUGE_PAGE) * HUGE_PAGE
    hi = (address + size) // HUGE_PAGE * HUGE_PAGE
    if _MADVISE is None or hi <= lo:
        return False
    return _MADVISE(lo, hi - lo, _MADV_HUGEPAGE) == 0
