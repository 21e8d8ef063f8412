"""engine=fsdp: PyTorch FSDP2 (fully_shard on a CPU DeviceMesh, gloo) with DTensor tensor
parallelism, HSDP, mixed precision, CPU offload and activation checkpointing, launched with the
generated torchrun.sh.

Each case checks (a) equality with a one-process FSDP2 reference of the same model and data, (b) the
loss falls, (c) the DCP checkpoint of step 6 replays steps 7-12 to the same losses bit for bit,
(d) the DeviceMesh and the parameters' mesh dimensions the worker built are the plan's
(engines.fsdp), (e) torchtitan_args.txt carries the same layout.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.e2e import (
    base_spec,
    close,
    compile_case,
    launch,
    merge,
    plan_of,
    references,
    steps,
)

ITERS, RESUME = 12, 6
CASES: dict[str, dict] = {
    # full shard over 2 ranks (ZeRO-3 semantics), fp32
    "fsdp_dp2": {},
    # 2-D: tp2 (DTensor, sequence parallel) x dp_shard 2, torchtitan's per-op SAC (selective)
    "fsdp_tp2_sp": {
        "parallel": {"tp": 2, "sequence_parallel": True},
        "training": {"recompute": "selective"},
    },
    # HSDP 2 x 2, no reshard after forward (ZeRO-2-like), bf16 params / fp32 reduce, CPU offload,
    # full per-block recompute
    "fsdp_hsdp_bf16": {
        "fsdp": {"dp_replicate": 2, "reshard_after_forward": False, "cpu_offload": True},
        "training": {"precision": "bf16", "recompute": "full"},
    },
    # GPT-2-like layers: GELU, LayerNorm, biases, learned positions, tied embeddings (dp 2)
    "fsdp_gpt2_style": {
        "model": {
            "activation": "gelu",
            "normalization": "layernorm",
            "position_embedding": "learned",
            "add_bias_linear": True,
            "untie_embeddings_and_output_weights": False,
        }
    },
    # torchtitan's every-N-layer selective checkpointing (N 2, a torchtitan before 0.3.0)
    "fsdp_every2": {
        "fsdp": {"selective_ac_option": "2"},
        "training": {"recompute": "selective"},
        "launch": {"versions": {"torchtitan": "0.2.2"}},
    },
}
WORLD = {
    "fsdp_dp2": 2,
    "fsdp_tp2_sp": 4,
    "fsdp_hsdp_bf16": 4,
    "fsdp_gpt2_style": 2,
    "fsdp_every2": 2,
}
LAYOUT = re.compile(
    r"^trainc-worker: fsdp layout mesh_dim_names=(\S+) mesh_shape=(\S+) "
    r"fsdp_dims=(\S+) tp=(\d+) sharded_params=(\d+)$",
    re.M,
)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("e2e_fsdp")
    out = {}
    for name, over in CASES.items():
        spec = merge(
            base_spec(name, WORLD[name]),
            merge(
                {
                    "engine": "fsdp",
                    "parallel": {"zero_stage": 1},
                    "training": {"train_iters": ITERS},
                    "launch": {"save_interval": 6},
                },
                over,
            ),
        )
        out[name] = compile_case(tmp, name, spec)
    return out


@pytest.fixture(scope="module")
def reference_logs(compiled) -> dict[str, str]:
    return references(list(compiled.values()))


@pytest.mark.parametrize("name", list(CASES))
def test_fsdp_trains_like_reference(name, compiled, reference_logs):
    out = compiled[name]
    log = launch(out, ["--resume-check", str(RESUME)])
    got, ref = steps(log), steps(reference_logs[name])
    assert sorted(got) == list(range(1, ITERS + 1)), f"{name}: steps logged {sorted(got)}"
    assert sorted(ref) == list(range(1, ITERS + 1)), f"{name}: reference steps {sorted(ref)}"
    # (a) the layout computes what one process computes (bf16 rounds differently per shard)
    rl = 2e-2 if "bf16" in name else 2e-4
    for n in range(1, ITERS + 1):
        assert close(got[n]["loss"], ref[n]["loss"], rl), (
            f"{name} step {n}: loss {got[n]['loss']} vs reference {ref[n]['loss']}"
        )
        assert close(got[n]["grad_norm"], ref[n]["grad_norm"], 10 * rl), (
            f"{name} step {n}: grad_norm {got[n]['grad_norm']} vs {ref[n]['grad_norm']}"
        )
    # (b) the loss falls
    first, last = got[1]["loss"], sum(got[n]["loss"] for n in range(ITERS - 2, ITERS + 1)) / 3
    # (the tied, learned-position model learns more slowly in 12 steps)
    fall = 0.99 if "gpt2" in name else 0.95
    assert last < fall * first, f"{name}: loss did not fall ({first} -> {last})"
    # (c) DCP resume replays bit for bit (the logged 9 significant digits are equal)
    again = steps(log, resume=True)
    assert sorted(again) == list(range(RESUME + 1, ITERS + 1))
    for n in again:
        assert again[n]["loss"] == got[n]["loss"], f"{name} step {n}: resumed loss differs"
        assert again[n]["grad_norm"] == got[n]["grad_norm"], f"{name} step {n}: grad_norm"
    # (d) the mesh the worker built is the plan's
    cfg = plan_of(out)["engines"]["fsdp"]
    m = LAYOUT.search(log)
    assert m, f"{name}: no layout line"
    compact = str(cfg["mesh"]["dim_names"]).replace(" ", "")
    assert m.group(1) == compact
    assert m.group(2) == str(cfg["mesh"]["shape"]).replace(" ", "")
    assert m.group(3) == str(cfg["fully_shard"]["mesh_dims"]).replace(" ", "")
    assert int(m.group(4)) == cfg["tensor_parallel"]["degree"]
    # every parameter of the 4-layer model is a DTensor (GPT-2 style: biases, LayerNorm biases,
    # no w3, positions, one tied embedding)
    assert int(m.group(5)) == (39 if "gpt2" not in name else 4 * 16 + 4)
    if "hsdp" in name:
        assert "cpu_offload=True" in log and "'param_dtype': 'bfloat16'" in log


def test_torchtitan_args_carry_the_layout(compiled):
    """(e) the torchtitan 0.3.0 overrides show the same degrees and batch as the plan."""
    text = (compiled["fsdp_hsdp_bf16"] / "torchtitan_args.txt").read_text()
    lines = [x for x in text.splitlines() if not x.startswith("#")]
    assert "--parallelism.data_parallel_replicate_degree 2" in lines
    assert "--parallelism.data_parallel_shard_degree 2" in lines
    assert "--parallelism.fsdp_reshard_after_forward never" in lines
    assert "--training.enable_cpu_offload" in lines
    assert "--training.mixed_precision_param bfloat16" in lines
    assert "--training.local_batch_size 1" in lines
    assert "--training.global_batch_size 4" in lines


def test_resume_into_another_model_stops_with_one_line(tmp_path):
    """A DCP checkpoint of one model, loaded by a run of another (hidden_size 32 -> 64): one
    ``trainc-worker:`` line naming the difference, a non-zero exit, no DCP size-mismatch
    traceback. The CPU run applies no Megatron-Core cpu-patch (the FSDP2 worker is torch's)."""
    import subprocess

    from tests.support.e2e import _command, _launch_env

    def spec(name: str, hidden: int) -> dict:
        return merge(
            base_spec(name, 2),
            {
                "engine": "fsdp",
                "parallel": {"zero_stage": 1},
                "model": {"hidden_size": hidden},
                "training": {"train_iters": 2},
                "launch": {"save_interval": 2},
            },
        )

    ckpt = tmp_path / "ckpt"
    first = compile_case(tmp_path, "fsdp_resume_a", spec("fsdp_resume_a", 32))
    log = launch(first, ["--save", str(ckpt)])
    assert (ckpt / "iter_0000002" / "trainc_layout.json").exists()
    assert "cpu-patch" not in log, [x for x in log.splitlines() if "cpu-patch" in x]
    other = compile_case(tmp_path, "fsdp_resume_b", spec("fsdp_resume_b", 64))
    proc = subprocess.run(
        _command(other),
        cwd=other,
        capture_output=True,
        text=True,
        env=_launch_env(["--load", str(ckpt), "--save", str(tmp_path / "ckpt_b")]),
        timeout=300,
    )
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0, text[-3000:]
    # torchrun's own ChildFailedError report follows any failed rank; the worker raises none
    assert "Size mismatch" not in text and "trainc/launch" not in text, text[-3000:]
    lines = [x for x in text.splitlines() if "was written for another model" in x]
    assert len(lines) == 1, text[-3000:]  # rank 0's line only, not one per rank
    line = lines.pop()
    assert line.startswith("trainc-worker: checkpoint ") and "hidden_size 32 -> 64" in line, line
    assert line.endswith("start without --load"), line


def test_dropout_resumes_bit_for_bit(tmp_path, compiled):
    """Each rank's random-number state is checkpointed with DCP's state: with hidden and
    attention dropout the resume check replays the same losses, which differ from the
    dropout-free run's."""
    spec = merge(
        base_spec("fsdp_dropout", 2),
        {
            "engine": "fsdp",
            "parallel": {"zero_stage": 1},
            "training": {"train_iters": ITERS},
            "launch": {"save_interval": 6},
            "model": {"hidden_dropout": 0.2, "attention_dropout": 0.2},
        },
    )
    log = launch(compile_case(tmp_path, "fsdp_dropout", spec), ["--resume-check", str(RESUME)])
    got, again = steps(log), steps(log, resume=True)
    plain = steps(launch(compiled["fsdp_dp2"], label="fsdp_dp2 (no dropout)"))
    assert any(not close(got[n]["loss"], plain[n]["loss"], 1e-4) for n in range(2, ITERS + 1))
    assert sorted(again) == list(range(RESUME + 1, ITERS + 1))
    for n in again:
        assert again[n]["loss"] == got[n]["loss"], f"step {n}: resumed loss differs"
