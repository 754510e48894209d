"""Remote input read in one place (``ota.parse``), and the OIP request layer's regression inputs from
fuzzing (``fuzz/regressions/oip_request``), one test each, asserting the typed error."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from cuvil_agent import oip
from fuzz.engine import REGRESSIONS
from fuzz.targets.oip_request import SIGNATURE_INPUTS
from ota.errors import BadInferenceRequest, LengthMismatch, RedirectRefused
from ota.http_download import check_headers
from ota.parse import MAX_DIGITS, finite_number, join_url, parse_decimal, split_url
from runtime_wasm.spec import TensorSpec

SIGNATURES = [oip.Signature(tuple(TensorSpec(n, d, s, 0, b) for n, d, s, b in SIGNATURE_INPUTS),
                            (TensorSpec("y", "float32", (2, 4), 0),)),
              oip.Signature((TensorSpec("text", "object", (-1,), 0),),
                            (TensorSpec("label", "object", (-1,), 0),))]
#: regression input -> (which reader refuses it: request or response, words its error must carry)
OIP_CASES = {
    "captured-at-400-digits": ("request", "out of range (400-digit integer)"),
    "hop-s-nan": ("request", "parameters.hop_s must be a finite number"),
    "base64-past-ascii": ("request", "is not base64"),
    "negative-binary-size": ("request", "binary_data_size must not be negative"),
    "bytes-deep-nesting": ("request", "must hold strings (BYTES)"),  # past numpy's 64 dimensions
    "decode-datatype-list": ("response", "unknown datatype [4]"),
    "reply-empty-shape-2-to-the-64": ("response", "is too large for any array"),  # numpy's ValueError
    "reply-empty-shape-2-to-the-59-by-8": ("response", "is too large for any array"),  # times item size
}


def _body(data: bytes) -> tuple[bytes, str | None]:
    head, sep, tail = data.partition(b"\0")
    return (head + tail, str(len(head))) if sep else (data, None)


def test_every_oip_regression_input_has_its_test() -> None:
    assert sorted(p.name for p in (REGRESSIONS / "oip_request").iterdir()) == sorted(OIP_CASES)


@pytest.mark.parametrize("name", sorted(OIP_CASES))
def test_oip_regression_inputs_get_bad_inference_request(name: str) -> None:
    reader, words = OIP_CASES[name]
    body, header = _body((REGRESSIONS / "oip_request" / name).read_bytes())
    with pytest.raises(BadInferenceRequest, match=re.escape(words)):
        if reader == "request":
            oip.parse_infer_request(body, header, SIGNATURES, oip.BytesLimits(8, 1024))
        else:
            oip.decode_outputs(body, header)


@pytest.mark.parametrize("header", ["\u00b2", " 12", "12 ", "-1", "1e3", "9" * 400, "0x10", ""])
def test_a_header_length_that_is_no_plain_count_is_a_bad_request(header: str) -> None:
    with pytest.raises(BadInferenceRequest, match="Inference-Header-Content-Length"):
        oip.split_body(b'{"inputs": []}', header)


@pytest.mark.parametrize(("text", "want"), [
    ("0", 0), ("8080", 8080), ("9" * MAX_DIGITS, 10**MAX_DIGITS - 1), ("9" * (MAX_DIGITS + 1), None),
    ("9" * 5000, None), ("\u00b2", None), ("+1", None), ("1_000", None), (" 1", None), ("", None),
    (None, None)])
def test_parse_decimal_takes_bounded_ascii_digits_only(text: str | None, want: int | None) -> None:
    assert parse_decimal(text) == want


@pytest.mark.parametrize("value", [10**400, -(10**400), math.nan, math.inf, -math.inf, True, "1", None, [1]])
def test_finite_number_refuses_what_is_no_finite_number(value: object) -> None:
    with pytest.raises(BadInferenceRequest, match="captured_at"):
        finite_number(value, "captured_at", BadInferenceRequest)


def test_finite_number_checks_its_range() -> None:
    assert finite_number(3, "hop_s", BadInferenceRequest, 0) == 3.0
    with pytest.raises(BadInferenceRequest, match=r"in \[0, inf\]"):
        finite_number(-0.5, "hop_s", BadInferenceRequest, 0)


@pytest.mark.parametrize("url", ["http://[", "//[x", "http://h:99999/", "http://h:port/", "http://[::1"])
def test_malformed_urls_are_the_callers_error(url: str) -> None:
    with pytest.raises(RedirectRefused, match="malformed"):
        split_url(url, RedirectRefused)
    with pytest.raises(RedirectRefused, match="malformed"):
        join_url("http://127.0.0.1/b", url, RedirectRefused)


def test_a_relative_redirect_resolves_against_the_answering_url() -> None:
    assert join_url("http://127.0.0.1:8/a/b.cvb", "../c.cvb", RedirectRefused) == "http://127.0.0.1:8/c.cvb"


@pytest.mark.parametrize(("status", "content_range", "content_length"), [
    (206, "bytes 0-9/" + "9" * 5000, None), (206, "bytes " + "1" * 4400 + "-9/10", None),
    (200, None, "9" * 4000), (206, "bytes 0-9/10", "1" * 21)])
def test_numbers_of_thousands_of_digits_from_a_bundle_server_are_length_mismatch(
        status: int, content_range: str | None, content_length: str | None) -> None:
    with pytest.raises(LengthMismatch):
        check_headers(status, content_range, content_length, 0, 10)


def test_the_regression_folders_are_the_harnesses() -> None:
    from fuzz.targets import all_targets

    assert {p.name for p in Path(REGRESSIONS).iterdir()} <= set(all_targets())
