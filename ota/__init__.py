"""Over-the-air updates: signed bundle format, trust state machine, A/B installer, ``cuvil-agent``.

Device side: imports nothing from the host packager (``cuvil_edge``). The bundle format and the
trust checks need only the standard library and ``cryptography``; the installer adds the runtime.
"""

from .bundle import read_header, read_payloads, verify_bundle, write_bundle
from .config import OtaConfig
from .crypto import canonical_bytes, key_id
from .errors import (
    BadSignature,
    BrokenChain,
    DiskFull,
    ExpiredMetadata,
    FormatError,
    HashMismatch,
    InstallError,
    LengthMismatch,
    NoActiveModel,
    NothingToRollBack,
    OtaError,
    RollbackError,
    SelfTestFailed,
    ThresholdNotMet,
    UntrustedKey,
    VerificationError,
    WrongTarget,
)
from .installer import STEPS, FileWriter, Installer
from .metadata import FileEntry, Manifest, Root
from .trust import TrustState

__all__ = [
    "STEPS", "BadSignature", "BrokenChain", "DiskFull", "ExpiredMetadata", "FileEntry", "FileWriter",
    "FormatError", "HashMismatch", "InstallError", "Installer", "LengthMismatch", "Manifest",
    "NoActiveModel", "NothingToRollBack", "OtaError", "OtaConfig", "Root", "RollbackError", "SelfTestFailed",
    "ThresholdNotMet", "TrustState", "UntrustedKey", "VerificationError", "WrongTarget",
    "canonical_bytes", "key_id", "read_header", "read_payloads", "verify_bundle", "write_bundle",
]
