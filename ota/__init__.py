"""Over-the-air updates: signed bundle format, trust state machine, A/B installer, and the MQTT fleet
protocol and its transport. The ``cuvil-agent`` daemon that drives them (and serves the installed model)
is ``cuvil_agent``.

Device side: imports nothing from the host packager (``cuvil_edge``), and nothing heavy when imported
(no MQTT client, HTTP server, metrics or model runtime until used). The bundle format and the trust checks
need the standard library, ``cryptography`` and the runtime's model-spec rules (a signed spec is checked as
the device will load it); the installer adds the runtime itself when it installs, and the transport
paho-mqtt when it connects.
"""

from .bundle import read_header, read_payloads, verify_bundle, write_bundle
from .config import BrokerSettings, HttpDownloadLimits, OtaConfig, TransferLimits
from .crypto import canonical_bytes, key_id
from .errors import (
    BadSignature,
    BrokenChain,
    CannotListen,
    CorruptSlot,
    DiskFull,
    ExpiredMetadata,
    FormatError,
    HashMismatch,
    HttpUnavailable,
    InstallError,
    LengthMismatch,
    NoActiveModel,
    NoHealthyModel,
    NotAuthorized,
    NothingToRollBack,
    OtaError,
    RedirectRefused,
    ReplayedCommand,
    RollbackError,
    SelfTestFailed,
    SlowRetrieval,
    StateLocked,
    ThresholdNotMet,
    TransferFailed,
    TransportError,
    UnauthorizedMessage,
    UntrustedKey,
    VerificationError,
    WrongModel,
    WrongTarget,
)
from .installer import STEPS, ActiveModel, FileWriter, Installer
from .metadata import FileEntry, Manifest, Root
from .protocol import Announcement, Command, Topics
from .transport import MqttClient
from .trust import TrustState

__all__ = [
    "STEPS", "ActiveModel", "Announcement", "BadSignature", "BrokenChain", "BrokerSettings",
    "CannotListen", "Command", "CorruptSlot", "DiskFull", "ExpiredMetadata", "FileEntry", "FileWriter",
    "FormatError",
    "HashMismatch", "HttpDownloadLimits", "HttpUnavailable", "InstallError", "Installer",
    "LengthMismatch", "Manifest", "MqttClient", "NoActiveModel", "NoHealthyModel", "NotAuthorized",
    "NothingToRollBack", "OtaConfig", "OtaError", "RedirectRefused", "ReplayedCommand", "RollbackError",
    "Root", "SelfTestFailed", "SlowRetrieval",
    "StateLocked", "ThresholdNotMet", "Topics", "TransferFailed", "TransferLimits", "TransportError",
    "TrustState", "UnauthorizedMessage", "UntrustedKey", "VerificationError", "WrongModel", "WrongTarget",
    "canonical_bytes", "key_id", "read_header", "read_payloads", "verify_bundle",
    "write_bundle",
]
