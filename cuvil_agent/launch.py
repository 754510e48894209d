"""The ``cuvil-agent`` console script's entry point, kept to the standard library.

Every supervised worker is a forkserver child, and multiprocessing re-runs the parent's ``__main__`` in
each (as ``__mp_main__``) so that callables defined there unpickle. For the agent that ``__main__`` is the
console script, whose top level imports its entry point: were that ``cuvil_agent.cli``, every worker start
(each swap to a new release, each install self-test, each restart after a deadline kill) would import the
CLI's dependencies again, measured at +84 ms per MobileNetV2 224 reload (134 vs 50 ms) and ~10 MB per
worker. The CLI loads only when ``main`` runs, which a worker never does.

``main`` also keeps numpy's OpenBLAS to one thread (unless the environment says otherwise) before anything
imports numpy: its other threads start at import and spin ~120 ms waiting for work the agent never gives
(its compute is the models' wasm), on a 2-core device a whole core taken from every worker's model load
and first answer (measured: a 46.5 MB model loaded in 37 ms beside the spinning thread, 24 ms without,
medians of 10 fresh processes).
Workers inherit the setting with the environment.
"""

from __future__ import annotations

import os
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from .cli import main as cli_main

    return cli_main(argv)
