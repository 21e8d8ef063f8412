"""Switches that follow from the (normalized) spec and the layout and that several artifacts
need: each is decided once (:mod:`trainc.compiler.decide` for the engine-dependent ones), and
``plan.json``'s ``derived`` shows it."""

from __future__ import annotations

from trainc.compiler.decide import distributed_optimizer as distributed_optimizer
from trainc.compiler.decide import grad_reduce_in_fp32 as grad_reduce_in_fp32
from trainc.compiler.decide import interleaved as interleaved
from trainc.compiler.derive import Derived
from trainc.schemas import TrainSpec


def layers_per_virtual_stage(spec: TrainSpec, d: Derived) -> int | None:
    """Layers per virtual pipeline stage for Megatron-LM's
    ``--num-layers-per-virtual-pipeline-stage``: only for an even split (uneven and account_for
    splits are written as ``--num-virtual-stages-per-pipeline-rank``); None otherwise."""
    p = spec.parallel
    if (
        not interleaved(spec)
        or d.layers_per_stage is None
        or p.pipeline_first_stage_layers is not None
        or p.pipeline_last_stage_layers is not None
        or p.account_for_embedding_in_pipeline_split
        or p.account_for_loss_in_pipeline_split
    ):
        return None
    return d.layers_per_stage[0] // p.vpp
