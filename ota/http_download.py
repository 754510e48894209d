"""Fetching an announced bundle over HTTP(S) with Range requests, into the same verified chunk store as
the MQTT path (``ota.chunks.ChunkTransfer``: one part file, one ``progress.json``, one hash check).

The URL is signed with the announcement, but the network and the server are not trusted: every chunk is
checked against the signed chunk hashes before it is stored, the body is bounded by the signed length
whatever the server's headers say (a contradiction is ``LengthMismatch``), and redirects stay on
http(s) within ``max_redirects`` (``RedirectRefused``). After a dropped connection or an agent restart
the download continues with ``Range: bytes=N-`` after the verified prefix. A server that ignores Range
(200 instead of 206) is read from the start and the verified prefix is skipped, never stored again: it
costs bandwidth, not safety. The standard library's ``http.client`` is all it needs on the device.

Two layers: ``open_body`` / ``HttpBody`` do the I/O of one response (library errors wrapped in
``HttpUnavailable``); ``HttpDownload`` owns retries, backoff and the deadline, and advances a
``ChunkTransfer`` one bounded step at a time so the agent's worker thread keeps handling messages.
"""

from __future__ import annotations

import http.client
import random
import re
import ssl
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any
from urllib.parse import SplitResult

from .chunks import ChunkTransfer
from .config import HttpDownloadLimits
from .errors import HttpUnavailable, LengthMismatch, RedirectRefused, SlowRetrieval, TransferFailed
from .parse import join_url, parse_decimal, split_url
from .protocol import URL_SCHEMES

REDIRECTS = (301, 302, 303, 307, 308)
USER_AGENT = "cuvil-agent"
_CONTENT_RANGE = re.compile(r"bytes ([0-9]+)-([0-9]+)/([0-9]+)")


def check_headers(status: int, content_range: str | None, content_length: str | None, offset: int,
                  length: int) -> int:
    """The response to ``Range: bytes=<offset>-`` of a bundle whose signed length is ``length``: how many
    leading body bytes to skip (``offset`` when the server ignored Range and sent it all, else 0).
    ``LengthMismatch`` when the headers contradict the signed length. Pure: no I/O."""
    if status == 206:
        m = _CONTENT_RANGE.fullmatch(content_range or "")
        if m is None:
            raise LengthMismatch(f"206 response with Content-Range {content_range!r}, not "
                                 "bytes START-END/TOTAL")
        start, end, total = (parse_decimal(g) for g in m.groups())
        if start is None or end is None or total is None:  # over MAX_DIGITS: no bundle is that long
            raise LengthMismatch(f"206 response with Content-Range {content_range[:80]!r}..., a number past "
                                 "any signed length")
        if total != length:
            raise LengthMismatch(f"server says the bundle is {total} bytes, the signed length is {length} "
                                 "(a server lying about the length)")
        if (start, end) != (offset, length - 1):
            raise LengthMismatch(f"server sent bytes {start}-{end} when {offset}-{length - 1} were asked for")
        body, skip = end - start + 1, 0
    elif status == 200:
        body, skip = length, offset
    else:
        raise RuntimeError(f"check_headers wants a 200 or 206 response, got {status}")
    if content_length is not None and parse_decimal(content_length) != body:
        raise LengthMismatch(f"Content-Length {content_length[:80]} for a {body}-byte body of a "
                             f"{length}-byte signed bundle (a server lying about the length, or endless "
                             "data)")
    return skip


class HttpBody:
    """One response body positioned at the requested offset; closes its connection once (idempotent)."""

    def __init__(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse, url: str,
                 skip: int) -> None:
        self._conn, self._response, self.url = conn, response, url
        self.skip = skip  # leading bytes the server sent although Range asked past them
        self.received = 0

    def read_exact(self, n: int, within_s: float) -> bytes:
        """Exactly ``n`` bytes within ``within_s``; a connection that ends, stalls or trickles
        (docs/THREATS.md: 9) first is ``HttpUnavailable``."""
        parts, got = [], 0
        end = time.monotonic() + within_s
        while got < n:
            left = end - time.monotonic()
            if left <= 0:
                raise HttpUnavailable(f"{self.url}: {got} of {n} bytes in {within_s}s after {self.received} "
                                      "bytes (stalled or trickling server)")
            try:
                if self._conn.sock is not None:
                    self._conn.sock.settimeout(left)  # no single read outlives the deadline
                piece = self._response.read1(n - got)  # one recv: the deadline is checked between them
            except (OSError, http.client.HTTPException, OverflowError, ValueError) as exc:
                # OverflowError, ValueError: http.client takes a chunk size of "-18446744073709551576"
                # (int(line, 16) accepts a sign) and fails on it in the next read
                raise HttpUnavailable(f"{self.url}: {type(exc).__name__} after {self.received} bytes: {exc}"
                                      ) from exc
            if not piece:
                raise HttpUnavailable(f"{self.url}: connection closed after {self.received} bytes")
            parts.append(piece)
            got += len(piece)
            self.received += len(piece)
        return b"".join(parts)

    def discard(self, n: int, within_s: float) -> None:
        """Read past ``n`` of the bytes to skip (a server that ignored Range)."""
        n = min(n, self.skip)
        self.read_exact(n, within_s)
        self.skip -= n

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> HttpBody:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def _connect(parts: SplitResult, limits: HttpDownloadLimits) -> http.client.HTTPConnection:
    host = parts.hostname or ""
    timeout = limits.connect_timeout_s
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        context = ssl.create_default_context(cafile=limits.tls_ca or None)
        conn = http.client.HTTPSConnection(host, parts.port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(host, parts.port, timeout=timeout)
    conn.connect()
    return conn


def open_body(url: str, offset: int, length: int, limits: HttpDownloadLimits) -> HttpBody:
    """GET ``url`` from byte ``offset`` (``Range: bytes=<offset>-`` when not 0), following at most
    ``max_redirects`` redirects to http(s) URLs (never from https down to http: the bytes would be
    checked anyway, but a model may be confidential), and check the answer against the signed
    ``length``."""
    secure = split_url(url, RedirectRefused).scheme == "https"
    for _ in range(limits.max_redirects + 1):
        parts = split_url(url, RedirectRefused)
        if parts.scheme not in URL_SCHEMES or not parts.hostname:
            raise RedirectRefused(f"redirected to {url!r}: only http(s) URLs are followed")
        if secure and parts.scheme != "https":
            raise RedirectRefused(f"redirected from https down to {url!r}")
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn: http.client.HTTPConnection | None = None
        try:
            conn = _connect(parts, limits)
            conn.request("GET", target, headers=headers)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException, ValueError) as exc:  # ValueError: a bad port/host
            if conn is not None:
                conn.close()
            raise HttpUnavailable(f"{url}: {type(exc).__name__}: {exc}") from exc
        status = response.status
        if status in REDIRECTS:
            location = response.getheader("Location") or ""
            conn.close()
            url = join_url(url, location, RedirectRefused)
            continue
        if status not in (200, 206):
            conn.close()
            raise HttpUnavailable(f"{url}: HTTP {status} {response.reason}")
        try:
            skip = check_headers(status, response.getheader("Content-Range"),
                                 response.getheader("Content-Length"), offset, length)
        except LengthMismatch:
            conn.close()
            raise
        return HttpBody(conn, response, url, skip)
    raise RedirectRefused(f"more than {limits.max_redirects} redirects (last to {url!r})")


class HttpDownload:
    """The HTTP source of one ``ChunkTransfer``. ``step()`` reads chunks for about ``step_s`` (each must
    arrive within ``read_timeout_s``), each stored only when it matches its signed hash. Raises a
    ``VerificationError`` when the server sent something the signature does not cover (``HashMismatch``,
    ``LengthMismatch``, ``RedirectRefused``: refuse this source) and ``TransferFailed`` when retries or
    the deadline are spent; the verified prefix stays in the transfer either way, so the MQTT path
    continues from there."""

    def __init__(self, transfer: ChunkTransfer, url: str, limits: HttpDownloadLimits,
                 log: Callable[..., Any] | None = None) -> None:
        self.transfer, self.url, self.limits, self._log = transfer, url, limits, log
        self._body: HttpBody | None = None
        self._started = time.monotonic()
        self._retry_at: float | None = None
        self.failures = 0  # consecutive attempts that ended without a new verified chunk
        self.requests = 0
        self.received = 0  # body bytes of the closed responses (skipped ones included)

    @property
    def waiting(self) -> bool:
        """True while backing off before the next attempt (the caller may sleep meanwhile)."""
        return self._retry_at is not None and time.monotonic() < self._retry_at

    def step(self) -> bool:
        """Advance the download; True once every chunk is stored."""
        t = self.transfer
        if t.done:
            self.close()
            return True
        if time.monotonic() - self._started > self.limits.deadline_s:
            self.close()
            raise SlowRetrieval(f"HTTP download exceeded its deadline of {self.limits.deadline_s}s "
                                f"({t.have}/{t.total} chunks)")
        if self.waiting:
            return False
        try:
            if self._body is None:
                self._body = open_body(self.url, t.offset, t.ann.bundle_length, self.limits)
                self.requests += 1
            within, stop = self.limits.read_timeout_s, time.monotonic() + self.limits.step_s
            while True:
                if self._body.skip:
                    self._body.discard(t.ann.chunk_bytes, within)
                else:
                    t.accept(t.have, self._body.read_exact(t.chunk_size(t.have), within))  # HashMismatch
                    self.failures = 0
                if t.done:
                    self.close()
                    return True
                if time.monotonic() >= stop:
                    break
        except HttpUnavailable as exc:
            self.close()
            self.failures += 1
            if self.failures > self.limits.max_retries:
                raise TransferFailed(f"HTTP download gave up after {self.limits.max_retries} retries: {exc}"
                                     ) from exc
            self._retry_at = time.monotonic() + self.limits.backoff_s(self.failures, random.random())
            if self._log:
                self._log("http_retry", url=self.url, retry=self.failures, from_chunk=t.have, detail=str(exc))
        except BaseException:
            self.close()
            raise
        return False

    def close(self) -> None:
        """Drop the connection (a later ``step`` reconnects from the verified prefix); safe to repeat."""
        if self._body is not None:
            self._body.close()
            self.received += self._body.received
            self._body = None

    def __enter__(self) -> HttpDownload:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
