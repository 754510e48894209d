"""Over-the-air updates: bundle format and verification, trust metadata, MQTT transport, installer.

Device side: imports nothing from the host packager (``cuvil_edge``).
"""

__all__: list[str] = []
