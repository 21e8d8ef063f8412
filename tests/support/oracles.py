"""Run a CPU oracle script in a subprocess: a free local port for its ``torch.distributed``
rendezvous, no GPU, its answer the JSON object on the last line of its stdout (the
differential tests ``tests/differential/test_megatron_buffers.py`` and
``test_megatron_activations.py``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any


def free_port() -> str:
    """A TCP port on 127.0.0.1 that is free now (the OS picks it; another process may take it
    before the oracle binds it, which the oracle then reports as a failure)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def run_json_oracle(oracle: Path, *args: str, timeout: float) -> Any:
    """``python ORACLE PORT ARGS...`` with ``CUDA_VISIBLE_DEVICES=""``; the JSON value on the
    last line of its stdout. Fails the calling test with the end of its stderr when it exits
    non-zero (``subprocess.TimeoutExpired`` after ``timeout`` seconds)."""
    res = subprocess.run(
        [sys.executable, str(oracle), free_port(), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])
