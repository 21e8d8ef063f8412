"""An engine is a registration: every :class:`~trainc.schemas.Engine` has one row in each table
the compiler looks engines up in (docs/engines.md "Adding an engine"), and what
``parallel.zero_stage`` means on each engine is decided once (:mod:`trainc.compiler.decide`), as
are the ZeRO stages, offloads and recompute granularities the planner's search and TRC401's what-if
may try (:mod:`trainc.compiler.candidates`).

Sources of the expected meanings: Megatron-LM core_v0.16.1 ``megatron/training/arguments.py``
(``--use-distributed-optimizer``; Megatron-FSDP's ``--use-megatron-fsdp`` with
``optim_grads_params``), DeepSpeed 0.19.8 ``zero_optimization.stage``, torchtitan 0.3.0
``fully_shard`` (parameters, gradients and optimizer states sharded whatever zero_stage says).
The searches try Megatron-FSDP only where Megatron-LM's ``pretrain_gpt.py`` runs on CUDA,
DeepSpeed's ZeRO-Offload to the CPU, and on engine=fsdp its schema default only (TRC344).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import trainc
from trainc.compiler.candidates import (
    ENGINE_CANDIDATES,
    RECOMPUTES,
    offloads,
    recompute_steps,
    zero_stages,
    zero_steps,
)
from trainc.compiler.decide import ENGINE_TRAITS, DpSync, Sharding, zero_layout
from trainc.compiler.derive import derive
from trainc.compiler.emit.report import ZERO_STAGE_ROW
from trainc.compiler.estimate.engines import ESTIMATES
from trainc.compiler.estimate.explain import SHARDING
from trainc.compiler.ir import Engines
from trainc.compiler.normalize import normalize
from trainc.compiler.targets import SECTIONS, TARGETS, engine_configs
from trainc.launch import WORKER_ENGINES
from trainc.schemas import (
    ClusterSpec,
    DataSpec,
    Device,
    Engine,
    Entrypoint,
    ModelSpec,
    Offload,
    ParallelSpec,
    Recompute,
    TrainingSpec,
    TrainSpec,
)


def _spec(engine: Engine, zero_stage: int = 1) -> TrainSpec:
    """A small dense spec on one 8-GPU node (dp 8)."""
    return TrainSpec(
        engine=engine,
        model=ModelSpec(
            num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=1000, seq_length=128
        ),
        cluster=ClusterSpec(num_nodes=1, gpus_per_node=8),
        parallel=ParallelSpec(zero_stage=zero_stage),
        training=TrainingSpec(global_batch_size=64, train_iters=10),
        data=DataSpec(num_samples=10000),
    )


@pytest.mark.parametrize("engine", list(Engine), ids=lambda e: e.value)
def test_every_engine_has_one_row_in_each_table(engine: Engine) -> None:
    assert engine in TARGETS and engine in ENGINE_TRAITS and engine in ESTIMATES
    assert engine in ENGINE_CANDIDATES
    target = TARGETS[engine]
    assert target.section in SECTIONS
    assert target.section in {f.name for f in dataclasses.fields(Engines)}
    # the worker module is named once, by the launch side, never imported by the compiler
    module = WORKER_ENGINES[engine].module
    worker = Path(trainc.__file__).parent.parent / (module.replace(".", "/") + ".py")
    assert worker.is_file(), module
    assert module == f"trainc.launch.worker.engines.{engine.value}"


def test_the_layout_table_rows_cover_every_engine() -> None:
    # report.md's "ZeRO stage" row and explain's "optimizer sharding" row are looked up by
    # engine: a new Engine member without its row would raise KeyError at report time
    assert set(ZERO_STAGE_ROW) == set(Engine)
    assert set(SHARDING) == set(Engine)


def test_the_sections_are_the_ir_fields_in_order() -> None:
    assert tuple(f.name for f in dataclasses.fields(Engines)) == SECTIONS


@pytest.mark.parametrize(
    ("stage", "distopt", "mfsdp", "sharding", "sync"),
    [
        (0, False, False, Sharding.replicated, DpSync.ddp_buckets),
        (1, True, False, Sharding.dp_cp_expert_dp, DpSync.ddp_buckets),
        (2, False, False, Sharding.replicated, DpSync.ddp_buckets),
        (3, True, True, Sharding.dp_cp_expert_dp, DpSync.fsdp_units),
    ],
)
def test_zero_stage_on_megatron(
    stage: int, distopt: bool, mfsdp: bool, sharding: Sharding, sync: DpSync
) -> None:
    z = zero_layout(_spec(Engine.megatron, stage))
    assert (z.distributed_optimizer, z.megatron_fsdp, z.zero_stage) == (distopt, mfsdp, 0)
    assert (z.optimizer_sharding, z.dp_sync) == (sharding, sync)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_stage_on_deepspeed_is_the_zero_stage(stage: int) -> None:
    z = zero_layout(_spec(Engine.deepspeed, stage))
    assert (z.distributed_optimizer, z.megatron_fsdp, z.zero_stage) == (False, False, stage)
    assert z.optimizer_sharding is (Sharding.dp_cp if stage else Sharding.replicated)
    assert z.dp_sync is DpSync.zero


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_stage_on_fsdp_changes_nothing(stage: int) -> None:
    assert zero_layout(_spec(Engine.fsdp, stage)) == zero_layout(_spec(Engine.fsdp, 1))


@pytest.mark.parametrize("engine", list(Engine), ids=lambda e: e.value)
def test_engine_configs_fill_the_engines_own_section(engine: Engine) -> None:
    spec = normalize(_spec(engine))
    out = engine_configs(spec, derive(spec))
    assert list(out) == list(SECTIONS)
    filled = {k for k, v in out.items() if v is not None}
    assert filled == {"megatron_core", TARGETS[engine].section}


def _launched(spec: TrainSpec, entrypoint: Entrypoint, device: Device = Device.cuda) -> TrainSpec:
    """``spec`` started by ``entrypoint`` on ``device``."""
    launch = dataclasses.replace(spec.launch, entrypoint=entrypoint, device=device)
    return dataclasses.replace(spec, launch=launch)


@pytest.mark.parametrize(
    ("engine", "entrypoint", "device", "stages"),
    [
        (Engine.megatron, Entrypoint.trainc, Device.cuda, (0, 1)),
        (Engine.megatron, Entrypoint.megatron_lm, Device.cuda, (0, 1, 3)),
        (Engine.megatron, Entrypoint.megatron_lm, Device.cpu, (0, 1)),
        (Engine.deepspeed, Entrypoint.trainc, Device.cuda, (0, 1, 2, 3)),
        (Engine.fsdp, Entrypoint.trainc, Device.cuda, (1,)),
    ],
)
def test_the_zero_stages_the_searches_try(
    engine: Engine, entrypoint: Entrypoint, device: Device, stages: tuple[int, ...]
) -> None:
    assert zero_stages(_launched(_spec(engine), entrypoint, device)) == stages


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
def test_the_zero_steps_of_the_what_if(
    engine: Engine, entrypoint: Entrypoint, zero: int, steps: tuple[int, ...]
) -> None:
    assert zero_steps(_launched(_spec(engine, zero), entrypoint)) == steps


def test_only_deepspeed_offloads() -> None:
    assert offloads(_spec(Engine.deepspeed)) == (Offload.cpu,)
    assert offloads(_spec(Engine.megatron)) == offloads(_spec(Engine.fsdp)) == ()


@pytest.mark.parametrize(
    ("now", "after"),
    [
        (Recompute.none, (Recompute.selective, Recompute.full)),
        (Recompute.selective, (Recompute.full,)),
        (Recompute.full, ()),
    ],
)
def test_recompute_steps_follow_the_search_order(
    now: Recompute, after: tuple[Recompute, ...]
) -> None:
    assert list(RECOMPUTES) == [Recompute.none, Recompute.selective, Recompute.full]
    spec = _spec(Engine.megatron)
    spec = dataclasses.replace(spec, training=dataclasses.replace(spec.training, recompute=now))
    assert recompute_steps(spec) == after
