"""The pure parts of HTTP bundle downloads: the signed URL in announcements and the response-header checks
against the signed length (the end-to-end behaviour is in tests/integration/test_http_download.py)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cuvil_edge.signing import public_hex, sign_envelope
from ota import BadSignature, FormatError, LengthMismatch, Root, TransferLimits, TrustState
from ota.crypto import key_id
from ota.http_download import check_headers
from ota.protocol import Announcement, format_time, sha256_hex, verify_announcement

NOW = datetime(2026, 5, 1, tzinfo=timezone.utc)
KEY = Ed25519PrivateKey.generate()
TRUST = TrustState(sign_envelope(Root(1, {key_id(public_hex(KEY)): public_hex(KEY)}, 1,
                                      {key_id(public_hex(KEY)): public_hex(KEY)}, 1).to_dict(), [KEY]))


def announcement(**changes) -> dict:
    data = b"x" * 100
    ann = Announcement("lab", 1, format_time(NOW), format_time(NOW + timedelta(days=1)), sha256_hex(data),
                       len(data), 2, "m", "1.0.2", 64, (sha256_hex(data[:64]), sha256_hex(data[64:])),
                       select_below=1 << 32)
    return {**ann.to_dict(), **changes}


def verify(signed: dict, tamper: dict | None = None) -> Announcement:
    envelope = sign_envelope(signed, [KEY])
    envelope["signed"].update(tamper or {})
    return verify_announcement(json.dumps(envelope).encode(), TRUST, "lab", NOW, TransferLimits())


def test_url_is_signed_with_the_announcement():
    url = "https://cdn.example.com/fleet/lab/bundle.cvb?sig=abc"
    assert verify(announcement(url=url)).url == url
    older = announcement()
    del older["url"]  # from a publisher before the field existed: MQTT only
    assert verify(older).url == ""
    with pytest.raises(BadSignature):  # a network attacker cannot point devices elsewhere
        verify(announcement(url=url), tamper={"url": "https://evil.example.com/bundle.cvb"})


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://host/b.cvb", "http://", "https://a b/c",
                                 "http://host:99999/b", "x" * 3000, 7])
def test_only_http_urls_are_accepted_even_when_signed(url):
    with pytest.raises(FormatError):
        verify(announcement(url=url))


@pytest.mark.parametrize(("status", "content_range", "content_length", "offset", "skip"), [
    (200, None, "100", 0, 0),
    (200, None, None, 0, 0),  # no length header: the body is still bounded by the signed length
    (206, "bytes 40-99/100", "60", 40, 0),
    (200, None, "100", 40, 40),  # Range ignored: skip the verified prefix, store nothing twice
])
def test_headers_that_agree_with_the_signed_length(status, content_range, content_length, offset, skip):
    assert check_headers(status, content_range, content_length, offset, 100) == skip


@pytest.mark.parametrize(("status", "content_range", "content_length", "offset", "attack"), [
    (200, None, "50", 0, "lying about the length"),
    (200, None, "4096", 0, "endless data"),
    (206, "bytes 40-99/150", "60", 40, "lying about the length"),
    (206, "bytes 0-99/100", "100", 40, "were asked for"),
    (206, "bytes 40-79/100", "40", 40, "were asked for"),
    (206, None, "60", 40, "Content-Range"),
    (206, "bytes 40-99/100", "-1", 40, "lying about the length"),
    (200, None, "\u00b2", 0, "lying about the length"),  # isdigit() but not int(): was a ValueError
])
def test_headers_that_contradict_the_signed_length(status, content_range, content_length, offset, attack):
    with pytest.raises(LengthMismatch, match=attack):
        check_headers(status, content_range, content_length, offset, 100)
