"""One error hierarchy for over-the-air updates; each verification error names the attack it stopped.

Bad input from outside raises a ``VerificationError`` (the bundle or metadata is hostile or broken);
misuse by the calling code raises ``RuntimeError`` (a bug, not an attack); installer failures that
are not about trust raise an ``InstallError``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


class OtaError(Exception):
    """Base class of every error the update path raises."""


class VerificationError(OtaError):
    """Base class of the trust checks: the update was refused and nothing was installed."""


class FormatError(VerificationError):
    """Metadata or a bundle does not follow the format (malformed JSON, missing or mistyped field)."""


class BadSignature(VerificationError):
    """A signature by a trusted key does not verify: the signed content was altered."""


class ThresholdNotMet(VerificationError):
    """Fewer valid signatures from trusted keys than the threshold (unsigned, or one of two)."""


class UntrustedKey(VerificationError):
    """Signed by a key that is not delegated for this role, or that was revoked."""


class RollbackError(VerificationError):
    """A version or release counter that is not newer than the one already trusted (replay)."""


class BrokenChain(VerificationError):
    """A root update skips a version, or the chain is longer than the configured cap."""


class ExpiredMetadata(VerificationError):
    """Release metadata past its expiry: a freeze attack replays old, still validly signed metadata."""


class WrongTarget(VerificationError):
    """The bundle is for another hardware id or device profile."""


class LengthMismatch(VerificationError):
    """Data shorter or longer than declared (truncation, endless data) or over a configured limit."""


class HashMismatch(VerificationError):
    """A payload's sha256 differs from the signed manifest (tampering or mix-and-match)."""


class InstallError(OtaError):
    """The installer could not complete; the previously active model stays active."""


class DiskFull(InstallError):
    """Storage ran out while writing the inactive slot; its partial files were removed."""


class SelfTestFailed(InstallError):
    """The new model trapped, failed to load or missed its golden outputs; the install was rolled back."""


class NothingToRollBack(InstallError):
    """Rollback asked for, but the other slot holds no complete, healthy model."""


class NoActiveModel(InstallError):
    """No model has been installed in this state directory yet."""


class NoHealthyModel(NoActiveModel):
    """A model is installed but could not be loaded (corrupt files, over the memory cap): nothing serves."""


class CorruptSlot(InstallError):
    """An installed slot or the active pointer is missing, unreadable or no longer matches its signed
    manifest (disk corruption or tampering on the device)."""


class StateLocked(InstallError):
    """Another install, rollback or root update held the state directory's lock past the wait limit."""


class ReplayedCommand(VerificationError):
    """A signed command whose nonce was already used: the same signed bytes were sent again."""


class UnauthorizedMessage(VerificationError):
    """A message on a topic, for a fleet or for a device this agent does not accept it from."""


class TransportError(OtaError):
    """The broker connection failed or a publish was not acknowledged (wraps paho-mqtt's errors)."""


class NotAuthorized(TransportError):
    """The broker refused the credentials or, by its ACL, a publish or subscription."""


class RedirectRefused(VerificationError):
    """An HTTP download was redirected to a scheme other than http(s) (a local file, another protocol) or
    through more hops than allowed (a redirect loop)."""


class HttpUnavailable(TransportError):
    """The bundle's HTTP server could not be reached, answered with an error status or broke the connection
    (wraps OSError, ``ssl`` and ``http.client`` errors); the download resumes or falls back to MQTT."""


class TelemetryError(OtaError):
    """The telemetry queue could not write to its directory (disk full, read-only); that record is lost,
    counted, and the agent goes on serving."""


class TransferFailed(OtaError):
    """A chunked download could not complete within its retries; partial data is kept for a resume."""


class SlowRetrieval(TransferFailed):
    """The transfer ran past its total deadline or below its minimum rate (a slow-retrieval attack)."""


class ServingError(OtaError):
    """An inference request to the device's serving API was refused or failed."""


class BadInferenceRequest(ServingError, ValueError):
    """The request does not follow the Open Inference Protocol: malformed JSON, an unknown or wrong
    datatype, a wrong shape or data count, binary sections that do not add up (HTTP 400)."""


class InputOverLimit(BadInferenceRequest):
    """A text or image request past a configured bound: too many items, or one item too large (HTTP 413)."""


class NoProcessing(BadInferenceRequest):
    """Texts or images sent to a model that takes tensors only here: it carries no processing, or this
    device cannot run it (no ``tokenizers`` wheel, a task its runtime does not know) (HTTP 400)."""


class ModelChanged(ServingError):
    """An update swapped the model while a text or image request ran on it: its processing and the model
    that answered would be different releases' (HTTP 503: ask again)."""


class UnknownModel(ServingError, LookupError):
    """No model is served under that name, or not in that version (HTTP 404)."""


class InferenceRefused(ServingError):
    """Client side: the server answered with an error. ``status`` is the HTTP status, ``kind`` the server's
    error type ("Overloaded", "StaleInput", ...) and ``retry_after_s`` its Retry-After hint, if any."""

    def __init__(self, message: str, status: int, kind: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.retry_after_s = status, kind, retry_after_s


class CannotListen(ServingError, OSError):
    """A serving endpoint could not be opened: the message names the address (host and port, or the
    socket path) and the setting that chose it, with the system's reason ("Address already in use")."""


class ServerUnreachable(ServingError):
    """Client side: no connection, or it broke before a complete reply (wraps OSError and http.client's
    errors)."""


class WrongModel(WrongTarget):
    """The bundle is signed for another model line than the one it would be installed as (a release of
    model A offered on model B's line)."""


class ConfigError(OtaError, ValueError):
    """A setting the agent's config (``agent.toml``, or an ``ota.config`` or ``cuvil_agent.config``
    dataclass built in code) gets wrong: an unknown section or key, a mistyped or out-of-range value, a file
    that is not TOML. A ``ValueError`` too, as these checks raised before they had a type of their own."""


class BadName(ConfigError):
    """A fleet, device, model or topic-prefix name that is not exactly one MQTT topic level (a ``/``, ``+``
    or ``#`` in it would widen a subscription or an ACL match)."""


#: (error types, exit code, stderr line) rows of a command line's table (``exit_code``)
ExitCodes = Sequence[tuple[tuple[type[BaseException], ...], int, str]]


def exit_code(exc: Exception, table: ExitCodes) -> int | None:
    """Print ``exc`` as the one stderr line of the first ``table`` row it matches and return that row's
    code; None when none matches. Shared by ``cuvil-agent`` and ``cuvil-edge`` (each with its table) so an
    error reads the same from both; line breaks in a message (compiler output, nested causes) are
    joined, since scripts read the first stderr line."""
    for types, code, line in table:
        if isinstance(exc, types):
            message = " | ".join(part.strip() for part in str(exc).splitlines() if part.strip())
            print(line.format(type=type(exc).__name__, message=message), file=sys.stderr)
            return code
    return None


def run_cli(parser: argparse.ArgumentParser, argv: Sequence[str] | None, table: ExitCodes) -> int:
    """A command line's ``main``: the chosen command's exit code, or the ``table`` row an error matches
    (``exit_code``); an error no row matches is a bug and ends in its traceback."""
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except Exception as exc:
        code = exit_code(exc, table)
        if code is None:
            raise
        return code
