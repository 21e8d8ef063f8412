"""Parameter counts from the architecture against published model sizes."""

from __future__ import annotations

import pytest

from tests.support.estimate import make_spec, run_ir
from trainc.compiler.estimate.params import (
    attention_params,
    layer_params,
    mlp_params,
    stage_layer_indices,
    stage_params,
    total_params,
)
from trainc.compiler.normalize import normalize
from trainc.schemas import Normalization


def test_llama2_7b_matches_deepspeed_count():
    # DeepSpeed's own estimator (deepspeed 0.19.8 runtime/zero/stage3.py
    # estimate_zero3_model_states_mem_needs): DeepSpeed's model_to_params on a Llama-2-7B-shaped
    # module
    spec = make_spec(
        parallel__tp=1,
        parallel__pp=1,
        model__num_query_groups=32,
        model__ffn_hidden_size=11008,
        model__vocab_size=32000,
        model__seq_length=4096,
    )
    plan = run_ir(spec)
    assert total_params(plan.spec, plan) == 6_738_415_616


def test_llama3_8b_and_mixtral_published_sizes():
    plan = run_ir(make_spec(parallel__tp=1, parallel__pp=1))
    assert total_params(plan.spec, plan) == 8_030_261_248  # Llama 3 8B: 8.03 B
    moe = make_spec(
        nodes=1,
        parallel__tp=1,
        parallel__pp=1,
        parallel__ep=8,
        model__num_experts=8,
        model__moe_ffn_hidden_size=14336,
        model__vocab_size=32000,
        model__seq_length=4096,
    )
    plan = run_ir(moe)
    assert total_params(plan.spec, plan) == 46_702_792_704  # Mixtral 8x7B: 46.7 B


def test_component_formulas():
    assert attention_params(8192, 64, 8, 128) == 2 * 8192 * 128 * (64 + 8)
    assert mlp_params(4096, 16384, False) == 2 * 4096 * 16384
    lp = layer_params(normalize(make_spec(model__normalization=Normalization.layernorm)), False)
    assert lp.replicated == 2 * 2 * 4096  # two LayerNorms with bias


def test_moe_layer_sharding_and_router():
    spec = make_spec(
        nodes=1,
        parallel__tp=2,
        parallel__pp=1,
        parallel__ep=4,
        model__num_experts=8,
        model__moe_ffn_hidden_size=1024,
        model__moe_shared_expert_intermediate_size=2048,
    )
    lp = layer_params(normalize(spec), True)
    assert lp.expert == 8 * 3 * 4096 * 1024
    assert lp.replicated == 2 * 4096 + 4096 * 8  # norms + router (replicated over tp)
    assert lp.tp_sharded == attention_params(4096, 32, 8, 128) + 3 * 4096 * 2048
    plan = run_ir(spec)
    [sp] = stage_params(plan.spec, plan)
    assert sp.expert == pytest.approx(32 * lp.expert / (2 * 4))  # etp 2 x ep 4


def test_interleaved_and_uneven_layer_assignment():
    assert stage_layer_indices([4, 4], 2) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert stage_layer_indices([3, 5, 5, 3], 1)[1] == [3, 4, 5, 6, 7]
    spec = make_spec(
        nodes=2,
        parallel__pp=4,
        parallel__pipeline_first_stage_layers=6,
        parallel__pipeline_last_stage_layers=6,
    )
    plan = run_ir(spec).to_json()
    assert plan["derived"]["layers_per_stage"] == [6, 10, 10, 6]
    per = [r["params"] for r in plan["estimates"]["memory_per_stage"]]
    assert per[1] == per[2] > per[0]


def test_tied_pp1_holds_the_embedding_once():
    tied = make_spec(parallel__pp=1, model__untie_embeddings_and_output_weights=False)
    untied = make_spec(parallel__pp=1)
    pt, pu = run_ir(tied).to_json(), run_ir(untied).to_json()
    diff = pu["estimates"]["memory_bytes"]["params"] - pt["estimates"]["memory_bytes"]["params"]
    assert diff == 2 * 128256 * 4096 / 2  # bf16, vocab-parallel over tp 2
