"""``trainc submit`` and the Slurm check of ``trainc lint --slurm`` (the subprocess work is in
:mod:`trainc.launch.host.submit`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from trainc.cli._common import EXIT_ENV, EXIT_OK, EXIT_SPEC, out


def _slurm_check(result: Any) -> dict[str, Any]:
    """``sbatch --test-only`` of the spec's sbatch.sh: {"checked", "ok", "message"}; ok is None
    when the check could not be made (no controller, nothing generated)."""
    from trainc.launch.host.submit import SlurmUnavailable, test_only

    if not result.ok:
        return {"checked": False, "ok": None, "message": "not checked: the spec has errors"}
    script = result.files.get("sbatch.sh")
    if not script:
        return {"checked": False, "ok": None, "message": "not checked: no sbatch.sh was generated"}
    try:
        answer = test_only(script)
    except SlurmUnavailable as e:
        return {
            "checked": False,
            "ok": None,
            "message": f"not checked: {e}; start one or set SLURM_CONF to the cluster's slurm.conf",
        }
    verdict = "accepted" if answer.ok else "rejected"
    return {
        "checked": True,
        "ok": answer.ok,
        "message": f"sbatch --test-only {verdict} sbatch.sh: {answer.message}",
    }


def _print_slurm_check(path: str, check: dict[str, Any]) -> None:
    if check["ok"] is None:
        print(f"warning: {path}: slurm: {check['message']}", file=sys.stderr)
    elif check["ok"]:
        out(f"{path}: slurm: ok: {check['message']}")
    else:
        print(f"error: {path}: slurm: {check['message']}", file=sys.stderr)
        out(f"{path}: slurm: FAILED")


def _submit(args: argparse.Namespace) -> int:
    """``trainc submit OUTDIR [--wait]``: the job id on stdout, progress on stderr."""
    from trainc.errors import LaunchError
    from trainc.launch.host import submit as slurm

    if args.timeout is not None and (not args.wait or not args.timeout > 0):
        print(
            "trainc submit: --timeout "
            + (
                f"{args.timeout:g} must be a positive number of seconds"
                if args.wait
                else "needs --wait (it bounds the wait for the job's end)"
            ),
            file=sys.stderr,
        )
        return EXIT_SPEC
    extra = list(args.sbatch_args)
    for warning in slurm.manifest_warnings(args.outdir):
        print(f"trainc submit: warning: {warning}", file=sys.stderr)
    try:
        job_id = slurm.submit(args.outdir, extra)
    except LaunchError as e:
        print(f"trainc submit: {e}", file=sys.stderr)
        return EXIT_ENV
    out(job_id)
    if not args.wait:
        print(f"trainc submit: submitted job {job_id} from {args.outdir}", file=sys.stderr)
        return EXIT_OK

    def show(st: slurm.JobStatus) -> None:
        where = f" on {st.nodes}" if st.nodes and st.nodes != "(null)" else ""
        again = f" (restart {st.restarts})" if st.restarts else ""
        why = f" ({st.reason})" if st.reason and st.reason != "None" and not st.finished else ""
        print(
            f"trainc submit: job {job_id} {st.state}{again}{where}{why}",
            file=sys.stderr,
            flush=True,
        )

    try:
        final = slurm.wait(job_id, timeout_s=args.timeout, on_change=show)
    except KeyboardInterrupt:
        print(
            f"trainc submit: stopped waiting; job {job_id} goes on (scancel {job_id} stops it)",
            file=sys.stderr,
        )
        return 130
    except LaunchError as e:
        print(f"trainc submit: {e}", file=sys.stderr)
        return EXIT_ENV
    output = f"; output: {final.stdout}" if final.stdout else ""
    print(
        f"trainc submit: job {job_id} {final.state}, exit code {final.exit_code}:{final.signal}"
        f" -> {final.return_code}{output}",
        file=sys.stderr,
    )
    if final.state != "COMPLETED" and final.exit_code > 128:
        # srun returns the highest task exit code, and a task that --kill-on-bad-exit ended
        # reports 128 + SIGTERM even when another task's failure started it (srun(1), RETURN VALUE)
        print(
            f"trainc submit: {final.exit_code} = 128 + signal {final.exit_code - 128}: srun "
            "ended the other tasks after one failed (--kill-on-bad-exit); the first "
            "'error: ... Exited with exit code' line in the output names the task that did",
            file=sys.stderr,
        )
    return final.return_code
