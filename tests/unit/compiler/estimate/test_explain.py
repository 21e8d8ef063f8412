"""`trainc explain`: tables on stdout, exit codes like lint."""

from __future__ import annotations

from pathlib import Path

from trainc.cli import main

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = str(ROOT / "examples" / "llama2-70b-dgx-a100.yaml")


def test_explain_prints_every_table(capsys):
    assert main(["explain", EXAMPLE, "--ranks", "12"]) == 0
    out = capsys.readouterr().out
    for title in (
        "layout",
        "memory per GPU",
        "communication per GPU",
        "collectives",
        "time",
        "rank map",
    ):
        assert title in out
    assert "first 12 of 64 ranks" in out
    assert "MFU" in out and "tp 8 x cp 1 x dp 2 x pp 4" in out


def test_explain_spec_error_exits_2(capsys):
    assert main(["explain", EXAMPLE, "parallel.tp=3"]) == 2
    err = capsys.readouterr().err
    assert "error[" in err


def test_explain_memory_error_still_shows_tables(capsys):
    # does not fit (TRC401 error): exit 2 like lint, but the tables explain why
    assert main(["explain", EXAMPLE, "cluster.gpu_memory_gib=16"]) == 2
    captured = capsys.readouterr()
    assert "TRC401" in captured.err and "memory per GPU" in captured.out


def test_explain_ranks_must_be_positive(capsys):
    """``--ranks 0`` / ``-1`` are refused like ``plan --top 0`` (they printed "first -1 of 64
    ranks" or fell back silently)."""
    import pytest

    for bad in ("0", "-1"):
        with pytest.raises(SystemExit) as exc:
            main(["explain", EXAMPLE, "--ranks", bad])
        assert exc.value.code == 2
        assert "must be 1 or more" in capsys.readouterr().err


def test_executed_flops_say_recompute_only_with_recompute(capsys):
    assert main(["explain", EXAMPLE, "training.recompute=none"]) == 0
    assert "(with recompute)" not in capsys.readouterr().out
    assert main(["explain", EXAMPLE, "training.recompute=full"]) == 0
    assert "(with recompute)" in capsys.readouterr().out


def test_a_band_wholly_above_the_estimate_says_the_estimate_is_optimistic(capsys):
    """A band that starts above 1 (every calibration run measured slower than the model; once
    engine=fsdp's published-runs band): explain says so next to the step time (a fresh-user
    trial read tokens/s and MFU from an estimate below its own p10); a band around the estimate
    says nothing."""
    above = ["cluster.step_time_p10_ratio=1.05", "cluster.step_time_p90_ratio=1.3"]
    assert main(["explain", EXAMPLE, *above]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "calibrated" in out and "optimistic" in out
    assert main(["explain", EXAMPLE]) == 0
    assert "optimistic" not in capsys.readouterr().out
