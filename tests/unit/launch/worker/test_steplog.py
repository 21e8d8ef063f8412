"""The worker's step-log line (trainc.launch.worker.steplog): the bytes every engine's loop
writes, the parser that reads them back, and calibrate's lenient reading of a log."""

from __future__ import annotations

import math
import re

import pytest

from trainc.launch.worker.steplog import (
    StepLine,
    format_step_line,
    parse_step_line,
    step_times,
)

VALUES = [
    (1, 10.3972244, 3.14159265358979, 0.61234567, 128, 0.0081),
    (24, float("nan"), float("nan"), 12.5, 4096, 1e-7),
    (1000000, 1.0e-12, 123456789.123, 0.00004, 1, 0.0),
]


@pytest.mark.parametrize(("step", "loss", "gn", "dt", "tokens", "lr"), VALUES)
@pytest.mark.parametrize("replay", [False, True])
@pytest.mark.parametrize("ok", [None, True, False])
def test_the_line_is_the_documented_format(step, loss, gn, dt, tokens, lr, replay, ok) -> None:
    prefix = "resume-check " if replay else ""
    want = (
        f"{prefix}step={step} loss={loss:.9g} grad_norm={gn:.9g} "
        f"step_time_s={dt:.4f} tokens_per_s={tokens / dt:.1f} lr={lr:.6g}"
    ) + ("" if ok is None else f" skipped={int(not ok)}")
    got = format_step_line(
        step,
        loss=loss,
        grad_norm=gn,
        step_time_s=dt,
        tokens=tokens,
        lr=lr,
        skipped=None if ok is None else not ok,
        resume_check=replay,
    )
    assert got == want
    back = parse_step_line(got)
    assert back is not None
    assert (back.step, back.resume_check) == (step, replay)
    assert back.skipped == (None if ok is None else not ok)
    for field, value in (("loss", loss), ("grad_norm", gn), ("lr", lr)):
        parsed = getattr(back, field)
        assert (math.isnan(parsed) and math.isnan(value)) or math.isclose(
            parsed, value, rel_tol=1e-5, abs_tol=1e-12
        )


@pytest.mark.parametrize(
    "line",
    [
        "trainc-worker: saved checkpoint step=3 to /tmp/x",
        "step=1 loss=1 step_time_s=0.1",  # fields missing
        "step=1 loss=x grad_norm=1 step_time_s=0.1 tokens_per_s=1 lr=0",
        "steps=1 loss=1 grad_norm=1 step_time_s=0.1 tokens_per_s=1 lr=0",
    ],
)
def test_what_is_not_a_step_line(line: str) -> None:
    assert parse_step_line(line) is None


def test_parse_keeps_the_fields() -> None:
    line = (
        "  step=12 loss=3.355 grad_norm=1.016 step_time_s=0.61 tokens_per_s=416.5 lr=0.0081 "
        "skipped=0\n"
    )
    assert parse_step_line(line) == StepLine(12, 3.355, 1.016, 0.61, 416.5, 0.0081, False, False)


#: The reading ``trainc calibrate`` applied to a worker log before the format had one owner.
_CALIBRATE = re.compile(r"\bstep=(\d+) .*?\bstep_time_s=([0-9.]+)")


@pytest.mark.parametrize(
    "text",
    [
        "trainc-worker: plan=/p engine=megatron device=cuda shrink=False reference=False "
        "train_iters=3\nstep=1 loss=1 step_time_s=0.1\n",
        "step=1 loss=10.5 grad_norm=3.1 step_time_s=9.0000 tokens_per_s=10.0 lr=0 skipped=0\n"
        "trainc-worker: saved checkpoint step=1 to /c/iter_0000001\n"
        "resume-check step=2 loss=10.1 grad_norm=3.0 step_time_s=0.5000 tokens_per_s=20.0 lr=0\n"
        "[rank0]: step=3 loss=9.9 step_time_s=0.7000 step=4 step_time_s=0.8\n",
        "no steps here\nstep=x step_time_s=1\n",
    ],
)
def test_step_times_read_as_calibrate_does(text: str) -> None:
    assert step_times(text) == [float(t) for _, t in _CALIBRATE.findall(text)]
