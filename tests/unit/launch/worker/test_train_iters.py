"""The worker's ``--train-iters N``: the lr decay length follows it when the spec leaves
``training.lr_decay_iters`` to train_iters (as Megatron-LM's ``--lr-decay-iters`` defaults to
``--train-iters``), stays when the spec writes it, and a length the warm-up does not fit in is
refused. Each engine's schedule gets the length the worker announces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.emit import compile_case
from trainc.launch.worker.runtime import Settings, decay_length, read_settings
from trainc.launch.worker_args import parse_args


def settings(case: str, tmp: Path, *argv: str, overrides: tuple[str, ...] = ()) -> Settings:
    _, files = compile_case(case, overrides)
    path = tmp / "plan.json"
    path.write_text(files["plan.json"], encoding="utf-8")
    return read_settings(
        json.loads(files["plan.json"]), parse_args(["--plan", str(path), *argv]), str(path)
    )


def test_decay_follows_train_iters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = settings("cpu-shrink-tiny", tmp_path, "--train-iters", "10")
    assert (s.train_iters, s.lr_decay_iters, s.decay_follows) == (10, 10, True)
    assert "override: lr_decay_iters 3 -> 10 (--train-iters" in capsys.readouterr().out


def test_decay_unchanged_without_train_iters(tmp_path: Path) -> None:
    s = settings("cpu-shrink-tiny", tmp_path)
    assert (s.train_iters, s.lr_decay_iters, s.decay_follows) == (3, 3, False)
    s = settings("cpu-shrink-tiny", tmp_path, "--train-iters", "3")
    assert (s.lr_decay_iters, s.decay_follows) == (3, False)


def test_written_decay_is_kept(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = settings(
        "cpu-shrink-tiny", tmp_path, "--train-iters", "10", overrides=("training.lr_decay_iters=6",)
    )
    assert (s.train_iters, s.lr_decay_iters, s.decay_follows) == (10, 6, False)
    assert "lr_decay_iters stays 6 as the spec writes it" in capsys.readouterr().out


def test_warmup_longer_than_run_is_refused() -> None:
    train = {
        "train_iters": 100,
        "lr_decay_iters": 100,
        "lr_warmup_iters": 20,
        "lr_wsd_decay_iters": None,
    }
    with pytest.raises(
        SystemExit,
        match=r"--train-iters 20 is not above "
        r"training.lr_warmup_iters \(20\).*pass --train-iters 21 or more",
    ):
        decay_length(train, {"lr_decay_iters": None}, 20)
    assert decay_length(train, {"lr_decay_iters": None}, 21) == (21, True)
    with pytest.raises(SystemExit, match=r"below training.lr_wsd_decay_iters \(30\)"):
        decay_length({**train, "lr_wsd_decay_iters": 30}, {"lr_decay_iters": None}, 25)


def test_megatron_scheduler_gets_the_length(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from trainc.launch.worker.engines.megatron import scheduler_kwargs

    s = settings("cpu-shrink-tiny", tmp_path, "--train-iters", "10")
    compiled: dict[str, Any] = s.plan["engines"]["megatron_core"]["OptimizerParamScheduler"]
    kw, changed = scheduler_kwargs(s, compiled)
    assert (compiled["lr_decay_steps"], kw["lr_decay_steps"], kw["wd_incr_steps"]) == (3, 10, 10)
    assert changed == {"lr_decay_steps", "wd_incr_steps"}
    s = settings("cpu-shrink-tiny", tmp_path)
    assert scheduler_kwargs(s, compiled) == (compiled, set())


def test_deepspeed_scheduler_gets_the_length(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from trainc.launch.worker.engines.deepspeed import load_config

    s = settings("llama2-7b-deepspeed-zero3-offload", tmp_path, "--train-iters", "5000")
    compiled = s.plan["engines"]["deepspeed"]["scheduler"]["params"]["total_num_steps"]
    assert compiled == s.plan["spec"]["training"]["train_iters"] != 5000
    assert load_config(s)["scheduler"]["params"]["total_num_steps"] == 5000


def test_fsdp_schedule_gets_the_length(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from trainc.launch.worker.engines.fsdp import lr_at, lr_schedule

    s = settings("llama3-8b-fsdp-hsdp", tmp_path, "--train-iters", "5000")
    sched = lr_schedule(s.plan["engines"]["fsdp"], s)
    assert s.plan["engines"]["fsdp"]["lr_schedule"]["decay_iters"] != 5000
    assert sched["decay_iters"] == 5000
    assert lr_at(sched, 5000) == pytest.approx(sched["min_lr"])
