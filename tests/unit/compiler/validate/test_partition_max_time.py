"""TRC514: launch.time_limit against cluster.max_time_limit, the Slurm partition's MaxTime
(sbatch --time: a limit above the partition's pends indefinitely or, with EnforcePartLimits, is
refused; github.com/NVIDIA-NeMo/RL/pull/3052), and TRC502 on the MaxTime's own format."""

from __future__ import annotations

import pytest

from tests.support.kit import find, lint_cfg


@pytest.mark.parametrize(
    ("limit", "most", "refused"),
    [
        ("06:00:00", "04:00:00", True),
        ("360", "240", True),  # minutes, as FC-064's 360 against 240
        ("04:00:01", "04:00:00", True),
        ("04:00:00", "04:00:00", False),  # equal is allowed
        ("240", "04:00:00", False),
        ("1-00:00:00", "2-00:00:00", False),
        ("UNLIMITED", "2-00:00:00", True),  # no limit is above any finite MaxTime
        ("0", "2-00:00:00", True),  # zero: Slurm's "no limit" too
        ("30-00:00:00", "UNLIMITED", False),
        ("30-00:00:00", "infinite", False),
    ],
)
def test_time_limit_within_max_time(limit: str, most: str, refused: bool) -> None:
    hits = find(lint_cfg(**{"launch.time_limit": limit, "cluster.max_time_limit": most}), "TRC514")
    assert bool(hits) is refused, [h.message for h in hits]
    if refused:
        (h,) = hits
        assert h.is_error and h.key == "launch.time_limit"
        assert h.related == ("cluster.max_time_limit",)
        assert f"at most {most!r}" in h.fix and "launch.requeue: true" in h.fix
        assert h.edits == {"launch.time_limit": most, "launch.requeue": True}


def test_numbers_and_fix_with_requeue() -> None:
    (h,) = find(
        lint_cfg(
            **{
                "launch.time_limit": "06:00:00",
                "cluster.max_time_limit": "04:00:00",
                "launch.requeue": True,
            }
        ),
        "TRC514",
    )
    assert "(06:00:00 = 21,600 s)" in h.message and "04:00:00 = 14,400 s" in h.message
    assert h.edits == {"launch.time_limit": "04:00:00"}
    assert "already requeues" in h.fix


def test_unset_max_time_is_not_checked() -> None:
    assert not find(lint_cfg(**{"launch.time_limit": "30-00:00:00"}), "TRC514")


def test_max_time_format_is_trc502_and_skips_trc514() -> None:
    diags = lint_cfg(**{"launch.time_limit": "06:00:00", "cluster.max_time_limit": "4h"})
    (bad,) = find(diags, "TRC502")
    assert bad.key == "cluster.max_time_limit" and "'4h'" in bad.message
    assert not find(diags, "TRC514")
