"""Slurm time limits (``launch.time_limit``, ``#SBATCH --time``) in seconds, and the lead before
the limit at which the generated sbatch script asks Slurm for SIGUSR1 (``--signal=USR1@LEAD``:
the worker saves a checkpoint and stops). Shared by the rules (TRC404) and the emitters."""

from __future__ import annotations

#: Seconds before the time limit at which Slurm sends SIGUSR1 (the worker checkpoints), at most.
SIGNAL_SECONDS = 300

#: Slurm's spellings of "no time limit" (``--time``; ``time_str2mins`` takes them in any case).
UNLIMITED_TIMES = ("unlimited", "infinite", "-1")


def time_limit_seconds(time_limit: str) -> int | None:
    """Slurm ``--time`` in seconds: ``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``;
    None for no limit (``UNLIMITED``, ``INFINITE``, ``-1``, or zero, which Slurm's sbatch
    documents as "no time limit") or a string that is none of these
    (TRC502 refuses those before anything is emitted).

    >>> time_limit_seconds("04:00:00"), time_limit_seconds("1-2"), time_limit_seconds("30")
    (14400, 93600, 1800)
    >>> time_limit_seconds("UNLIMITED") is None, time_limit_seconds("0:0:0") is None
    (True, True)
    """
    if time_limit.strip().lower() in UNLIMITED_TIMES:
        return None
    days, _, rest = time_limit.rpartition("-")
    try:
        parts = [int(x) for x in rest.split(":")]
        d = int(days) if days else None
    except ValueError:
        return None
    if d is not None:
        h, m, s = [*parts, 0, 0][:3]
        total = ((d * 24 + h) * 60 + m) * 60 + s
    elif len(parts) == 1:
        total = parts[0] * 60
    elif len(parts) == 2:
        total = parts[0] * 60 + parts[1]
    else:
        total = (parts[0] * 60 + parts[1]) * 60 + parts[2]
    return total or None  # Slurm: a time limit of zero requests that no limit be imposed


def signal_lead_seconds(time_limit: str) -> int:
    """``--signal=USR1@LEAD``: :data:`SIGNAL_SECONDS`, or a tenth of a short limit (at least 10 s).

    >>> signal_lead_seconds("04:00:00"), signal_lead_seconds("20"), signal_lead_seconds("UNLIMITED")
    (300, 120, 300)
    """
    limit = time_limit_seconds(time_limit)
    return SIGNAL_SECONDS if limit is None else min(SIGNAL_SECONDS, max(limit // 10, 10))
