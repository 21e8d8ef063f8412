"""torchrun.sh (entrypoint trainc) forwards SIGUSR1 to the workers and exits with torchrun's own
status, not with the 138 (128 + SIGUSR1) of a ``wait`` that the signal cut short."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.emit import compile_case, write_files

#: Stands in for torchrun: one worker that exits 3 on SIGUSR1 (after its signal checkpoint, as
#: the trainc worker does); torchrun returns the worker's status.
FAKE_TORCHRUN = """#!/usr/bin/env bash
"{py}" -c '
import signal, sys, time, pathlib
signal.signal(signal.SIGUSR1, lambda *_: sys.exit(3))
pathlib.Path(sys.argv[1]).write_text("ready")
time.sleep(60)' "{ready}" &
wait $!
"""


def test_usr1_then_the_workers_status(tmp_path: Path) -> None:
    _, files = compile_case("cpu-shrink-tiny")
    out = write_files(tmp_path / "out", files)
    assert "(( interrupted )) || break" in files["torchrun.sh"]
    ready = tmp_path / "ready"
    fake = tmp_path / "torchrun"
    fake.write_text(FAKE_TORCHRUN.format(py=sys.executable, ready=ready))
    fake.chmod(0o755)
    proc = subprocess.Popen(
        ["bash", str(out / "torchrun.sh")],
        cwd=tmp_path,
        env={**os.environ, "TORCHRUN": str(fake)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert ready.exists(), proc.communicate(timeout=5)
    proc.send_signal(signal.SIGUSR1)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, err
