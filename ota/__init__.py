"""Over-the-air updates: signed bundle format, trust state machine, A/B installer, MQTT fleet protocol
and transport, and the ``cuvil-agent`` daemon.

Device side: imports nothing from the host packager (``cuvil_edge``). The bundle format and the
trust checks need the standard library, ``cryptography`` and the runtime's model-spec rules (a
signed spec is checked as the device will load it); the installer adds the runtime itself.
"""

from .agent import Agent
from .bundle import read_header, read_payloads, verify_bundle, write_bundle
from .config import (
    AgentConfig,
    BrokerSettings,
    HttpDownloadLimits,
    HttpSettings,
    OtaConfig,
    ServeLimits,
    TransferLimits,
    load_agent_config,
)
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
from .installer import STEPS, FileWriter, Installer
from .metadata import FileEntry, Manifest, Root
from .protocol import Announcement, Command, Topics
from .transport import MqttClient
from .trust import TrustState

__all__ = [
    "STEPS", "Agent", "AgentConfig", "Announcement", "BadSignature", "BrokenChain", "BrokerSettings",
    "CannotListen", "Command", "CorruptSlot", "DiskFull", "ExpiredMetadata", "FileEntry", "FileWriter",
    "FormatError",
    "HashMismatch", "HttpDownloadLimits", "HttpSettings", "HttpUnavailable", "InstallError", "Installer",
    "LengthMismatch", "Manifest", "MqttClient", "NoActiveModel", "NoHealthyModel", "NotAuthorized",
    "NothingToRollBack", "OtaConfig", "OtaError", "RedirectRefused", "ReplayedCommand", "RollbackError",
    "Root", "SelfTestFailed", "ServeLimits", "SlowRetrieval",
    "StateLocked", "ThresholdNotMet", "Topics", "TransferFailed", "TransferLimits", "TransportError",
    "TrustState", "UnauthorizedMessage", "UntrustedKey", "VerificationError", "WrongModel", "WrongTarget",
    "canonical_bytes", "key_id", "load_agent_config", "read_header", "read_payloads", "verify_bundle",
    "write_bundle",
]
