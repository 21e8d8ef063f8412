"""Derived sizes shared by the validators and the planner. Total functions: a quantity that does
not divide evenly is None (a validator reports why), never an exception.

Formulas mirror Megatron-Core 0.16: ``parallel_state.initialize_model_parallel`` (dp, expert dp),
``num_microbatches_calculator`` (microbatches), ``transformer_block.get_num_layers_to_build``
(layers per stage), ``vocab_size_with_padding`` (padded vocab).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainc.schemas import TrainSpec


@dataclass(frozen=True, slots=True)
class Derived:
    """Grid and batch quantities of a normalized spec (counts; None = does not divide)."""

    world_size: int
    """num_nodes x gpus_per_node (GPUs in the job)."""
    model_parallel: int
    """tp x pp x cp: GPUs holding one replica of the dense grid."""
    dp: int | None
    """world / (tp*pp*cp) (Megatron's data_parallel_size; excludes cp)."""
    etp: int
    """Expert tensor-parallel degree."""
    expert_dp: int | None
    """world / (etp*ep*pp) (expert data-parallel size; tp and cp fold into it)."""
    num_microbatches: int | None
    """global_batch_size / (micro_batch_size * dp)."""
    layers_per_stage: tuple[int, ...] | None
    """Transformer layers on each PP stage (sums to num_layers)."""
    padded_vocab_size: int
    """vocab padded to a multiple of make_vocab_size_divisible_by * tp."""
    num_moe_layers: int
    """Layers that are MoE layers (0 for dense models)."""


def _div(a: int, b: int) -> int | None:
    return a // b if b > 0 and a % b == 0 and a // b >= 1 else None


def padded_vocab(vocab_size: int, divisible_by: int, tp: int) -> int:
    """Megatron's padding: ``ceil(V / (d*tp)) * d*tp``.

    >>> padded_vocab(32000, 128, 8)
    32768
    >>> padded_vocab(128256, 128, 4)
    128512
    """
    unit = max(divisible_by, 1) * max(tp, 1)
    return math.ceil(vocab_size / unit) * unit


def layers_per_stage(num_layers: int, pp: int, first: int | None, last: int | None,
                     account_for_embedding: bool = False,
                     account_for_loss: bool = False) -> tuple[int, ...] | None:
    """Transformer layers on each pipeline stage, or None if the split is invalid.

    Even split: ``L/pp`` each. Uneven (Megatron ``num_layers_in_first/last_pipeline_stage``):
    the given ends, and the rest spread evenly over the middle stages. ``account_for_*``
    (Megatron ``account_for_embedding/loss_in_pipeline_split``, ``get_num_layers_to_build``):
    ``L' = L + [embedding] + [loss]`` is split evenly and the first (last) stage builds one layer
    fewer; it cannot be combined with first/last counts (megatron_rules.md PP-10, PP-11).

    >>> layers_per_stage(30, 4, 8, 8)
    (8, 7, 7, 8)
    >>> layers_per_stage(30, 4, None, None) is None
    True
    >>> layers_per_stage(126, 16, None, None, True, True)[:3]
    (7, 8, 8)
    """
    if pp < 1 or num_layers < 1:
        return None
    extra = int(account_for_embedding) + int(account_for_loss)
    if extra and (first is not None or last is not None):
        return None
    if first is None and last is None:
        per = _div(num_layers + extra, pp)
        if not per:
            return None
        out = [per] * pp
        out[0] -= int(account_for_embedding)
        out[-1] -= int(account_for_loss)
        return tuple(out) if min(out) >= 0 and sum(out) == num_layers else None
    if pp == 1:
        return None
    f = first if first is not None else None
    la = last if last is not None else None
    n_given = (f is not None) + (la is not None)
    mid_stages = pp - n_given
    mid_layers = num_layers - (f or 0) - (la or 0)
    if (f is not None and f < 1) or (la is not None and la < 1) or mid_layers < 0:
        return None
    if mid_stages == 0:
        if mid_layers != 0:
            return None
        mid: tuple[int, ...] = ()
    else:
        per = _div(mid_layers, mid_stages)
        if per is None:
            return None
        mid = (per,) * mid_stages
    return ((f,) if f is not None else ()) + mid + ((la,) if la is not None else ())


def num_moe_layers(spec: TrainSpec) -> int:
    """MoE layers: layer i (0-based) is MoE iff ``i % moe_layer_freq == 0`` (Megatron's int form)."""
    m = spec.model
    if not m.num_experts or m.moe_layer_freq < 1:
        return 0
    return len(range(0, m.num_layers, m.moe_layer_freq))


def derive(spec: TrainSpec) -> Derived:
    """Derived quantities of a *normalized* spec (see :func:`trainc.compiler.normalize.normalize`)."""
    c, p, t, m = spec.cluster, spec.parallel, spec.training, spec.model
    world = c.num_nodes * c.gpus_per_node
    mp = p.tp * p.pp * p.cp
    dp = _div(world, mp)
    etp = p.etp if p.etp is not None else p.tp
    edp = _div(world, etp * p.ep * p.pp)
    nmb = _div(t.global_batch_size, t.micro_batch_size * dp) if dp else None
    return Derived(
        world_size=world,
        model_parallel=mp,
        dp=dp,
        etp=etp,
        expert_dp=edp,
        num_microbatches=nmb,
        layers_per_stage=layers_per_stage(m.num_layers, p.pp, p.pipeline_first_stage_layers,
                                          p.pipeline_last_stage_layers,
                                          p.account_for_embedding_in_pipeline_split,
                                          p.account_for_loss_in_pipeline_split),
        padded_vocab_size=padded_vocab(m.vocab_size, m.make_vocab_size_divisible_by, p.tp),
        num_moe_layers=num_moe_layers(spec),
    )
