"""NVIDIA's Llama 3 8B layout on 8 H100 80GB (TP1 PP1 CP1, micro batch 1, seq 8192, GBS 128,
FP8 current scaling; Megatron-Bridge performance summary, 25.11 container, 14,451 tokens/s per
GPU) and its neighbours: what the memory fit says, and the gradient buffer's dtype reaching the
emitted Megatron-Core config as the estimate counts it."""

from __future__ import annotations

import pytest

from trainc.compiler.estimate.memory import megatron_state_bytes
from trainc.compiler.fit import GiB, check_fit
from trainc.compiler.pipeline import plan_and_estimate
from trainc.compiler.targets.settings import grad_reduce_in_fp32
from trainc.schemas import (
    Activation,
    ClusterSpec,
    Entrypoint,
    Fp8Format,
    Fp8Recipe,
    Gpu,
    LaunchSpec,
    ModelSpec,
    Normalization,
    ParallelSpec,
    PositionEmbedding,
    Recompute,
    StateDtype,
    TrainingSpec,
    TrainSpec,
)

N_PARAMS = 8_030_261_248  # Llama 3 8B, untied embeddings, vocab 128256


def nvidia_spec(zero_stage: int, grads: StateDtype = StateDtype.fp32) -> TrainSpec:
    model = ModelSpec(
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=14336,
        vocab_size=128256,
        seq_length=8192,
        max_position_embeddings=8192,
        activation=Activation.swiglu,
        normalization=Normalization.rmsnorm,
        position_embedding=PositionEmbedding.rope,
        untie_embeddings_and_output_weights=True,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    launch = (
        LaunchSpec(entrypoint=Entrypoint.megatron_lm, megatron_lm_path="/opt/Megatron-LM")
        if zero_stage == 3
        else LaunchSpec()
    )  # Megatron-FSDP runs in pretrain_gpt.py
    return TrainSpec(
        model=model,
        launch=launch,
        cluster=ClusterSpec(num_nodes=1, gpus_per_node=8, gpu=Gpu.h100_80g),
        parallel=ParallelSpec(tp=1, pp=1, cp=1, zero_stage=zero_stage),
        training=TrainingSpec(
            micro_batch_size=1,
            global_batch_size=128,
            fp8_format=Fp8Format.hybrid,
            fp8_recipe=Fp8Recipe.tensorwise,
            recompute=Recompute.none,
            main_grads_dtype=grads,
        ),
    )


def verdict(spec: TrainSpec) -> tuple[list[str], dict[str, float]]:
    _, _, plan = plan_and_estimate(spec)
    assert plan is not None and plan.estimates is not None
    mem = plan.estimates.memory_bytes
    parts = {
        k: round(getattr(mem, k) / GiB, 2) for k in ("params", "grads", "optimizer", "activations")
    }
    return sorted({d.rule.id for d in check_fit(plan)}), parts


def test_published_layout_megatron_fsdp_fits():
    # the published row says FSDP 8: Megatron-FSDP (optim_grads_params) shards weights, grads
    # and optimizer over dp 8; two TransformerLayers are gathered at a time
    ids, parts = verdict(nvidia_spec(3))
    assert "TRC401" not in ids and "TRC403" not in ids
    assert parts == {"params": 3.83, "grads": 7.65, "optimizer": 11.22, "activations": 33.56}


def test_distributed_optimizer_fp32_grads_is_a_sure_oom():
    # Megatron-LM keeps an fp32 grad buffer for bf16 (validate_args): 2 + 4 B/param of
    # unsharded weights + grads (44.9 GiB) plus 12/8 B/param and 33.6 GiB of activations
    ids, parts = verdict(nvidia_spec(1))
    assert "TRC401" in ids
    assert parts == {"params": 14.96, "grads": 29.92, "optimizer": 11.22, "activations": 33.56}


def test_distributed_optimizer_bf16_grads_is_tight_not_an_oom():
    ids, parts = verdict(nvidia_spec(1, StateDtype.bf16))
    assert "TRC401" not in ids and "TRC403" in ids
    assert parts["grads"] == pytest.approx(N_PARAMS * 2 / GiB, abs=0.01)


@pytest.mark.parametrize(
    "grads, fp32, nbytes", [(StateDtype.fp32, True, 4), (StateDtype.bf16, False, 2)]
)
def test_grad_buffer_dtype_one_truth(grads: StateDtype, fp32: bool, nbytes: int):
    # the emitted DistributedDataParallelConfig.grad_reduce_in_fp32 sets the DDP buffer's dtype
    # (megatron-core 0.16.1 DistributedDataParallel.__init__): it must match the bytes counted
    spec = nvidia_spec(1, grads)
    assert grad_reduce_in_fp32(spec) is fp32
    assert megatron_state_bytes(spec.training)[1] == nbytes


PUBLISHED_YAML = """\
name: llama3-8b
engine: megatron
launch: {entrypoint: megatron-lm, megatron_lm_path: /opt/Megatron-LM}
model: {num_layers: 32, hidden_size: 4096, num_attention_heads: 32, num_query_groups: 8,
        ffn_hidden_size: 14336, vocab_size: 128256, seq_length: 8192,
        max_position_embeddings: 8192, activation: swiglu, normalization: rmsnorm,
        position_embedding: rope, rotary_base: 500000, norm_epsilon: 1.0e-05,
        untie_embeddings_and_output_weights: true, hidden_dropout: 0.0, attention_dropout: 0.0}
cluster: {gpu: h100-80g, gpus_per_node: 8, num_nodes: 1}
parallel: {tp: 1, pp: 1, cp: 1, ep: 1, dp: 8, sequence_parallel: false, zero_stage: 3}
training: {micro_batch_size: 1, global_batch_size: 128, precision: bf16, fp8_format: hybrid,
           fp8_recipe: tensorwise, recompute: none}
"""


def test_published_layout_is_in_plans_top_3(tmp_path):
    # the spec trainc.calibrate.published builds from the Megatron-Bridge row (FSDP 8 -> zero 3)
    from trainc.planner import plan_layouts

    path = tmp_path / "llama3-8b.yaml"
    path.write_text(PUBLISHED_YAML)
    res = plan_layouts(path, top=3)
    assert not [d for d in res.diagnostics if d.is_error]
    layouts = [
        (p.candidate.tp, p.candidate.pp, p.candidate.cp, p.candidate.mbs) for p in res.planned[:3]
    ]
    assert (1, 1, 1, 1) in layouts
