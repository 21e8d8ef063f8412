"""The seeds' worked examples as specs (tests/specs/seeds/): they must compile without errors
(fit, TRC4xx, is checked with the estimates), and the seed-002 notation that counts EP as a
world factor must get TRC103 with the equivalent dp."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.kit import errors, find
from trainc.compiler.derive import derive
from trainc.compiler.load import load_spec
from trainc.compiler.normalize import normalize
from trainc.compiler.validate import validate

SEEDS = Path(__file__).resolve().parents[3] / "specs" / "seeds"


def check(name: str, *overrides: str):
    loaded = load_spec(SEEDS / name, list(overrides))
    assert loaded.spec is not None, [d.message for d in loaded.diagnostics]
    spec = normalize(loaded.spec)
    return spec, derive(spec), validate(spec)


def test_llama70b_64_a100_tp8_pp4_dp2():
    _spec, d, diags = check("llama2-70b-64xa100-tp8-pp4-dp2.yaml")
    assert errors(diags) == []
    assert (d.world_size, d.dp, d.layers_per_stage) == (64, 2, (20, 20, 20, 20))
    assert d.num_microbatches == 512 and d.padded_vocab_size == 32768


def test_llama70b_64_a100_tp8_pp2_zero1_over_dp4():
    spec, d, diags = check("llama2-70b-64xa100-tp8-pp2-zero1-dp4.yaml")
    assert errors(diags) == []
    assert (d.dp, d.layers_per_stage, spec.parallel.zero_stage) == (4, (40, 40), 1)


@pytest.mark.parametrize("dp", [None, 32])
def test_seed002_moe_1024_megatron_notation(dp):
    _spec, d, diags = check("moe-1024-tp4-pp4-cp2-ep8.yaml", *([f"parallel.dp={dp}"] if dp else []))
    assert errors(diags) == []
    assert (d.world_size, d.dp, d.etp, d.expert_dp) == (1024, 32, 4, 8)
    assert d.num_moe_layers == 20 and d.layers_per_stage == (20, 20, 20, 20)
    # etp*ep = 32 GPUs spans 4 nodes: the all-to-all crossing the fabric is worth a warning
    assert [x.key for x in find(diags, "TRC107")] == ["parallel.ep"]


def test_trc107_fix_with_the_flex_dispatcher_follows_the_dispatchers_reports():
    """The flex dispatcher does not make a group wider than the NVLink domain safe: HybridEP is
    limited to EP 8 on NVL8 systems (Megatron-Bridge#2883) and DeepEP's internode kernels have
    hung across nodes (DeepEP#411, Megatron-LM#5039). The fix offers the smaller ep first and
    never says to keep the wide one."""
    *_, diags = check("moe-1024-tp4-pp4-cp2-ep8.yaml")
    [plain] = find(diags, "TRC107")
    assert "DeepEP" not in (plain.fix or "") and (plain.fix or "").startswith("use ep in")
    *_, diags = check("moe-1024-tp4-pp4-cp2-ep8.yaml", "model.moe_token_dispatcher_type=flex")
    [deepep] = find(diags, "TRC107")
    fix = deepep.fix or ""
    assert fix.startswith(plain.fix or "") and "keep ep=" not in fix
    assert "deepseek-ai/DeepEP#411" in fix and "Megatron-LM#5039" in fix
    *_, diags = check(
        "moe-1024-tp4-pp4-cp2-ep8.yaml",
        "model.moe_token_dispatcher_type=flex",
        "model.moe_flex_dispatcher_backend=hybridep",
    )
    [hybrid] = find(diags, "TRC107")
    assert "Megatron-Bridge#2883" in (hybrid.fix or "") and "EP 8" in (hybrid.fix or "")


def test_seed002_moe_1024_seed_notation_gets_trc103_with_dp32():
    _spec, _d, diags = check("moe-1024-tp4-pp4-cp2-ep8.yaml", "parallel.dp=4")
    [e] = errors(diags)
    assert (e.rule.id, e.key) == ("TRC103", "parallel.dp")
    assert e.edits == {"parallel.dp": 32} and "parallel.dp=32" in (e.fix or "")
    assert e.facts["megatron_dp"] == 32 and e.facts["expert_dp"] == 8
    assert "two grids" in e.message and "etp*ep*pp*expert_dp" in e.message


def test_seed002_zero3_on_megatron_is_megatron_fsdp():
    """Seed 002 offers ZeRO-3 through DeepSpeed only; Megatron-Core 0.16 has its own full
    sharding (Megatron-FSDP), which runs in pretrain_gpt.py, not in the trainc worker on CUDA."""
    _spec, _d, diags = check("moe-1024-tp4-pp4-cp2-ep8.yaml", "parallel.zero_stage=3")
    [e] = errors(diags)
    assert (e.rule.id, e.key, e.edits) == (
        "TRC383",
        "parallel.zero_stage",
        {"launch.entrypoint": "megatron-lm"},
    )
    _spec, _d, diags = check("moe-1024-tp4-pp4-cp2-ep8.yaml", "parallel.zero_stage=2")
    [e] = errors(diags)
    assert (e.rule.id, e.key, e.edits) == (
        "TRC307",
        "parallel.zero_stage",
        {"parallel.zero_stage": 1},
    )


def test_llama70b_seed_layout_on_the_wrong_cluster_size():
    _spec, _d, diags = check("llama2-70b-64xa100-tp8-pp4-dp2.yaml", "cluster.num_nodes=4")
    assert {(e.rule.id, e.key) for e in errors(diags)} == {("TRC108", "parallel.dp")}
