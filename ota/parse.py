"""Numbers and URLs from outside the device (HTTP headers and bodies, topic levels, flags, servers'
redirects) read in one place, with bounds, so a hostile value is the caller's typed error and never a
``ValueError``/``OverflowError`` from ``int()``, ``float()`` or ``urlsplit`` escaping a handler.

Why bounds on digits: Python's ``int()`` refuses more than 4,300 digits with a ``ValueError``, and a
number of thousands of digits is an attack, not a count; 20 digits hold every unsigned 64-bit value.
Why finite floats: JSON as Python reads it takes ``NaN`` and ``Infinity``, and a timestamp of NaN
compares false with every bound (a stale input would pass the freshness check).
"""

from __future__ import annotations

import math
from urllib.parse import SplitResult, urljoin, urlsplit

#: the most digits a decimal count may have (2**64 - 1 has 20)
MAX_DIGITS = 20


def parse_decimal(text: str | None, max_digits: int = MAX_DIGITS) -> int | None:
    """A count or port as headers, topics and flags write it: 1 to ``max_digits`` ASCII digits, else
    None. Why not ``isdigit()``: it also takes digits such as '\u00b2' that ``int()`` refuses."""
    if not text or len(text) > max_digits or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def finite_number(value: object, what: str, error: type[Exception], low: float = -math.inf,
                  high: float = math.inf) -> float:
    """A JSON number (not a bool) as a finite float within ``[low, high]``, else ``error`` naming
    ``what``; an integer too large for a float is out of range, not an ``OverflowError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(f"{what} must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise error(f"{what} is out of range ({len(str(abs(value)))}-digit integer)") from None
    if not (math.isfinite(number) and low <= number <= high):
        raise error(f"{what} must be a finite number in [{low}, {high}], got {number!r}")
    return number


def split_url(url: str, error: type[Exception], what: str = "URL") -> SplitResult:
    """``url`` split, its port checked (``urlsplit`` defers that to ``.port``); a malformed one (an open
    IPv6 bracket, a port of letters or past 65535, a character ``urlsplit`` refuses) is ``error``."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError as exc:
        raise error(f"{what} {url!r} is malformed: {exc}") from None
    return parts


def join_url(base: str, reference: str, error: type[Exception]) -> str:
    """A redirect's ``Location`` resolved against the URL that answered it; a malformed one is ``error``."""
    try:
        joined = urljoin(base, reference)
    except ValueError as exc:
        raise error(f"redirect Location {reference!r} is malformed: {exc}") from None
    split_url(joined, error, "redirect to")
    return joined
