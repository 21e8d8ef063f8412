"""trainc.launch.host.submit and the submit/lint --slurm commands against fake Slurm clients (no
cluster).

The fakes are small shell scripts put first on PATH; they answer like Slurm 22.05 does (the real
answers are checked by the ``slurm``-marked tests on the local cluster).
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from tests.support.slurm import SPECS, trainc
from trainc.launch.host import submit as slurm

SCONTROL_RUNNING = (
    "JobId=42 JobName=tiny UserId=root(0) GroupId=root(0) Priority=1 JobState=RUNNING "
    "Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 ExitCode=0:0 "
    "RunTime=00:00:01 NodeList=n[1-2] StdOut=/tmp/out dir/tiny-42.out Power=\n"
)


def test_parse_scontrol_job():
    st = slurm.parse_scontrol_job("42", SCONTROL_RUNNING)
    assert st is not None
    assert (st.state, st.nodes, st.restarts, st.finished) == ("RUNNING", "n[1-2]", 0, False)
    done = slurm.parse_scontrol_job(
        "42", SCONTROL_RUNNING.replace("RUNNING", "FAILED").replace("ExitCode=0:0", "ExitCode=3:0")
    )
    assert done is not None and done.finished and done.return_code == 3
    assert slurm.parse_scontrol_job("42", "JobId=420 JobState=RUNNING\n") is None


@pytest.mark.parametrize(
    ("state", "code", "sig", "rc"),
    [
        ("COMPLETED", 0, 0, 0),
        ("FAILED", 1, 0, 1),
        ("FAILED", 137, 0, 137),
        ("CANCELLED", 0, 15, 143),
        ("TIMEOUT", 0, 0, 1),
        ("NODE_FAIL", 0, 0, 1),
    ],
)
def test_return_code(state, code, sig, rc):
    assert slurm.JobStatus("1", state, code, sig).return_code == rc


def test_parse_sacct_and_job_id():
    st = slurm.parse_sacct("7", "7|CANCELLED by 0|0:15|n1\n")
    assert st is not None and (st.state, st.signal, st.source) == ("CANCELLED", 15, "sacct")
    assert slurm.parse_job_id("12;trainc-test\n") == "12"
    with pytest.raises(slurm.LaunchError):
        slurm.parse_job_id("sbatch: error: nope\n")


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """Fake sbatch/scontrol/sacct on PATH. scontrol answers RUNNING for the first two queries,
    then 'Invalid job id' (the job was purged); sacct is 'disabled' unless FAKE_SACCT is set."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "count"
    state.write_text("0")
    scripts = {
        "sbatch": f"""
            echo "$PWD $*" >> {tmp_path}/sbatch.log
            if [ -n "$FAKE_SBATCH_FAIL" ]; then echo "sbatch: error: $FAKE_SBATCH_FAIL" >&2; exit 1; fi
            case " $* " in *" --test-only "*) echo "sbatch: Job 9 to start at now on n1" >&2; exit 0;; esac
            echo "42;trainc-test"
            """,
        "scontrol": f"""
            if [ "$1" = ping ]; then echo "Slurmctld(primary) at vm is ${{FAKE_PING:-UP}}"; [ "${{FAKE_PING:-UP}}" = UP ]; exit; fi
            n=$(cat {state}); echo $((n + 1)) > {state}
            if [ "$n" -lt 2 ]; then echo "{SCONTROL_RUNNING.strip()}"; exit 0; fi
            echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1
            """,
        "sacct": """
            if [ -n "$FAKE_SACCT" ]; then echo "$FAKE_SACCT"; exit 0; fi
            echo "Slurm accounting storage is disabled" >&2; exit 1
            """,
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text("#!/bin/bash\n" + textwrap.dedent(body))
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path


@pytest.fixture
def outdir(tmp_path):
    out = tmp_path / "out"
    proc = trainc("compile", str(SPECS / "tiny-2node-cpu.yaml"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    return out


def test_submit_runs_sbatch_from_outdir(fake_slurm, outdir):
    assert slurm.submit(outdir, ["--nodelist=n[1-2]"]) == "42"
    log = (fake_slurm / "sbatch.log").read_text()
    assert log.strip() == f"{outdir} --parsable --nodelist=n[1-2] sbatch.sh"
    assert slurm.manifest_warnings(outdir) == []
    (outdir / "sbatch.sh").write_text((outdir / "sbatch.sh").read_text() + "# edited\n")
    assert any("sbatch.sh: edited" in w for w in slurm.manifest_warnings(outdir))


def test_wait_uses_sacct_after_the_controller_forgets(fake_slurm, monkeypatch):
    monkeypatch.setenv("FAKE_SACCT", "42|FAILED|3:0|n[1-2]")
    seen = []
    st = slurm.wait("42", poll_s=0.01, on_change=seen.append)
    assert (st.state, st.return_code, st.source) == ("FAILED", 3, "sacct")
    assert [s.state for s in seen] == ["RUNNING", "FAILED"]


def test_wait_without_accounting_says_the_end_is_unknown(fake_slurm):
    with pytest.raises(slurm.LaunchError, match=r"accounting .* unavailable"):
        slurm.wait("42", poll_s=0.01)


def test_cli_submit_prints_job_id(fake_slurm, outdir):
    proc = trainc("submit", str(outdir), env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "42"


def test_cli_submit_wait_exits_with_the_job_exit_code(fake_slurm, outdir):
    env = dict(os.environ, FAKE_SACCT="42|FAILED|7:0|n[1-2]")
    proc = trainc("submit", str(outdir), "--wait", env=env)
    assert proc.returncode == 7, proc.stderr
    assert proc.stdout.strip() == "42"
    assert "job 42 RUNNING on n[1-2]" in proc.stderr and "FAILED" in proc.stderr


@pytest.mark.parametrize(
    ("sacct", "hint"),
    [
        ("42|FAILED|143:0|n[1-2]", True),
        ("42|FAILED|7:0|n[1-2]", False),
        ("42|COMPLETED|0:0|n[1-2]", False),
    ],
)
def test_cli_submit_wait_explains_a_terminated_task(fake_slurm, outdir, sacct, hint):
    """143 = 128 + SIGTERM: srun's --kill-on-bad-exit ended a task after another one failed."""
    proc = trainc("submit", str(outdir), "--wait", env=dict(os.environ, FAKE_SACCT=sacct))
    assert ("srun ended the other tasks after one failed" in proc.stderr) == hint, proc.stderr


def test_cli_submit_missing_outdir_is_exit_4(tmp_path):
    proc = trainc("submit", str(tmp_path / "nope"))
    assert proc.returncode == 4
    assert "trainc compile" in proc.stderr
    assert "manifest" not in proc.stderr


def test_lint_slurm_without_controller_warns(fake_slurm):
    env = dict(os.environ, FAKE_PING="DOWN")
    spec = str(SPECS / "tiny-2node-cpu.yaml")
    proc = trainc("lint", "--slurm", spec, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "warning" in proc.stderr and "no Slurm controller reachable" in proc.stderr
    proc = trainc("lint", "--slurm", "--werror", spec, env=env)
    assert proc.returncode == 4
    proc = trainc("lint", "--slurm", "--format", "json", spec, env=env)
    rec = json.loads(proc.stdout)["specs"][0]
    assert rec["slurm"]["checked"] is False and rec["slurm"]["ok"] is None and rec["ok"] is True


def test_lint_slurm_with_controller(fake_slurm):
    proc = trainc(
        "lint",
        "--slurm",
        "--format",
        "json",
        str(SPECS / "tiny-2node-cpu.yaml"),
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(proc.stdout)["specs"][0]
    assert rec["slurm"] == {
        "checked": True,
        "ok": True,
        "message": "sbatch --test-only accepted sbatch.sh: sbatch: Job 9 to start at now on n1",
    }


def test_lint_without_slurm_flag_has_no_slurm_record():
    proc = trainc("lint", "--format", "json", str(SPECS / "tiny-2node-cpu.yaml"))
    assert "slurm" not in json.loads(proc.stdout)["specs"][0]


def test_slurm_client_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert slurm.controller_status()[0] is False
    with pytest.raises(slurm.SlurmUnavailable, match="not found on PATH"):
        slurm.query("1")
    assert isinstance(Path(tmp_path), Path)


@pytest.mark.parametrize(
    ("ping", "sbatch_says", "expect"),
    [
        # the controller is down: sbatch's own words say so, or only the ping does
        (
            "DOWN",
            "Batch job submission failed: Unable to contact slurm controller (connect failure)",
            "no Slurm controller reachable (sbatch: error: Batch job submission failed: Unable to "
            "contact slurm controller (connect failure))",
        ),
        (
            "UP",
            "Batch job submission failed: Unable to contact slurm controller (connect failure)",
            "no Slurm controller reachable",
        ),
        (
            "DOWN",
            "Batch job submission failed: Socket timed out on send/recv operation",
            "no Slurm controller reachable (scontrol ping: Slurmctld(primary) at vm is DOWN)",
        ),
        # the controller answered and refused the script: that is about the script
        (
            "UP",
            "Batch job submission failed: Invalid partition name specified",
            "sbatch refused {out}/sbatch.sh: sbatch: error: Batch job submission failed: Invalid "
            "partition name specified",
        ),
    ],
)
def test_cli_submit_says_whether_the_controller_or_the_script_is_at_fault(
    fake_slurm, outdir, ping, sbatch_says, expect
):
    env = dict(os.environ, FAKE_PING=ping, FAKE_SBATCH_FAIL=sbatch_says)
    proc = trainc("submit", str(outdir), env=env)
    assert proc.returncode == 4
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainc submit: ")
    assert expect.format(out=outdir) in lines[0]
    assert ("sbatch refused" in lines[0]) == ("Invalid partition" in sbatch_says)
    if "no Slurm controller" in expect:
        assert lines[0].endswith(
            "nothing was submitted: start one or set SLURM_CONF to the cluster's slurm.conf"
        )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--timeout", "10"], "--timeout needs --wait"),
        (["--wait", "--timeout", "-5"], "--timeout -5 must be a positive number of seconds"),
    ],
)
def test_cli_submit_timeout_is_checked_before_submitting(fake_slurm, outdir, args, said):
    """--timeout without --wait, or not positive, was accepted without a word (trial 13)."""
    proc = trainc("submit", str(outdir), *args, env=dict(os.environ))
    assert proc.returncode == 2 and proc.stdout == "" and said in proc.stderr
