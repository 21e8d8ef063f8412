"""sbatch.sh hosts the c10d rendezvous store for the whole srun step, so a successful multi-node
job ends with a clean log (no controller needed: fake ``srun``/``scontrol`` run the tasks here).

Hosted by node 0's torchrun, the store left with it as soon as its own exit barrier was passed,
and the other nodes' rendezvous shutdown failed (``TCPStore.cpp recvVector failed ... Connection was
likely closed``, ``DistNetworkError`` frames, "failed to shutdown the rendezvous") in a job that
succeeded. Now every torchrun joins the store as a client (``--rdzv_conf=is_host=0``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.slurm import SPECS, free_port, trainc

pytest.importorskip("torch.distributed")

NOISE = (
    "TCPStore.cpp",
    "DistNetworkError",
    "failed to shutdown the rendezvous",
    "Traceback",
    "recvVector failed",
)


def _fake_slurm(tmp: Path, nodes: int) -> Path:
    """``scontrol show hostnames`` (127.0.0.1 per node) and an ``srun`` that runs the command once
    per node with SLURM_NODEID set, each task's output in node<i>.log."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        textwrap.dedent(f"""\
        #!/bin/bash
        [ "$1 $2" = "show hostnames" ] || exit 1
        for i in $(seq {nodes}); do echo 127.0.0.1; done
        """)
    )
    (bin_dir / "srun").write_text(
        textwrap.dedent(f"""\
        #!/bin/bash
        while [[ "$1" == --* ]]; do shift; done
        pids=()
        for i in $(seq 0 {nodes - 1}); do
          SLURM_NODEID=$i "$@" > "{tmp}/node$i.log" 2>&1 & pids+=($!)
        done
        rc=0; for p in "${{pids[@]}}"; do wait "$p" || rc=$?; done; exit $rc
        """)
    )
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return bin_dir


def _compile(tmp: Path) -> Path:
    out = tmp / "out"
    proc = trainc("compile", str(SPECS / "tiny-2node-cpu.yaml"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def _port_free(port: int) -> bool:
    """Nothing listens on the port (connections left in TIME_WAIT do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _batch(tmp: Path, out: Path, port: int, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHON", "TORCHRUN", "TRAINC_RDZV_STORE", "NODE_RANK")
    }
    bin_dir = _fake_slurm(tmp, 2)
    full = {
        **base,
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_JOB_ID": "91",
        "SLURM_SUBMIT_DIR": str(out),
        "MASTER_PORT": str(port),
        **env,
    }
    return subprocess.run(
        ["bash", str(out / "sbatch.sh")],
        env=full,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_batch_step_hosts_the_store_and_every_torchrun_joins_it(tmp_path):
    out = _compile(tmp_path)
    port = free_port()
    # a torchrun stand-in: records its options, then uses the store as a client (both nodes)
    fake = tmp_path / "torchrun-probe"
    fake.write_text(
        textwrap.dedent(f"""\
        #!/bin/bash
        echo "ARGS $*"
        echo "STORE ${{TRAINC_RDZV_STORE:-none}}"
        exec {sys.executable} -c '
        import sys; from datetime import timedelta; from torch.distributed import TCPStore
        s = TCPStore("127.0.0.1", {port}, is_master=False, timeout=timedelta(seconds=30))
        print("JOINED", s.add("nodes", 1))'
        """)
    )
    fake.chmod(0o755)
    proc = _batch(tmp_path, out, port, PYTHON=sys.executable, TORCHRUN=str(fake))
    assert proc.returncode == 0, proc.stderr
    assert "note:" not in proc.stderr
    logs = [(tmp_path / f"node{i}.log").read_text() for i in (0, 1)]
    for log in logs:
        assert "STORE external" in log and "--rdzv_conf=is_host=0" in log
        assert "--rdzv_backend=c10d" in log and f"--rdzv_endpoint=127.0.0.1:{port}" in log
    assert sorted(
        ln.split()[1] for log in logs for ln in log.splitlines() if ln.startswith("JOINED")
    ) == ["1", "2"]
    assert _port_free(port)  # the store left with the batch step


def test_without_torch_in_the_batch_step_node_0_hosts_as_before(tmp_path):
    out = _compile(tmp_path)
    fake = tmp_path / "torchrun-args"
    fake.write_text('#!/bin/bash\necho "ARGS $*"\necho "STORE ${TRAINC_RDZV_STORE:-none}"\n')
    fake.chmod(0o755)
    no_torch = tmp_path / "python-without-torch"
    no_torch.write_text(
        "#!/bin/bash\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n"
    )
    no_torch.chmod(0o755)
    proc = _batch(tmp_path, out, free_port(), PYTHON=str(no_torch), TORCHRUN=str(fake))
    assert proc.returncode == 0, proc.stderr
    assert f"note: no rendezvous store from {no_torch} (ModuleNotFoundError" in proc.stderr
    for i in (0, 1):
        log = (tmp_path / f"node{i}.log").read_text()
        assert "STORE none" in log and "is_host" not in log and "--rdzv_backend=c10d" in log


AGENT = """\
import sys, time
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler
port, is_host, delay = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
h = get_rendezvous_handler(RendezvousParameters(
    backend="c10d", endpoint=f"127.0.0.1:{port}", run_id="t", min_nodes=2, max_nodes=2,
    is_host=is_host))
h.next_rendezvous()
time.sleep(delay)
print("SHUTDOWN", h.shutdown(), flush=True)
"""


def _store_code(out: Path) -> str:
    """The Python program sbatch.sh runs as the store (between ``-c '`` and ``'``)."""
    text = (out / "sbatch.sh").read_text()
    return text.split('"$TRAINC_STORE_PY" -c \'', 1)[1].split("'", 1)[0]


@pytest.mark.parametrize("external", [False, True])
def test_the_store_host_leaving_first_breaks_the_others_shutdown(tmp_path, external):
    """The mechanism, with torch's own c10d rendezvous handler (two agents of two nodes): agent 0
    leaves first, agent 1 shuts down 2.5 s after it. Hosted by agent 0, the store is gone by then
    (agent 1's shutdown fails: the log noise); hosted by sbatch.sh's store program, both
    shut down cleanly."""
    # The scenario is retried when agent 1 never reached its shutdown (a rendezvous race of
    # two processes started together on a loaded machine, not the behaviour under test).
    code = _store_code(_compile(tmp_path)) if external else None
    for _attempt in range(4):
        outcome = _store_scenario(code)
        if outcome is not None:
            break
    assert outcome is not None, "agent 1 never completed the rendezvous in 4 attempts"
    out_first, log = outcome
    assert "SHUTDOWN True" in out_first
    if external:
        assert "SHUTDOWN True" in log and not [w for w in NOISE if w in log], log
    else:
        assert "SHUTDOWN False" in log and "failed to shutdown the rendezvous" in log
        assert "TCPStore.cpp" in log


def _store_scenario(store_code: str | None) -> tuple[str, str] | None:
    """(agent 0's output, agent 1's log), or None when agent 1 did not get to its shutdown;
    ``store_code``: sbatch.sh's store program (None: agent 0 hosts the store)."""
    port = free_port()
    store = None
    external = store_code is not None
    if store_code is not None:
        store = subprocess.Popen(
            [sys.executable, "-c", store_code, "127.0.0.1", str(port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert store.stdout is not None and store.stdout.readline().strip() == "ready"
    host = "0" if external else "1"
    # agent 0 leaves 1.5 s after the rendezvous (sooner, on a loaded machine it could close the
    # rendezvous while agent 1 is still reading the completed state: RendezvousClosedError, a
    # race of the test); agent 1 shuts down 4 s after it, well after agent 0 left
    first = subprocess.Popen(
        [sys.executable, "-c", AGENT, str(port), host, "1.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    second = subprocess.run(
        [sys.executable, "-c", AGENT, str(port), "0", "4"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out_first = first.communicate(timeout=120)[0]
    if store is not None:
        store.terminate()
        assert store.wait(timeout=30) == 0
    log = second.stdout + second.stderr
    if "SHUTDOWN" not in log or "SHUTDOWN" not in out_first:
        return None
    return out_first, log


@pytest.mark.slow
@pytest.mark.worker
def test_a_successful_two_node_job_leaves_a_clean_log(tmp_path):
    """~40 s: the real torchrun and worker, 2 nodes x 2 CPU ranks, 2 steps."""
    pytest.importorskip("megatron.core")
    out = _compile(tmp_path)
    port = free_port()
    proc = _batch(tmp_path, out, port)
    logs = {i: (tmp_path / f"node{i}.log").read_text() for i in (0, 1)}
    assert proc.returncode == 0, (proc.stderr, logs)
    assert "note:" not in proc.stderr
    assert "trainc-worker: done" in logs[0] + logs[1]
    for i, log in logs.items():
        assert not [w for w in NOISE if w in log], (i, log[-3000:])
    assert _port_free(port)
