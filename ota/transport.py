"""One MQTT connection (paho-mqtt 2.x) that keeps itself up: reconnect with exponential backoff and jitter,
subscriptions restored on every connect, paho errors wrapped in ours.

Giving up: with ``TransferLimits.max_connect_failures`` = 0 (the default) never; retries settle at
``backoff_max_s``, so a device offline for days keeps serving locally and reconnects when the broker
returns. A broker refusing the credentials is retried too (every ``backoff_max_s``, logged as a warning):
they can be fixed on the broker's side without touching the device. With a finite budget (tools that
want to fail fast) the client gives up after that many failures in a row, and at once on a refusal.

QoS 1 throughout. MQTT 5 when ``BrokerSettings.protocol`` is 5: a session expiry interval makes the
session persistent (commands wait for an offline device), message expiry and user properties ride
on publishes; with 3.1.1 the session is persistent through ``clean_session=False``.
"""

from __future__ import annotations

import logging
import random
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from .config import BrokerSettings, TransferLimits
from .errors import NotAuthorized, TransportError

if TYPE_CHECKING:  # paho loads with the first client, not with ``ota`` (the host imports ota for its formats)
    import paho.mqtt.client as paho

log = logging.getLogger(__name__)
#: (topic, payload, retained) for every message received
OnMessage = Callable[[str, bytes, bool], None]
_AUTH_CODES = {0x86, 0x87, 0x8C}  # bad user name or password, not authorized, bad authentication method


class MqttClient:
    """Runs its own network thread; ``publish`` blocks until the broker acknowledges (QoS 1)."""

    def __init__(self, settings: BrokerSettings, client_id: str, on_message: OnMessage,
                 limits: TransferLimits | None = None, will: tuple[str, bytes] | None = None,
                 on_connect: Callable[[], None] | None = None, persistent: bool = True) -> None:
        """``persistent``: the broker keeps the session (subscriptions, queued QoS 1 messages) for
        ``settings.session_expiry_s`` after a disconnect, as a device needs for the commands sent while it
        is offline; False: a clean session the broker drops at disconnect, as host tools want (a CLI run
        must leave no session queueing statuses behind)."""
        self.settings, self.client_id, self.persistent = settings, client_id, persistent
        self.limits = limits or TransferLimits()
        self._on_message, self._on_connect_hook = on_message, on_connect
        import paho.mqtt.client as paho

        v5 = settings.protocol == 5
        self._client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id,
                                   protocol=paho.MQTTv5 if v5 else paho.MQTTv311,
                                   clean_session=None if v5 else not persistent, reconnect_on_failure=False)
        if settings.username:
            self._client.username_pw_set(settings.username, settings.password or None)
        if settings.tls_ca:
            self._client.tls_set(ca_certs=settings.tls_ca, certfile=settings.tls_cert or None,
                                 keyfile=settings.tls_key or None, cert_reqs=ssl.CERT_REQUIRED)
        if will:
            self._client.will_set(will[0], will[1], qos=1, retain=True)
        self._client.on_connect = self._connected
        self._client.on_disconnect = self._disconnected
        self._client.on_message = self._message
        self._client.on_publish = self._published
        self._subs: set[str] = set()
        self._acks: dict[int, int] = {}
        self._lock = threading.Lock()
        self._up = threading.Event()
        self._stop = threading.Event()
        self._failures = 0  # in a row; reset by a successful connect
        self.fatal: TransportError | None = None  # why the client gave up
        self.last_error: TransportError | None = None  # the latest connect failure, until a connect succeeds
        # counters for telemetry and benchmarks
        self.connects = self.received = self.sent = self.connect_failures = 0
        self._thread = threading.Thread(target=self._run, name=f"mqtt-{client_id}", daemon=True)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, wait_s: float | None = None) -> MqttClient:
        """Start the network thread; with ``wait_s``, wait for the first connection or close and raise
        (a caller that got an exception has no client to close, so no retry loop is left behind)."""
        self._thread.start()
        if wait_s is not None:
            try:
                self.wait_connected(wait_s)
            except TransportError:
                self.close()
                raise
        return self

    def wait_connected(self, timeout_s: float) -> None:
        """Wait for a connection. Raises ``NotAuthorized`` as soon as the broker refuses the credentials
        (they will not fix themselves while a caller waits; the client itself keeps retrying unless its
        budget is finite), the client's ``fatal`` error once it gave up, else ``TransportError`` after
        ``timeout_s``."""
        end = time.monotonic() + timeout_s
        while not self._up.wait(min(0.05, max(end - time.monotonic(), 0.0))):
            refused = self.last_error if isinstance(self.last_error, NotAuthorized) else None
            if self.fatal or refused:
                raise self.fatal or refused
            if time.monotonic() >= end or not self._thread.is_alive():
                raise TransportError(f"no connection to {self._where} within {timeout_s}s"
                                     + (f" ({self.last_error})" if self.last_error else ""))

    @property
    def connected(self) -> bool:
        return self._up.is_set()

    @property
    def alive(self) -> bool:
        """False once a finite failure budget is spent (``fatal`` says why) or after ``close``."""
        return self._thread.is_alive()

    def close(self, final: tuple[str, bytes] | None = None) -> None:
        """Optionally publish a last retained message, then disconnect cleanly and join the thread."""
        if final and self.connected:
            try:
                self.publish(final[0], final[1], retain=True, timeout_s=2.0)
            except TransportError as exc:
                log.warning("final publish failed: %s", exc)
        self._stop.set()
        self._client.disconnect()
        if self._thread.is_alive():
            self._thread.join(10.0)

    @property
    def _where(self) -> str:
        return f"{self.settings.host}:{self.settings.port}"

    def _run(self) -> None:
        """Connect, serve until the link drops, back off (jittered, doubling), repeat; see the module
        docstring for when it gives up."""
        import paho.mqtt.client as paho
        from paho.mqtt.packettypes import PacketTypes
        from paho.mqtt.properties import Properties

        first = True
        while not self._stop.is_set():
            try:
                if first:
                    extra = {}
                    if self.settings.protocol == 5:
                        props = Properties(PacketTypes.CONNECT)
                        props.SessionExpiryInterval = self.settings.session_expiry_s if self.persistent else 0
                        extra = {"clean_start": not self.persistent, "properties": props}
                    self._client.connect(self.settings.host, self.settings.port, self.settings.keepalive_s,
                                         **extra)
                    first = False
                else:
                    self._client.reconnect()
                self._client.loop_forever()
            except (OSError, ValueError, paho.WebsocketConnectionError) as exc:
                log.info("connect to %s failed: %s", self._where, exc)
                self._failed(TransportError(f"connect to {self._where} failed: {exc}"))
            self._up.clear()
            if self._stop.is_set() or self.fatal:
                return
            budget = self.limits.max_connect_failures
            if budget and self._failures > budget:
                self.fatal = TransportError(f"{self._failures} failures in a row connecting to {self._where}")
                return
            refused = isinstance(self.last_error, NotAuthorized)  # no use asking again soon
            self._stop.wait(self.limits.backoff_max_s if refused else
                            self.limits.backoff_s(self._failures, random.random()))

    def _failed(self, exc: TransportError) -> None:
        self._failures += 1
        self.connect_failures += 1
        self.last_error = exc

    # -- paho callbacks (network thread) ------------------------------------------------------
    def _connected(self, client: paho.Client, _u: object, _flags: object, reason: paho.ReasonCode,
                   _props: object) -> None:
        if reason.is_failure:
            if reason.value not in _AUTH_CODES and reason.value not in (4, 5):  # 3.1.1: bad login, not auth.
                self._failed(TransportError(f"broker {self._where} refused the connection: {reason}"))
                return
            self._failed(NotAuthorized(f"broker {self._where} refused the connection: {reason}"))
            if self.limits.max_connect_failures:
                self.fatal = self.last_error
            else:
                log.warning("broker %s refused the credentials (%s); retrying every %s s", self._where,
                            reason, self.limits.backoff_max_s)
            return
        self._failures = 0
        self.last_error = None
        self.connects += 1
        with self._lock:
            subs = sorted(self._subs)
        if subs:
            client.subscribe([(t, 1) for t in subs])
        self._up.set()
        if self._on_connect_hook:
            self._on_connect_hook()

    def _disconnected(self, _c: paho.Client, _u: object, _flags: object, reason: paho.ReasonCode,
                      _props: object) -> None:
        self._up.clear()
        if not self._stop.is_set():
            log.info("disconnected from %s: %s", self._where, reason)

    def _message(self, _c: paho.Client, _u: object, msg: paho.MQTTMessage) -> None:
        self.received += 1
        try:
            topic = msg.topic
        except UnicodeDecodeError:  # MQTT topics are UTF-8: no handler could match this one
            log.warning("message refused: its topic is not UTF-8")
            return
        try:
            self._on_message(topic, msg.payload, bool(msg.retain))
        except Exception:  # a handler bug must not kill the network thread
            log.exception("message handler failed on %s", topic)

    def _published(self, _c: paho.Client, _u: object, mid: int, reason: paho.ReasonCode,
                   _props: object) -> None:
        self._acks[mid] = reason.value

    # -- operations (any thread) --------------------------------------------------------------
    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe now (a repeated subscription re-sends retained messages) and after every reconnect."""
        topics = list(topics)
        with self._lock:
            self._subs.update(topics)
        if topics and self.connected:
            self._client.subscribe([(t, 1) for t in topics])

    def unsubscribe(self, topics: Iterable[str]) -> None:
        topics = list(topics)
        with self._lock:
            self._subs.difference_update(topics)
        if topics and self.connected:
            self._client.unsubscribe(topics)

    def publish(self, topic: str, payload: bytes, retain: bool = False, expiry_s: int | None = None,
                user: Mapping[str, str] | None = None, timeout_s: float | None = None) -> None:
        """QoS 1 publish acknowledged by the broker; ``NotAuthorized`` when its ACL refuses (MQTT 5).
        ``timeout_s``: one wait for the acknowledgement; None: the limits' doubling waits
        (``TransferLimits.publish_ack_timeout_s`` x ``publish_attempts``)."""
        props = None
        if self.settings.protocol == 5 and (expiry_s or user):
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties

            props = Properties(PacketTypes.PUBLISH)
            if expiry_s:
                props.MessageExpiryInterval = int(expiry_s)
            if user:
                props.UserProperty = list(user.items())
        waits = [timeout_s] if timeout_s is not None else \
            [self.limits.publish_ack_timeout_s * 2 ** i for i in range(self.limits.publish_attempts)]
        try:
            info = self._client.publish(topic, payload, qos=1, retain=retain, properties=props)
            for i, wait in enumerate(waits):
                info.wait_for_publish(wait)
                if info.is_published() or self._stop.is_set():
                    break
                if i + 1 < len(waits):
                    log.warning("publish to %s not acknowledged within %gs: waiting %gs more", topic, wait,
                                waits[i + 1])
        except (RuntimeError, ValueError, OSError) as exc:
            raise TransportError(f"publish to {topic} failed: {exc}") from exc
        self._acknowledged(topic, info, sum(waits))

    def _acknowledged(self, topic: str, info: paho.MQTTMessageInfo, waited_s: float) -> None:
        """Count an acknowledged publish; raise for one never acknowledged or refused by the broker."""
        if not info.is_published():
            raise TransportError(f"publish to {topic} not acknowledged within {waited_s:g}s")
        self.sent += 1
        code = self._acks.pop(info.mid, 0)
        if code in _AUTH_CODES:
            raise NotAuthorized(f"broker refused publish to {topic} (reason 0x{code:02x})")
        if code >= 0x80:
            raise TransportError(f"broker refused publish to {topic} (reason 0x{code:02x})")

    def publish_many(self, messages: Iterable[tuple[str, bytes]], retain: bool = False,
                     timeout_s: float = 60.0) -> None:
        """QoS 1 publishes pipelined (paho keeps its in-flight window of them outstanding), all acknowledged
        within ``timeout_s`` together: a batch of small messages waits for round trips once, not each."""
        end = time.monotonic() + timeout_s
        topic = ""
        try:
            sent = [(topic, self._client.publish(topic, payload, qos=1, retain=retain))
                    for topic, payload in messages]
            for topic, info in sent:
                info.wait_for_publish(max(end - time.monotonic(), 0.001))
                self._acknowledged(topic, info, timeout_s)
        except (RuntimeError, ValueError, OSError) as exc:
            raise TransportError(f"publish to {topic} failed: {exc}") from exc
