"""The agent's settings: typed fields whose names carry their units.

``ServeLimits`` bound the local inference socket, ``HttpSettings`` the HTTP inference API,
``TelemetrySettings`` the telemetry queue, ``ModelConfig`` / ``AdmissionSettings`` the model lines of a
multi-model device and their shared budget, and ``AgentConfig`` ties them to one device together with the
update path's limits (``ota.config``: ``OtaConfig``, ``TransferLimits``, ``HttpDownloadLimits``,
``BrokerSettings``). ``load_agent_config`` reads TOML; ``serving_policy`` and ``model_policies`` map it to
the runtime policies the models are served under.
"""

from __future__ import annotations

import os
import platform
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from device_profiles import load_profile
from device_profiles.profile import DeviceProfilesError
from ota.config import (
    BrokerSettings,
    HttpDownloadLimits,
    OtaConfig,
    TransferLimits,
    check_name,
    check_numbers,
)
from ota.errors import ConfigError
from runtime_wasm.admission import divide_threads
from runtime_wasm.instance import serving_cores
from runtime_wasm.policy import RuntimePolicy

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def default_hardware_id() -> str:
    """Set per device class at provisioning (``CUVIL_HARDWARE_ID``); a generic id otherwise."""
    return os.environ.get("CUVIL_HARDWARE_ID") or f"generic-{platform.machine()}"


@dataclass(frozen=True)
class ServeLimits:
    """The local inference socket: what local apps can hold (threads, memory, time). Worst-case request
    memory is about ``max_connections * max_request_bytes`` (256 MiB by default), before JSON decoding."""

    max_connections: int = 16  # served at once; one more is answered ``Overloaded`` and closed
    read_timeout_s: float = 10.0  # to receive a whole request line, and per wait sending the reply
    max_request_bytes: int = 16 << 20  # one request line; longer ones get "request too large", unread
    max_items: int = 64  # texts or images in one request (models with processing)
    max_item_bytes: int = 4 << 20  # one text's UTF-8 or one encoded image's bytes

    def __post_init__(self) -> None:
        check_numbers(self)
        positive = ("max_connections", "read_timeout_s", "max_request_bytes", "max_items", "max_item_bytes")
        if not all(getattr(self, name) > 0 for name in positive):
            raise ConfigError(f"ServeLimits.{', '.join(positive)} must be positive")


@dataclass(frozen=True)
class HttpSettings:
    """The HTTP inference API (Open Inference Protocol, ``http_api``): where it listens and what one
    client can hold. Each limit bounds one phase of a request, so no client can keep a connection slot by
    being slow (slow-loris) or large: worst-case request memory is about ``max_connections *
    (max_header_bytes + max_body_bytes)`` (256 MiB by default) before JSON decoding."""

    host: str = "127.0.0.1"  # loopback by default: only local apps
    port: int = 8080  # 0: an ephemeral port (the server's ``address`` says which)
    unix_socket: str = ""  # serve on this Unix socket (mode 0660) instead of TCP
    model_name: str = ""  # URL name of the agent's model; empty: the installed manifest's name
    max_connections: int = 16  # open at once; one more is answered 503 ``Overloaded`` and closed
    header_timeout_s: float = 10.0  # from waiting for a request (keep-alive idle included) to its last header
    body_timeout_s: float = 30.0  # to receive the whole body after the headers
    write_timeout_s: float = 10.0  # per send of the response: a client that does not read is dropped
    max_header_bytes: int = 16 << 10  # request line + headers; more is 431
    max_body_bytes: int = 16 << 20  # more is 413, unread
    max_items: int = 64  # BYTES elements (texts, images) per request to a processing model; more is 413
    max_item_bytes: int = 4 << 20  # one BYTES element (a text's UTF-8, an encoded image); more is 413
    retry_after_s: int = 1  # the Retry-After hint sent with 503

    def __post_init__(self) -> None:
        check_numbers(self)
        positive = ("max_connections", "header_timeout_s", "body_timeout_s", "write_timeout_s",
                    "max_header_bytes", "max_body_bytes", "max_items", "max_item_bytes")
        if not all(getattr(self, name) > 0 for name in positive):
            raise ConfigError(f"HttpSettings.{', '.join(positive)} must be positive")
        if self.port > 65535:
            raise ConfigError(f"HttpSettings.port must be at most 65535, got {self.port}")


@dataclass(frozen=True)
class TelemetrySettings:
    """The telemetry queue (``telemetry``): events and summaries wait on disk while the broker is away,
    bounded in records and bytes (the oldest are dropped, and counted, past either), and are sent in order,
    each removed only once the broker acknowledged it. The summary period stays ``agent.telemetry_interval_s``
    (0: no summaries; events are queued either way)."""

    directory: str = ""  # empty: <state_dir>/telemetry
    max_events: int = 10_000  # records waiting at once
    max_bytes: int = 4 << 20  # their framed size on disk (plus at most one partly sent segment)
    publish_timeout_s: float = 10.0  # per publish, for the broker's PUBACK
    max_attempts: int = 5  # refusals of one record while connected (ACL, size cap) before it is dropped
    retry_s: float = 2.0  # wait after a refused or unacknowledged publish
    message_expiry_s: int = 86_400  # MQTT 5 message expiry of each publish; 0: none
    #: the drift gate's shadow sample (``shadow``): after a switch to a newer release, this share of the
    #: requests also runs through the previous one, kept loaded until this many were compared or this long
    shadow_fraction: float = 0.0  # 0: off
    shadow_max_samples: int = 100
    shadow_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        check_numbers(self)
        if not (self.max_events > 0 and self.max_bytes > 0 and self.publish_timeout_s > 0
                and self.max_attempts > 0):
            raise ConfigError("TelemetrySettings.max_events, max_bytes, publish_timeout_s and max_attempts "
                             "must be positive")
        if self.shadow_fraction > 1 or (self.shadow_fraction and not (self.shadow_max_samples > 0
                                                                      and self.shadow_timeout_s > 0)):
            raise ConfigError("TelemetrySettings.shadow_fraction is a share from 0 to 1, and with it on "
                              "shadow_max_samples and shadow_timeout_s must be positive")


@dataclass(frozen=True)
class ModelConfig:
    """One model line of a multi-model device (``[[models]]``): its own signed releases (installer state
    in ``<state_dir>/models/<name>``, its own slots and release counter), policy and priority. ``name`` is
    the model's signed manifest name, its release topic level and its HTTP URL name."""

    name: str
    priority: int = 0  # higher: admitted first when the device is saturated, and threads first
    policy: RuntimePolicy | None = None  # None: the agent's serving policy
    socket: str = ""  # Unix socket for this model's JSON inference; empty: not served there

    def __post_init__(self) -> None:
        check_name(self.name, "model name")


@dataclass(frozen=True)
class AdmissionSettings:
    """The budget every model of a device shares (``runtime_wasm.admission``): requests pending at once
    (queued or running, all models), the slots kept free for each higher priority level, and the cores
    divided among the models' threads."""

    max_pending: int = 32
    reserve_per_level: int = 8
    cores: int = 0  # 0: the profile's threads, else every core but one

    def __post_init__(self) -> None:
        check_numbers(self)
        if self.max_pending == 0:
            raise ConfigError("AdmissionSettings.max_pending must be positive")


@dataclass(frozen=True)
class AgentConfig:
    """One device: identity, trust root, state directory, broker and limits."""

    device_id: str
    fleet: str
    state_dir: str
    trust_root: str = ""  # signed root.json; provisions an empty state directory
    hardware_id: str = ""  # empty: CUVIL_HARDWARE_ID or generic-<machine>
    profile: str = ""
    socket: str = ""  # Unix socket for local inference; empty: not served
    log_file: str = ""  # JSON lines; empty: stderr
    telemetry_interval_s: float = 60.0  # period of telemetry summaries; 0: none
    broker: BrokerSettings = field(default_factory=BrokerSettings)
    limits: TransferLimits = field(default_factory=TransferLimits)
    download: HttpDownloadLimits = field(default_factory=HttpDownloadLimits)  # announcements with a URL
    ota: OtaConfig = field(default_factory=OtaConfig)
    serve: ServeLimits = field(default_factory=ServeLimits)
    policy: RuntimePolicy | None = None  # None: serve under the default ``RuntimePolicy()``
    http: HttpSettings | None = None  # None: no HTTP inference API
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)
    #: several model lines; empty: the single model of ``state_dir`` under ``policy``, as before
    models: tuple[ModelConfig, ...] = ()
    admission: AdmissionSettings = field(default_factory=AdmissionSettings)

    def __post_init__(self) -> None:
        names = [m.name for m in self.models]
        if len(set(names)) != len(names):
            raise ConfigError(f"agent models: duplicate names in {names}")
        if self.models and self.socket:
            raise ConfigError("agent.socket serves the single model; with [[models]] give each its socket")


def _served(config: AgentConfig) -> tuple[RuntimePolicy, int]:
    """The agent's policy as configured (its threads maybe 0: left to the device) and the cores its models
    may use: the device profile's ``threads``, else every core but one (``serving_cores``)."""
    profile = None
    if config.profile:
        try:
            profile = load_profile(config.profile)
        except DeviceProfilesError as exc:
            raise ConfigError(f"agent.profile {config.profile!r}: {exc}") from None
    policy = config.policy or (profile.policy if profile else RuntimePolicy())
    return policy, profile.threads if profile else serving_cores()


def serving_policy(config: AgentConfig) -> RuntimePolicy:
    """The policy the agent serves under: its ``[policy]``, else its device profile's default policy, else
    ``RuntimePolicy()``; a thread count left to the device (0) becomes the cores its models may use (the
    profile's ``threads``: a core stays with the agent, the app and the OS)."""
    policy, cores = _served(config)
    return policy if policy.threads else replace(policy, threads=cores)


def model_policies(config: AgentConfig) -> list[RuntimePolicy]:
    """Each ``[[models]]`` line's policy (its own, else the agent's) with its threads taken from the
    device's one core budget (``divide_threads``: higher priority first, at least one each; the budget is
    ``[admission] cores``, else the cores its models may use)."""
    default, cores = _served(config)
    policies = [m.policy or default for m in config.models]
    threads = divide_threads([(m.priority, p.threads) for m, p in zip(config.models, policies)],
                             config.admission.cores or cores)
    return [replace(p, threads=n) for p, n in zip(policies, threads)]


def _typed(cls: type, table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Check a TOML table against a dataclass's field types; unknown keys are errors, not ignored."""
    hints = typing.get_type_hints(cls)
    out = {}
    for key, value in table.items():
        kind = hints.get(key)
        if kind not in (str, int, float):
            raise ConfigError(f"{where}: unknown setting {key!r}")
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if not ok or isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: expected {kind.__name__}, got {value!r}")
        out[key] = value
    return out


def load_agent_config(path: str | os.PathLike[str]) -> AgentConfig:
    """Sections ``agent``, ``broker`` (secret: ``password_file`` or ``password_env``), ``limits``,
    ``download`` (``HttpDownloadLimits``), ``ota``, ``serve`` (``ServeLimits``), ``telemetry``
    (``TelemetrySettings``), ``policy`` (a ``RuntimePolicy``; without it the defaults: the model always
    runs in supervised workers under a deadline), ``http`` (``HttpSettings``; the table turns the HTTP
    inference API on, even empty), ``[[models]]`` (``ModelConfig``, each with an optional ``[models.policy]``
    table) and ``admission`` (``AdmissionSettings``)."""
    with open(path, "rb") as f:
        try:
            doc = tomllib.load(f)
        except ValueError as exc:  # TOMLDecodeError, or UnicodeDecodeError: not even text
            raise ConfigError(f"{path}: not a TOML file: {exc}") from None
    unknown = set(doc) - {"agent", "broker", "limits", "download", "ota", "serve", "policy", "http",
                          "telemetry", "models", "admission"}
    if unknown:
        raise ConfigError(f"{path}: unknown sections {sorted(unknown)}")
    broker = dict(doc.get("broker", {}))
    if "password_file" in broker:
        broker["password"] = Path(broker.pop("password_file")).read_text().strip()
    elif "password_env" in broker:
        broker["password"] = os.environ.get(broker.pop("password_env"), "")
    try:
        return AgentConfig(**_typed(AgentConfig, doc.get("agent", {}), "agent"),
                           broker=BrokerSettings(**_typed(BrokerSettings, broker, "broker")),
                           limits=TransferLimits(**_typed(TransferLimits, doc.get("limits", {}), "limits")),
                           download=HttpDownloadLimits(**_typed(HttpDownloadLimits, doc.get("download", {}),
                                                                "download")),
                           ota=OtaConfig(**_typed(OtaConfig, doc.get("ota", {}), "ota")),
                           serve=ServeLimits(**_typed(ServeLimits, doc.get("serve", {}), "serve")),
                           telemetry=TelemetrySettings(**_typed(TelemetrySettings, doc.get("telemetry", {}),
                                                                "telemetry")),
                           policy=RuntimePolicy.from_dict(doc["policy"]) if "policy" in doc else None,
                           http=HttpSettings(**_typed(HttpSettings, doc["http"], "http")) if "http" in doc
                           else None,
                           models=tuple(_model(m, i) for i, m in enumerate(doc.get("models", []))),
                           admission=AdmissionSettings(**_typed(AdmissionSettings, doc.get("admission", {}),
                                                                "admission")))
    except TypeError as exc:  # a required [agent] field is missing
        raise ConfigError(f"{path}: {exc}") from None


def _model(table: Any, index: int) -> ModelConfig:
    """One ``[[models]]`` table: typed fields plus an optional ``policy`` sub-table."""
    where = f"models[{index}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table, got {table!r}")
    rest = {k: v for k, v in table.items() if k != "policy"}
    policy = RuntimePolicy.from_dict(table["policy"]) if "policy" in table else None
    return ModelConfig(**_typed(ModelConfig, rest, where), policy=policy)
