"""The operator's side of a fleet: ``publisher`` (releases, staged rollouts and commands over MQTT,
``Publisher``), ``telemetry`` (the devices' telemetry collected, ``TelemetryCollector``), ``dashboard``
(a live page of the fleet) and ``store`` (fleet state in SQLite or PostgreSQL, ``open_store``).

Nothing is imported here: each tool loads what it uses, and the device side never imports this package.
"""
