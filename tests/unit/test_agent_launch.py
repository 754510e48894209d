"""The agent's entry point (``cuvil_agent.launch``) keeps numpy's OpenBLAS to one thread: its extra threads
spin ~120 ms after numpy's import, a core taken from each worker's model load on a 2-core device."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """\
import os
import cuvil_agent.launch as launch
try:
    launch.main(['--help'])
except SystemExit:
    pass
import numpy
print('blas', os.environ['OPENBLAS_NUM_THREADS'], len(os.listdir('/proc/self/task')))
"""


@pytest.mark.parametrize("given, want", [(None, "1"), ("2", "2")])
def test_one_blas_thread_unless_the_environment_says_otherwise(given, want):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    _, blas, threads = proc.stdout.splitlines()[-1].split()
    assert blas == want
    if given is None:
        assert threads == "1", f"{threads} threads after numpy's import"
