"""Limits of the update path: typed fields whose names carry their units.

``OtaConfig`` bounds the bundle checks, ``TransferLimits`` the chunked download, ``HttpDownloadLimits``
its HTTP source and ``BrokerSettings`` the MQTT connection of the fleet protocol. The agent's own settings
(serving, telemetry, model lines, the TOML file) are ``cuvil_agent.config``, built on the validators here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields

from .errors import BadName, ConfigError

#: a fleet, device, model or topic prefix name: one MQTT topic level (no '/', '+', '#')
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_name(value: str, what: str) -> str:
    """Fleet, device, model and prefix names are single topic levels, so they cannot widen an ACL match
    (here, below the protocol, because a model line's config names its topic)."""
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise BadName(f"{what} {value!r} must be 1-64 of [A-Za-z0-9._-] (one MQTT topic level)")
    return value


def check_numbers(obj: object) -> None:
    """Every numeric field non-negative: a negative limit would silently disable a defence."""
    for f in fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if value < 0:
            raise ConfigError(f"{type(obj).__name__}.{f.name} must be non-negative, got {value!r}")


def _equal_jitter(low_s: float, high_s: float, attempt: int, rand: float) -> float:
    """Exponential backoff with "equal jitter": half fixed, half random (``rand`` in [0, 1))."""
    # the exponent is capped: retrying forever, 2 ** attempt would overflow a float after ~1000 tries
    cap = min(high_s, low_s * 2 ** min(max(attempt - 1, 0), 64))
    return cap / 2 + cap / 2 * rand


@dataclass(frozen=True)
class OtaConfig:
    """Bounds every read from the network or disk, so hostile input cannot exhaust memory or storage."""

    #: the signed header: manifest + signatures + golden vectors (one vector of a 320 x 320 detector's input
    #: and outputs is ~2.6 MB of base64: 1 MiB admitted no image model past ~200 x 200)
    max_manifest_bytes: int = 4 << 20
    max_bundle_bytes: int = 512 << 20  # header + every payload
    max_root_bytes: int = 64 << 10
    max_root_chain_length: int = 32  # root versions applied in one update
    expiry_grace_seconds: int = 0  # tolerated clock error on devices without a trusted clock
    chunk_bytes: int = 1 << 16  # read/write granularity for payloads
    selftest_rtol: float = 1e-4
    selftest_atol: float = 1e-4
    #: the self-test runs in a supervised worker under the serving policy's memory cap; per golden vector,
    #: and its start + compile
    selftest_deadline_s: float = 10.0
    selftest_start_timeout_s: float = 60.0
    #: how long an installer waits for the state-directory lock held by another installer before failing
    lock_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ConfigError(f"OtaConfig.{f.name} must be a non-negative number, got {value!r}")
        check_numbers(self)
        if 0 in (self.chunk_bytes, self.max_root_chain_length, self.selftest_deadline_s,
                 self.selftest_start_timeout_s, self.lock_timeout_s):
            raise ConfigError("OtaConfig.chunk_bytes, max_root_chain_length, lock_timeout_s and the "
                             "selftest_* limits must be positive")


@dataclass(frozen=True)
class TransferLimits:
    """Chunked download over MQTT: retries, backoff and the slow-retrieval defence
    (docs/THREATS.md: 9, 11, 13)."""

    window_chunks: int = 8  # chunk topics subscribed at once (flow control, bounded memory)
    max_chunk_bytes: int = 96 << 10  # announcements with larger chunks are refused (broker caps ~128 KB)
    chunk_timeout_s: float = 5.0  # no chunk for this long: request the window again
    max_retries: int = 8  # re-requests (stalls, corrupted chunks) before the transfer fails
    backoff_min_s: float = 0.2  # first retry delay; doubles per retry, with jitter
    backoff_max_s: float = 30.0
    deadline_s: float = 3600.0  # whole transfer, across resumes in one agent run
    min_rate_bytes_per_s: float = 64.0  # measured over rate_window_s once that much time has passed
    rate_window_s: float = 60.0
    max_command_ttl_s: float = 3600.0  # commands valid longer are refused (bounds the nonce store)
    #: consecutive broker connect failures before giving up; 0: never (an agent offline for days must keep
    #: serving locally and reconnect when the broker returns), retrying every ``backoff_max_s``
    max_connect_failures: int = 0
    #: a QoS 1 publish waits this long for the broker's acknowledgement, then as long again doubled, for
    #: ``publish_attempts`` waits in all (10, 20, 40, 80 s) before ``TransportError``: a broker busy with
    #: a fleet's statuses acknowledges late, and the client re-sends unacknowledged messages itself when
    #: it reconnects, so patience (not a second copy) is what a slow broker needs
    publish_ack_timeout_s: float = 10.0
    publish_attempts: int = 4

    def __post_init__(self) -> None:
        check_numbers(self)
        if self.window_chunks == 0 or self.max_chunk_bytes == 0:
            raise ConfigError("TransferLimits.window_chunks and max_chunk_bytes must be positive")

    def backoff_s(self, attempt: int, rand: float) -> float:
        return _equal_jitter(self.backoff_min_s, self.backoff_max_s, attempt, rand)


@dataclass(frozen=True)
class HttpDownloadLimits:
    """Downloading an announced bundle from its signed URL (``ota.http_download``). The body is bounded by
    the announcement's signed length, not by anything the server says; every read by ``read_timeout_s``."""

    connect_timeout_s: float = 10.0  # TCP and TLS connect, sending the request, the response headers
    #: for each chunk: a server that stalls or trickles is dropped and asked again from the verified prefix
    read_timeout_s: float = 15.0
    max_retries: int = 5  # consecutive failed attempts (no new verified chunk) before falling back to MQTT
    backoff_min_s: float = 0.5  # first retry delay; doubles per retry, with jitter
    backoff_max_s: float = 30.0
    max_redirects: int = 5  # to http(s) URLs only
    deadline_s: float = 3600.0  # the whole HTTP download in one agent run; then fall back to MQTT
    #: reading in one turn of the agent's loop before it handles messages again (plus one chunk's read)
    step_s: float = 0.25
    tls_ca: str = ""  # CA file for https URLs; empty: the system's trust store

    def __post_init__(self) -> None:
        check_numbers(self)
        if not (self.connect_timeout_s > 0 and self.read_timeout_s > 0):
            raise ConfigError("HttpDownloadLimits.connect_timeout_s and read_timeout_s must be positive")

    def backoff_s(self, attempt: int, rand: float) -> float:
        return _equal_jitter(self.backoff_min_s, self.backoff_max_s, attempt, rand)


@dataclass(frozen=True)
class BrokerSettings:
    """Where and how to reach the MQTT broker; the topic prefix lets fleets share a broker."""

    host: str = "127.0.0.1"
    port: int = 1883
    username: str = ""
    password: str = field(default="", repr=False)
    tls_ca: str = ""  # CA file: enables TLS
    tls_cert: str = ""  # client certificate (mutual TLS)
    tls_key: str = ""
    protocol: int = 5  # 5 (MQTT 5) or 4 (3.1.1, for brokers such as amqtt)
    keepalive_s: int = 30
    session_expiry_s: int = 7 * 86400  # persistent session: QoS 1 commands wait for an offline device
    topic_prefix: str = "cuvil"

    def __post_init__(self) -> None:
        check_numbers(self)
        if self.protocol not in (4, 5):
            raise ConfigError(f"BrokerSettings.protocol must be 4 (MQTT 3.1.1) or 5, got {self.protocol}")
