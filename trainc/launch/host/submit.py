"""Slurm side effects: the only code in trainc that runs ``sbatch``, ``squeue``, ``sacct`` and
``scontrol``.

* :func:`submit` runs ``sbatch --parsable sbatch.sh`` from the artifact folder and returns the job
  id;
* :func:`wait` follows a job to its end (``scontrol show job``, then ``sacct`` once the controller
  has forgotten the job; clusters without accounting are handled) and returns its final
  :class:`JobStatus`, whose :attr:`JobStatus.return_code` is what ``trainc submit --wait``
  exits with;
* :func:`test_only` asks a reachable controller whether it would run a batch script
  (``sbatch --test-only``: options, node/CPU/GPU/memory counts and partition names are checked, the
  script body is not; a ``bash -n`` syntax check is done as well);
* :func:`controller_status` is the cheap liveness probe (``scontrol ping``, a few ms up or down).

Every failure of the environment (no Slurm client, no controller, sbatch refusing) is a
:class:`trainc.errors.LaunchError` (exit 4 at the command line).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainc.errors import LaunchError

SCRIPT = "sbatch.sh"
# A job in one of these states will not run again by itself (REQUEUE_HOLD and SPECIAL_EXIT are
# requeued jobs held for an operator: waiting on them would never end).
TERMINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "OUT_OF_MEMORY",
        "BOOT_FAIL",
        "DEADLINE",
        "REVOKED",
        "SPECIAL_EXIT",
        "REQUEUE_HOLD",
    }
)
#: What sbatch/scontrol print when no controller answers (Slurm 22.05-24.11 wording).
_UNREACHABLE = re.compile(
    r"unable to contact slurm controller|slurm_load_ctl_conf|"
    r"could not establish a configuration source|cannot open slurm.conf",
    re.I,
)
_CLIENT_TIMEOUT_S = 60.0  # sbatch against a dead controller retries for ~18 s before it gives up


class SlurmUnavailable(LaunchError):
    """No Slurm client on PATH, or no controller answering."""


@dataclass(frozen=True, slots=True)
class JobStatus:
    """What the controller (or accounting) says about one job."""

    job_id: str
    state: str
    """Slurm job state without flags, e.g. PENDING, RUNNING, COMPLETED, FAILED, CANCELLED."""
    exit_code: int = 0
    """Exit code of the batch script (first half of Slurm's ExitCode=code:signal)."""
    signal: int = 0
    """Signal that ended the batch script (second half of ExitCode), 0 if none."""
    reason: str = ""
    nodes: str = ""
    restarts: int = 0
    """How often the job was requeued."""
    stdout: str = ""
    """The job's output file, when the controller reports it."""
    source: str = "scontrol"

    @property
    def finished(self) -> bool:
        """True once the job will not run again by itself."""
        return self.state in TERMINAL_STATES

    @property
    def return_code(self) -> int:
        """The exit code ``trainc submit --wait`` returns for a finished job: the batch script's
        exit code, else 128 + the signal that ended it, else 1 for any state but COMPLETED."""
        if self.exit_code:
            return self.exit_code
        if self.signal:
            return 128 + self.signal
        return 0 if self.state == "COMPLETED" else 1


@dataclass(frozen=True, slots=True)
class TestOnlyResult:
    """Answer of ``sbatch --test-only``: ``ok`` and Slurm's own words."""

    __test__ = False  # not a pytest test class despite the name

    ok: bool
    message: str
    returncode: int


def _run(
    cmd: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = _CLIENT_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client; a missing binary or a hang is :class:`SlurmUnavailable`."""
    if shutil.which(cmd[0]) is None:
        raise SlurmUnavailable(f"{cmd[0]}: not found on PATH (is the Slurm client installed?)")
    try:
        return subprocess.run(
            list(cmd),
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as e:
        raise SlurmUnavailable(f"{' '.join(cmd)}: no answer within {timeout:.0f} s") from e
    except OSError as e:
        raise SlurmUnavailable(f"{cmd[0]}: cannot run: {e}") from e


def _words(proc: subprocess.CompletedProcess[str]) -> str:
    return (
        " ".join((proc.stderr.strip() + "\n" + proc.stdout.strip()).split())
        or f"exit status {proc.returncode}"
    )


def controller_status(timeout: float = 15.0) -> tuple[bool, str]:
    """``(True, "...UP")`` when a Slurm controller answers ``scontrol ping``; else ``(False, why)``.

    Never raises: "no Slurm here" is an answer, not an error.
    """
    try:
        proc = _run(["scontrol", "ping"], timeout=timeout)
    except SlurmUnavailable as e:
        return False, str(e)
    text = _words(proc)
    if proc.returncode == 0 and " UP" in f" {text}":
        return True, text
    return False, f"scontrol ping: {text}"


# --- sbatch ---------------------------------------------------------------------------------------
def manifest_warnings(outdir: str | os.PathLike[str]) -> list[str]:
    """Files of OUTDIR that differ from what ``trainc compile`` wrote (``manifest.json``)."""
    path = Path(outdir) / "manifest.json"
    if not (Path(outdir) / SCRIPT).is_file():
        return []  # nothing to submit: submit() says so
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return [f"{path}: missing or unreadable; cannot tell whether the scripts were edited"]
    warnings = []
    for name in (SCRIPT, "torchrun.sh", "plan.json"):
        entry = files.get(name) if isinstance(files, dict) else None
        if not entry:
            continue
        try:
            digest = hashlib.sha256((Path(outdir) / name).read_bytes()).hexdigest()
        except OSError:
            warnings.append(f"{name}: listed in manifest.json but missing")
            continue
        if digest != entry.get("sha256"):
            warnings.append(
                f"{name}: edited since trainc compile wrote it (sha256 differs from manifest.json)"
            )
    return warnings


def parse_job_id(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` output (``ID`` or ``ID;CLUSTER``)."""
    first = stdout.strip().splitlines()[0] if stdout.strip() else ""
    job_id = first.split(";")[0].strip()
    if not job_id.isdigit():
        raise LaunchError(f"sbatch printed no job id (stdout: {stdout.strip()!r})")
    return job_id


def submit(
    outdir: str | os.PathLike[str],
    sbatch_args: Sequence[str] = (),
    *,
    env: dict[str, str] | None = None,
) -> str:
    """Submit ``OUTDIR/sbatch.sh`` from OUTDIR (so that the job finds its artifacts and writes
    its output file there); return the job id. ``sbatch_args`` go before the script (they
    override its ``#SBATCH`` lines)."""
    out = Path(outdir)
    if not (out / SCRIPT).is_file():
        raise LaunchError(f"{out / SCRIPT}: not found (run `trainc compile SPEC -o {out}` first)")
    proc = _run(["sbatch", "--parsable", *sbatch_args, SCRIPT], cwd=out, env=env)
    if proc.returncode != 0:
        words = _words(proc)
        # sbatch says "Unable to contact slurm controller" after ~18 s of retries; ask the
        # controller itself (a few ms) before blaming the script.
        up, why = (False, words) if _UNREACHABLE.search(words) else controller_status()
        if not up:
            raise SlurmUnavailable(
                f"no Slurm controller reachable ({why}); nothing was "
                "submitted: start one or set SLURM_CONF to the cluster's "
                "slurm.conf"
            )
        raise LaunchError(f"sbatch refused {out / SCRIPT}: {words}")
    return parse_job_id(proc.stdout)


# --- job state ------------------------------------------------------------------------------------
def _field(text: str, key: str) -> str:
    m = re.search(rf"(?:^|\s){key}=(\S*)", text)
    return m.group(1) if m else ""


def _exit_pair(value: str) -> tuple[int, int]:
    m = re.fullmatch(r"(\d+):(\d+)", value.strip())
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def parse_scontrol_job(job_id: str, text: str) -> JobStatus | None:
    """A :class:`JobStatus` from ``scontrol show job -o ID`` output (None if it has no JobState)."""
    line = next((ln for ln in text.splitlines() if f"JobId={job_id} " in f"{ln} "), "")
    state = _field(line, "JobState")
    if not state:
        return None
    code, sig = _exit_pair(_field(line, "ExitCode"))
    restarts = _field(line, "Restarts")
    return JobStatus(
        job_id=job_id,
        state=state.split("+")[0],
        exit_code=code,
        signal=sig,
        reason=_field(line, "Reason"),
        nodes=_field(line, "NodeList"),
        restarts=int(restarts) if restarts.isdigit() else 0,
        stdout=_field(line, "StdOut"),
        source="scontrol",
    )


def parse_sacct(job_id: str, text: str) -> JobStatus | None:
    """A :class:`JobStatus` from ``sacct -j ID -X -n -P -o JobID,State,ExitCode,NodeList``."""
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 3 and parts[0].strip() == job_id:
            code, sig = _exit_pair(parts[2])
            return JobStatus(
                job_id=job_id,
                state=parts[1].split()[0] if parts[1].split() else "",
                exit_code=code,
                signal=sig,
                nodes=parts[3].strip() if len(parts) > 3 else "",
                source="sacct",
            )
    return None


def query(job_id: str) -> JobStatus | None:
    """The job's status from the controller, else from accounting; None when neither knows it
    (a finished job the controller has purged, on a cluster without accounting)."""
    proc = _run(["scontrol", "show", "job", "-o", job_id])
    if proc.returncode == 0:
        status = parse_scontrol_job(job_id, proc.stdout)
        if status is not None:
            return status
    elif "invalid job id" not in _words(proc).lower():
        raise SlurmUnavailable(f"scontrol show job {job_id}: {_words(proc)}")
    acct = _run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State,ExitCode,NodeList"])
    if acct.returncode == 0:
        return parse_sacct(job_id, acct.stdout)
    return None  # e.g. "Slurm accounting storage is disabled"


def wait(
    job_id: str,
    *,
    poll_s: float = 0.5,
    max_poll_s: float = 5.0,
    timeout_s: float | None = None,
    on_change: Callable[[JobStatus], None] | None = None,
) -> JobStatus:
    """Poll until the job is finished; return its final status.

    Polls every ``poll_s`` seconds, backing off to ``max_poll_s``; ``on_change`` sees every new
    (state, restarts) pair. A requeued job (PENDING again) is followed through its restarts.
    Raises :class:`LaunchError` after ``timeout_s``, when the job disappears with no accounting
    to tell its end, or when the controller stays unreachable for a minute.
    """
    t0 = time.monotonic()
    last: tuple[str, int] | None = None
    seen: JobStatus | None = None
    delay, unreachable_since, missing = poll_s, None, 0
    while True:
        try:
            status = query(job_id)
            unreachable_since = None
        except SlurmUnavailable as e:
            unreachable_since = unreachable_since or time.monotonic()
            if time.monotonic() - unreachable_since > 60:
                raise SlurmUnavailable(
                    f"lost the Slurm controller while waiting for job {job_id}: {e}"
                ) from e
            status = None
        if status is None and unreachable_since is None:
            missing += 1
            if missing >= 3:
                what = f"last seen {seen.state}" if seen else "never seen"
                raise LaunchError(
                    f"job {job_id} is no longer known to the controller ({what}) "
                    "and accounting (sacct) is unavailable: its end state is unknown"
                )
        elif status is not None:
            missing = 0
            seen = status
            if (status.state, status.restarts) != last:
                last = (status.state, status.restarts)
                delay = poll_s
                if on_change:
                    on_change(status)
            if status.finished:
                return status
        if timeout_s is not None and time.monotonic() - t0 > timeout_s:
            raise LaunchError(
                f"job {job_id} still {seen.state if seen else 'unknown'} after {timeout_s:.0f} s"
            )
        time.sleep(delay)
        delay = min(max_poll_s, delay * 1.5)


def cancel(job_id: str) -> None:
    """``scancel`` the job (best effort)."""
    with contextlib.suppress(SlurmUnavailable):
        _run(["scancel", job_id])


# --- test-only ------------------------------------------------------------------------------------
def test_only(script_text: str, *, name: str = SCRIPT) -> TestOnlyResult:
    """Would the controller run this batch script? ``bash -n`` first (``--test-only`` does not
    look at the body), then ``sbatch --test-only`` from a scratch folder (nothing is submitted,
    but a job id is consumed). Raises :class:`SlurmUnavailable` when no controller answers."""
    with tempfile.TemporaryDirectory(prefix="trainc-test-only-") as tmp:
        path = Path(tmp) / name
        path.write_text(script_text, encoding="utf-8")
        syntax = _run(["bash", "-n", str(path)], timeout=30)
        if syntax.returncode != 0:
            return TestOnlyResult(False, f"bash -n: {_words(syntax)}", syntax.returncode)
        up, why = controller_status()
        if not up:
            raise SlurmUnavailable(f"no Slurm controller reachable ({why})")
        proc = _run(["sbatch", "--test-only", name], cwd=tmp)
    # the answer is on stderr, e.g. "sbatch: Job 6 to start at ... on nodes n[1-2] in partition x"
    return TestOnlyResult(proc.returncode == 0, _words(proc), proc.returncode)
