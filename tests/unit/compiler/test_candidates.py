"""The values the planner's search and the fit check's what-if both try
(:mod:`trainc.compiler.candidates`).

Expected stages: Megatron-Core 0.16.1 DDP (0), ``--use-distributed-optimizer`` (1) and
Megatron-FSDP (3, only where Megatron-LM's ``pretrain_gpt.py`` runs on CUDA); DeepSpeed 0.19.8
``zero_optimization.stage`` 0 to 3 with ZeRO-Offload to the CPU; FSDP2 its schema default only
(it shards by the ``fsdp.*`` keys, TRC344).
"""

from __future__ import annotations

import dataclasses

import pytest

from trainc.compiler.candidates import (
    RECOMPUTES,
    offloads,
    recompute_steps,
    zero_stages,
    zero_steps,
)
from trainc.schemas import (
    ClusterSpec,
    DataSpec,
    Device,
    Engine,
    Entrypoint,
    LaunchSpec,
    ModelSpec,
    Offload,
    ParallelSpec,
    Recompute,
    TrainingSpec,
    TrainSpec,
)


def _spec(
    engine: Engine,
    zero_stage: int = 1,
    entrypoint: Entrypoint = Entrypoint.trainc,
    recompute: Recompute = Recompute.none,
) -> TrainSpec:
    """A small dense spec on one 8-GPU CUDA node."""
    return TrainSpec(
        engine=engine,
        model=ModelSpec(
            num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1000, seq_length=128
        ),
        cluster=ClusterSpec(num_nodes=1, gpus_per_node=8),
        parallel=ParallelSpec(zero_stage=zero_stage),
        training=TrainingSpec(global_batch_size=64, train_iters=10, recompute=recompute),
        data=DataSpec(num_samples=10000),
        launch=LaunchSpec(entrypoint=entrypoint, device=Device.cuda),
    )


@pytest.mark.parametrize(
    ("engine", "entrypoint", "stages"),
    [
        (Engine.megatron, Entrypoint.trainc, (0, 1)),
        (Engine.megatron, Entrypoint.megatron_lm, (0, 1, 3)),
        (Engine.deepspeed, Entrypoint.trainc, (0, 1, 2, 3)),
        (Engine.fsdp, Entrypoint.trainc, (1,)),
    ],
)
def test_zero_stages(engine: Engine, entrypoint: Entrypoint, stages: tuple[int, ...]) -> None:
    assert zero_stages(_spec(engine, entrypoint=entrypoint)) == stages


def test_megatron_fsdp_needs_cuda() -> None:
    spec = _spec(Engine.megatron, entrypoint=Entrypoint.megatron_lm)
    on_cpu = dataclasses.replace(spec, launch=dataclasses.replace(spec.launch, device=Device.cpu))
    assert zero_stages(on_cpu) == (0, 1)


@pytest.mark.parametrize(
    ("engine", "entrypoint", "zero", "steps"),
    [
        # the distributed optimizer and Megatron-FSDP are each a change of their own
        (Engine.megatron, Entrypoint.megatron_lm, 0, (1, 3)),
        (Engine.megatron, Entrypoint.megatron_lm, 1, (3,)),
        (Engine.megatron, Entrypoint.megatron_lm, 3, ()),
        (Engine.megatron, Entrypoint.trainc, 0, (1,)),
        (Engine.megatron, Entrypoint.trainc, 1, ()),
        # DeepSpeed climbs one stage at a time
        (Engine.deepspeed, Entrypoint.trainc, 0, (1,)),
        (Engine.deepspeed, Entrypoint.trainc, 2, (3,)),
        (Engine.deepspeed, Entrypoint.trainc, 3, ()),
        (Engine.fsdp, Entrypoint.trainc, 1, ()),
    ],
)
def test_zero_steps(
    engine: Engine, entrypoint: Entrypoint, zero: int, steps: tuple[int, ...]
) -> None:
    assert zero_steps(_spec(engine, zero, entrypoint)) == steps


def test_offloads_are_deepspeeds_only() -> None:
    assert offloads(_spec(Engine.deepspeed)) == (Offload.cpu,)
    assert offloads(_spec(Engine.megatron)) == offloads(_spec(Engine.fsdp)) == ()


def test_recompute_steps_follow_the_search_order() -> None:
    assert list(RECOMPUTES) == [Recompute.none, Recompute.selective, Recompute.full]
    assert recompute_steps(_spec(Engine.megatron)) == (Recompute.selective, Recompute.full)
    spec = _spec(Engine.megatron, recompute=Recompute.selective)
    assert recompute_steps(spec) == (Recompute.full,)
    assert recompute_steps(_spec(Engine.megatron, recompute=Recompute.full)) == ()
