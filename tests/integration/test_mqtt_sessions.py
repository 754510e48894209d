"""Host tools leave no broker session behind, and a publish waits out a slow broker (real Mosquitto on
127.0.0.1, MQTT 5): a publisher's or a dashboard's client id, reconnected with clean_start=False, finds no
session (a device's persistent one does, the control); a broker stopped mid-publish delays the
acknowledgement without failing the publish while the limits' doubling waits last."""

from __future__ import annotations

import signal
import threading

import paho.mqtt.client as paho
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from cuvil_edge.fleet.dashboard import FleetView
from cuvil_edge.fleet.publisher import Publisher
from cuvil_edge.testing.broker import LocalBroker
from ota.config import TransferLimits
from ota.errors import TransportError
from ota.transport import MqttClient


def _session_left(broker: LocalBroker, client_id: str) -> bool:
    """Whether the broker still holds a session for ``client_id``: connect as it without a clean start and
    read CONNACK's session-present flag (the probe's own session expires at once)."""
    got: dict[str, bool] = {}
    done = threading.Event()

    def on_connect(_c, _u, flags, _rc, _p) -> None:
        got["present"] = bool(flags.session_present)
        done.set()

    c = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=paho.MQTTv5)
    c.on_connect = on_connect
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 0
    c.connect("127.0.0.1", broker.port, 30, clean_start=False, properties=props)
    c.loop_start()
    try:
        assert done.wait(10), "no CONNACK"
    finally:
        c.disconnect()
        c.loop_stop()
    return got["present"]


@pytest.fixture
def mosquitto(tmp_path):
    with LocalBroker(tmp_path / "broker", backend="mosquitto") as b:
        yield b


def test_host_tools_use_clean_sessions_and_a_device_keeps_its_own(mosquitto, tmp_path) -> None:
    settings = mosquitto.settings()
    device = MqttClient(settings, "cuvil-fleet-dev-1", lambda *_: None).start(wait_s=10)
    device.subscribe(["cuvil/fleet/command/dev-1"])
    device.close()
    assert _session_left(mosquitto, "cuvil-fleet-dev-1")  # the control: a device's session waits for it

    pub = Publisher(settings, "fleet", [Ed25519PrivateKey.generate()], tmp_path / "state.json").start()
    view = FleetView(settings, "fleet").start()
    ids = [pub.mqtt.client_id, view.mqtt.client_id, view.telemetry.mqtt.client_id]
    assert len(set(ids)) == 3 and all(i.startswith(("cuvil-publisher-fleet-", "cuvil-dashboard-fleet-"))
                                      for i in ids)
    pub.close()
    view.close()
    assert not any(_session_left(mosquitto, i) for i in ids)


def test_a_publish_waits_out_a_stopped_broker(mosquitto) -> None:
    patient = TransferLimits(publish_ack_timeout_s=1.0, publish_attempts=5)  # waits 1 + 2 + 4 + 8 + 16 s
    client = MqttClient(mosquitto.settings(), "cuvil-publisher-slow", lambda *_: None, patient,
                        persistent=False).start(wait_s=10)
    try:
        mosquitto.proc.send_signal(signal.SIGSTOP)
        try:  # one short wait while the broker cannot answer: the acknowledgement is not there
            with pytest.raises(TransportError, match="not acknowledged within 0.5s"):
                client.publish("cuvil/fleet/slow", b"one", timeout_s=0.5)
            resume = threading.Timer(2.0, mosquitto.proc.send_signal, (signal.SIGCONT,))
            resume.start()
            client.publish("cuvil/fleet/slow", b"two", retain=True)  # the doubling waits outlast the stop
            resume.join()
        finally:
            mosquitto.proc.send_signal(signal.SIGCONT)
        assert client.sent == 1
    finally:
        client.close()
