"""The device's agent (``cuvil-agent``): the composition root of the device side. It follows a fleet's
releases and commands over MQTT and installs them through the update path (``ota``), serves the installed
model to local apps (a Unix socket, and HTTP with the Open Inference Protocol and Prometheus metrics) on
the runtime (``runtime_wasm``), and reports telemetry. It reads ``agent.toml`` and runs as a daemon.

Modules: ``agent`` (the daemon's loop, ``Agent``), ``lines`` (one model's release line, ``ModelLine``),
``state`` (its state file), ``log`` (its JSON log), ``config`` (settings, ``load_agent_config``), ``cli``
(and ``launch``, the console script's entry point, which loads the CLI only when it runs);
serving: ``serve`` (``ModelHost``, the socket), ``http_api`` with ``oip`` and ``metrics``, ``payloads``
(texts, images and audio through a model's processing), ``http_client``; ``telemetry``.

Names load on first use (PEP 562), so ``import cuvil_agent`` costs nothing until one is used.
"""

from __future__ import annotations

from runtime_wasm.lazy import lazy_exports

#: public name -> the submodule defining it
_WHERE = {
    "Agent": "agent",
    "AgentConfig": "config",
    "HttpApiServer": "http_api",
    "HttpSettings": "config",
    "InferenceClient": "http_client",
    "InferenceServer": "serve",
    "JsonLog": "log",
    "ModelHost": "serve",
    "ModelLine": "lines",
    "ModelRegistry": "serve",
    "ServeLimits": "config",
    "load_agent_config": "config",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _WHERE)
