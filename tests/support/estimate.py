"""Plan estimates of a hand-built spec (no Hydra): a Llama 3 8B-like model on one node of A100
80GB, the keyword overrides spelled ``section__key`` (``parallel__tp=4``)."""

from __future__ import annotations

from trainc.compiler.pipeline import plan_and_estimate
from trainc.schemas import (
    ClusterSpec,
    Engine,
    Gpu,
    ModelSpec,
    ParallelSpec,
    Recompute,
    TrainingSpec,
    TrainSpec,
)


def make_spec(*, engine=Engine.megatron, nodes=1, gpn=8, mem=80.0, **kw) -> TrainSpec:
    """A spec of Llama 3 8Bs shape (32 layers, hidden 4096, GQA 8, seq 8192) at tp 2, pp 2,
    ZeRO-1 on ``nodes`` x ``gpn`` A100s of ``mem`` GiB; ``section__key=value`` overrides one key
    of ``model``, ``parallel`` or ``training``."""
    model = dict(
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_query_groups=8,
        ffn_hidden_size=14336,
        vocab_size=128256,
        seq_length=8192,
    )
    par = dict(tp=2, pp=2, zero_stage=1)
    tr = dict(micro_batch_size=1, global_batch_size=16, recompute=Recompute.selective)
    for k, v in kw.items():
        sect, key = k.split("__")
        {"model": model, "parallel": par, "training": tr}[sect][key] = v
    return TrainSpec(
        engine=engine,
        model=ModelSpec(**model),
        cluster=ClusterSpec(
            num_nodes=nodes, gpus_per_node=gpn, gpu=Gpu.a100_80g, gpu_memory_gib=mem
        ),
        parallel=ParallelSpec(**par),
        training=TrainingSpec(**tr),
    )


def run_ir(spec):
    """The typed plan (:class:`trainc.compiler.ir.Plan`) with estimates."""
    _, diags, plan = plan_and_estimate(spec)
    assert plan is not None, [d.message for d in diags if d.is_error]
    return plan


def run(spec):
    """The plan.json view of :func:`run_ir`."""
    return run_ir(spec).to_json()
