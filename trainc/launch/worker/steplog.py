"""The worker's step-log line, the one documented contract of its output: its format (written by
every engine's training loop) and its parsers (read by ``trainc calibrate``, the tests and any
tool that follows a run). Standard library only: the login-node side and calibrate import it
without torch.

One line per logged optimizer step, on the rank that logs (the last pipeline stage's first rank)::

    step=<n> loss=<float> grad_norm=<float> step_time_s=<float> tokens_per_s=<float> lr=<float>

``<n>`` is the number of optimizer steps done (1-based); ``loss`` the mean token loss of the
global batch (``%.9g``); ``grad_norm`` the global L2 norm of the gradients before clipping
(``%.9g``; ``nan`` when the engine reports none); ``step_time_s`` the wall time of the step in
seconds (``%.4f``); ``tokens_per_s`` the global batch's tokens over that time (``%.1f``); ``lr``
the learning rate the step used (``%.6g``). engine=megatron appends ``skipped=<0|1>`` (the
optimizer skipped the step: a non-finite gradient with a loss scaler). The ``--resume-check``
replay prefixes its lines with ``resume-check `` (:data:`RESUME_CHECK_PREFIX`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Prefix of the lines the ``--resume-check`` replay logs.
RESUME_CHECK_PREFIX = "resume-check "

#: What ``trainc calibrate`` reads from a worker log: every ``step=N ... step_time_s=X`` on one
#: line (lenient: other fields may be missing; a ``resume-check`` replay counts too).
STEP_TIME = re.compile(r"\bstep=(\d+) .*?\bstep_time_s=([0-9.]+)")

_LINE = re.compile(r"^(resume-check )?step=(\d+) (.*)$")
_FIELDS = ("loss", "grad_norm", "step_time_s", "tokens_per_s", "lr")


def format_step_line(
    step: int,
    *,
    loss: float,
    grad_norm: float,
    step_time_s: float,
    tokens: int,
    lr: float,
    skipped: bool | None = None,
    resume_check: bool = False,
) -> str:
    """The step line (no newline) of optimizer step ``step`` (1-based): ``tokens`` is the global
    batch's token count (``global_batch_size * seq_length``), so ``tokens_per_s`` is
    ``tokens / step_time_s``; ``skipped`` (engine=megatron: the optimizer skipped the step)
    appends ``skipped=0|1``; ``resume_check`` prefixes :data:`RESUME_CHECK_PREFIX`. Raises
    ZeroDivisionError for a ``step_time_s`` of 0.

    >>> format_step_line(3, loss=2.5, grad_norm=1.25, step_time_s=0.5, tokens=128, lr=0.01)
    'step=3 loss=2.5 grad_norm=1.25 step_time_s=0.5000 tokens_per_s=256.0 lr=0.01'
    """
    line = (
        f"{RESUME_CHECK_PREFIX if resume_check else ''}step={step} loss={loss:.9g} "
        f"grad_norm={grad_norm:.9g} step_time_s={step_time_s:.4f} "
        f"tokens_per_s={tokens / step_time_s:.1f} lr={lr:.6g}"
    )
    return line if skipped is None else f"{line} skipped={int(skipped)}"


@dataclass(frozen=True, slots=True)
class StepLine:
    """One parsed step line (the fields of :func:`format_step_line`; times in seconds)."""

    step: int
    loss: float
    grad_norm: float
    step_time_s: float
    tokens_per_s: float
    lr: float
    #: engine=megatron's ``skipped=`` field; None where the line has none.
    skipped: bool | None = None
    #: A line of the ``--resume-check`` replay.
    resume_check: bool = False


def parse_step_line(line: str) -> StepLine | None:
    """The :class:`StepLine` of one log line (surrounding whitespace ignored), or None when it
    is not a complete step line: not ``[resume-check ]step=N ...``, a field of
    :func:`format_step_line` missing, or a value that is not a number.

    >>> parse_step_line("step=3 loss=2.5 grad_norm=nan step_time_s=0.5000 tokens_per_s=256.0 lr=0.01")
    StepLine(step=3, loss=2.5, grad_norm=nan, step_time_s=0.5, tokens_per_s=256.0, lr=0.01, skipped=None, resume_check=False)
    """  # noqa: E501
    m = _LINE.match(line.strip())
    if m is None:
        return None
    try:
        rec = dict(kv.split("=", 1) for kv in m.group(3).split())
        values = {k: float(rec[k]) for k in _FIELDS}
        skipped = None if "skipped" not in rec else bool(int(rec["skipped"]))
    except (KeyError, ValueError):
        return None
    return StepLine(int(m.group(2)), **values, skipped=skipped, resume_check=bool(m.group(1)))


def step_times(text: str) -> list[float]:
    """The ``step_time_s`` values (seconds) of a worker log, in order: every :data:`STEP_TIME`
    match in ``text`` (lenient, as ``trainc calibrate`` reads a log: a line needs only
    ``step=N `` and a later ``step_time_s=X``, and ``resume-check`` replay lines count).

    >>> step_times("step=1 loss=1 step_time_s=0.25\\nsaved step=1\\nstep=2 x step_time_s=0.5")
    [0.25, 0.5]
    """
    return [float(t) for _, t in STEP_TIME.findall(text)]
