"""Light checks of the launch side that need neither torch nor megatron: ``trainc run`` and the
shrink rules (these run in every CI job, with or without the [worker] extra)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.e2e import base_spec, compile_case, merge, plan_of
from trainc.launch.shrink import full_dims, shrink


def _stub(tmp: Path, rc: int) -> Path:
    stub = tmp / "fake-torchrun"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        'echo "FAKE-TORCHRUN $*"\n'
        'echo "WORKER-ARGS ${TRAINC_WORKER_ARGS:-}"\n'
        f"exit {rc}\n"
    )
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    return stub


@pytest.mark.parametrize("rc", [0, 3])
def test_trainc_run_starts_torchrun_sh_and_returns_its_exit_code(tmp_path, rc):
    out = compile_case(tmp_path, "runme", merge(base_spec("runme", 2), {"parallel": {"tp": 2}}))
    env = {**os.environ, "TORCHRUN": str(_stub(tmp_path, rc))}
    proc = subprocess.run(
        [sys.executable, "-m", "trainc", "run", str(out), "--", "--train-iters", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == rc, proc.stderr
    assert "--nproc_per_node=2" in proc.stdout and "-m trainc.launch.worker --plan" in proc.stdout
    assert "WORKER-ARGS --train-iters 3" in proc.stdout


def test_trainc_run_without_script_is_an_environment_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "trainc", "run", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 4 and "torchrun.sh" in proc.stderr


@pytest.mark.parametrize(
    "par",
    [
        {"tp": 2},
        {"tp": 4, "pp": 2, "vpp": 2},
        {"cp": 2, "tp": 2},
        {"tp": 8},
    ],
)
def test_shrink_keeps_the_layout_rules(tmp_path, par):
    world = 1
    for k in ("tp", "pp", "cp"):
        world *= par.get(k, 1)
    spec = merge(
        base_spec("s", world),
        {
            "defaults": [{"model": "llama3-8b"}, "_self_"],
            "model": {
                "num_layers": 32,
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_query_groups": 8,
                "ffn_hidden_size": 14336,
                "vocab_size": 128256,
                "make_vocab_size_divisible_by": 128,
                "seq_length": 8192,
            },
            "parallel": {**par, "sequence_parallel": par.get("tp", 1) > 1, "zero_stage": 1},
            "cluster": {"gpu_memory_gib": 141},
            "training": {"global_batch_size": 8 * max(1, par.get("pp", 1))},
            "launch": {"shrink": True},
        },
    )
    plan = plan_of(compile_case(tmp_path, "s", spec))
    d, full, small = plan["derived"], full_dims(plan), shrink(plan)
    tp, cp = d["tp"], d["cp"]
    assert small.num_layers == d["pp"] * d["vpp"]
    assert small.num_attention_heads % tp == 0 and small.num_query_groups % tp == 0
    assert small.num_attention_heads % small.num_query_groups == 0
    assert (small.num_query_groups < small.num_attention_heads) == (
        full.num_query_groups < full.num_attention_heads
    )  # GQA stays GQA
    assert small.seq_length % (2 * cp) == 0 and small.seq_length % tp == 0
    assert small.vocab_size % tp == 0 and small.ffn_hidden_size % tp == 0
    assert small.hidden_size <= 256 and small.vocab_size <= 1024


def test_shrink_keeps_experts_divisible_by_ep(tmp_path):
    spec = merge(
        base_spec("m", 4),
        {
            "model": {"num_experts": 64, "moe_router_topk": 6, "moe_ffn_hidden_size": 32},
            "parallel": {"ep": 4},
            "launch": {"shrink": True},
        },
    )
    small = shrink(plan_of(compile_case(tmp_path, "m", spec)))
    assert small.num_experts is not None and small.num_experts % 4 == 0
    assert small.moe_router_topk <= small.num_experts
