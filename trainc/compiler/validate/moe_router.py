"""TRC384, TRC385, TRC386: the MoE router's settings (group-limited routing, expert bias, dense
first layers) and whether it balances the experts' load at all; which engines build them and
multi-token prediction.

Sources: megatron-core 0.16.1 ``transformer/transformer_config.py``
``TransformerConfig.__post_init__`` (``moe_router_group_topk`` needs ``moe_router_num_groups``,
``num_moe_experts % moe_router_num_groups == 0``, ``moe_router_group_topk <=
moe_router_num_groups``; ``moe_router_enable_expert_bias`` needs ``moe_router_score_function
== "sigmoid"``). Load balancing: Megatron-LM ``megatron/core/transformer/moe/README.md``
(core_v0.16.1), which recommends ``--moe-router-load-balancing-type aux_loss`` with
``--moe-aux-loss-coeff 1e-2`` (Switch Transformer, arXiv:2101.03961 §2.2) or, DeepSeek-V3 style,
``--moe-router-enable-expert-bias`` with sigmoid scores (auxiliary-loss-free balancing,
arXiv:2408.15664; arXiv:2412.19437 §2.1.2).
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.decide import torchtitan_moe, traits
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.schemas import Entrypoint, MoeLoadBalancing, MoeScoreFunction, TrainSpec


def moe_router(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC384 for router settings Megatron-Core asserts on; TRC385 (warning) for an MoE model
    with no load balancing: balancing type none or an aux-loss type with coefficient 0, and no
    expert bias. Dense models (num_experts null) yield nothing."""
    experts = spec.model.num_experts
    if not experts:
        return
    yield from _group_routing(spec, experts)
    yield from _expert_bias(spec)
    yield from _dense_first(spec)
    yield from _load_balancing(spec)


def _group_routing(spec: TrainSpec, experts: int) -> Iterator[Diagnostic]:
    """TRC384: group-limited routing needs both keys and groups that divide the experts."""
    m = spec.model
    groups, gtop = m.moe_router_num_groups, m.moe_router_group_topk
    if (groups is None) != (gtop is None):
        have, lack = (
            ("moe_router_num_groups", "moe_router_group_topk")
            if gtop is None
            else ("moe_router_group_topk", "moe_router_num_groups")
        )
        yield diag(
            R.MOE_ROUTER_SETTINGS,
            f"{have} is set without {lack}: group-limited "
            "routing needs both (Megatron-Core asserts it)",
            f"model.{have}",
            related=(f"model.{lack}",),
            fix=f"set model.{lack} too (DeepSeek-V3: num_groups 8, group_topk 4), or "
            f"remove model.{have}",
            setting=have,
        )
    elif groups is not None and gtop is not None:
        if experts % groups:
            yield diag(
                R.MOE_ROUTER_SETTINGS,
                f"moe_router_num_groups ({groups}) does not divide num_experts ({experts})",
                "model.moe_router_num_groups",
                related=("model.num_experts",),
                fix=f"set model.moe_router_num_groups to a divisor of {experts}",
                num_groups=groups,
                num_experts=experts,
            )
        if gtop > groups:
            yield diag(
                R.MOE_ROUTER_SETTINGS,
                f"moe_router_group_topk ({gtop}) exceeds moe_router_num_groups ({groups})",
                "model.moe_router_group_topk",
                related=("model.moe_router_num_groups",),
                fix=f"set model.moe_router_group_topk to at most {groups}",
                edits={"model.moe_router_group_topk": groups},
                group_topk=gtop,
                num_groups=groups,
            )
        elif not experts % groups:
            yield from _group_sizes(experts, m.moe_router_topk, groups, gtop)


def _expert_bias(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC384: Megatron-Core's expert bias needs sigmoid scores (torchtitan's does not)."""
    m = spec.model
    sigmoid = m.moe_router_score_function is MoeScoreFunction.sigmoid
    # torchtitan 0.3.0's expert bias works with softmax scores too (its Qwen3 MoE configs)
    torchtitan = torchtitan_moe(spec)
    if m.moe_router_enable_expert_bias and not sigmoid and not torchtitan:
        yield diag(
            R.MOE_ROUTER_SETTINGS,
            "moe_router_enable_expert_bias with "
            f"moe_router_score_function {m.moe_router_score_function.value}: "
            "Megatron-Core supports the expert bias with sigmoid scores only",
            "model.moe_router_enable_expert_bias",
            related=("model.moe_router_score_function",),
            fix="set model.moe_router_score_function=sigmoid, or "
            "model.moe_router_enable_expert_bias=false",
            edits={"model.moe_router_score_function": "sigmoid"},
            score_function=m.moe_router_score_function.value,
        )


def _dense_first(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC384: the dense first layers must leave an MoE layer."""
    m = spec.model
    if m.moe_first_k_dense_layers >= m.num_layers:
        yield diag(
            R.MOE_ROUTER_SETTINGS,
            f"moe_first_k_dense_layers "
            f"({m.moe_first_k_dense_layers}) leaves none of the {m.num_layers} layers "
            "MoE",
            "model.moe_first_k_dense_layers",
            related=("model.num_layers",),
            fix=f"set model.moe_first_k_dense_layers below {m.num_layers}, or "
            "model.num_experts=null for a dense model",
            dense=m.moe_first_k_dense_layers,
            num_layers=m.num_layers,
        )


def _load_balancing(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC385: an MoE model whose experts' load nothing balances."""
    m = spec.model
    sigmoid = m.moe_router_score_function is MoeScoreFunction.sigmoid
    torchtitan = torchtitan_moe(spec)
    lb = m.moe_router_load_balancing_type
    aux = lb in (
        MoeLoadBalancing.aux_loss,
        MoeLoadBalancing.seq_aux_loss,
        MoeLoadBalancing.global_aux_loss,
    )
    balanced = (
        lb is MoeLoadBalancing.sinkhorn
        or (aux and m.moe_aux_loss_coeff > 0)
        or m.moe_router_enable_expert_bias
    )
    if not balanced:
        what = (
            "moe_router_load_balancing_type none"
            if lb is MoeLoadBalancing.none
            else f"moe_router_load_balancing_type {lb.value} with moe_aux_loss_coeff 0"
        )
        fix = (
            "set model.moe_router_enable_expert_bias=true (sigmoid scores, aux-loss-free, "
            "DeepSeek-V3) with a small seq_aux_loss (model.moe_aux_loss_coeff=1e-4)"
            if sigmoid
            else "set model.moe_router_enable_expert_bias=true (torchtitan's auxiliary-loss-free "
            "load_balance_coeff 1e-3; its MoE has no load-balancing loss)"
            if torchtitan
            else "set model.moe_router_load_balancing_type=aux_loss and "
            "model.moe_aux_loss_coeff=1e-2 (Megatron-Core's recommended start)"
        )
        edits = (
            {"model.moe_router_enable_expert_bias": True}
            if sigmoid or torchtitan
            else {
                "model.moe_router_load_balancing_type": "aux_loss",
                "model.moe_aux_loss_coeff": 0.01,
            }
        )
        yield diag(
            R.MOE_NO_LOAD_BALANCING,
            f"{what} and no expert bias: the {m.num_experts} "
            "experts' load is not balanced, and routing tends to collapse onto a few "
            "experts",
            "model.moe_aux_loss_coeff",
            related=("model.moe_router_load_balancing_type", "model.moe_router_enable_expert_bias"),
            fix=fix,
            edits=edits,
            load_balancing=lb.value,
            aux_loss_coeff=m.moe_aux_loss_coeff,
        )


def _group_sizes(experts: int, topk: int, groups: int, gtop: int) -> Iterator[Diagnostic]:
    """Megatron-Core 0.16.1 ``moe_utils.group_limited_topk`` scores each group by the sum of its
    best ``topk // group_topk`` experts, picks ``group_topk`` groups, then ``topk`` experts among
    theirs: topk < group_topk sums no expert (every group scores 0, an arbitrary choice, no
    error), and the picked groups must hold topk experts."""
    per_group = experts // groups
    if topk < gtop:
        yield diag(
            R.MOE_ROUTER_SETTINGS,
            f"moe_router_topk ({topk}) is below "
            f"moe_router_group_topk ({gtop}): Megatron-Core scores each group by its best "
            f"moe_router_topk // moe_router_group_topk = 0 experts, so every group scores "
            "0 and the groups are picked arbitrarily (no error is raised)",
            "model.moe_router_group_topk",
            related=("model.moe_router_topk",),
            fix=f"set model.moe_router_group_topk to at most {topk} (DeepSeek-V3: top-8 "
            "experts from 4 of 8 groups)",
            edits={"model.moe_router_group_topk": topk},
            topk=topk,
            group_topk=gtop,
        )
    elif topk > gtop * per_group:
        yield diag(
            R.MOE_ROUTER_SETTINGS,
            f"moe_router_topk ({topk}) exceeds the "
            f"{gtop * per_group} experts of the {gtop} picked groups ({per_group} each, "
            f"{experts} experts in {groups} groups)",
            "model.moe_router_group_topk",
            related=("model.moe_router_topk", "model.moe_router_num_groups"),
            fix=f"raise model.moe_router_group_topk to at least {-(-topk // per_group)}",
            topk=topk,
            group_topk=gtop,
            experts_per_group=per_group,
        )


def megatron_only_keys(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC386 for each of ``moe_first_k_dense_layers`` (> 0), ``mtp_num_layers``,
    ``moe_router_num_groups``, ``moe_router_group_topk`` and ``moe_router_enable_expert_bias``
    (not with engine fsdp and entrypoint torchtitan, whose MoE has the expert bias) that a spec
    sets with engine deepspeed or fsdp (their builders have no such setting: the
    value would not reach the model), and for ``mtp_num_layers`` with entrypoint trainc (the
    trainc worker builds GPTModel without ``mtp_block_spec``, so Megatron-Core 0.16.1 builds no
    MTP block). Keys of a dense model that only MoE reads are left to the inert-key check."""
    m = spec.model
    moe = bool(m.num_experts)
    keys: list[tuple[str, object]] = []
    if moe and m.moe_first_k_dense_layers:
        keys.append(("moe_first_k_dense_layers", m.moe_first_k_dense_layers))
    if m.mtp_num_layers:
        keys.append(("mtp_num_layers", m.mtp_num_layers))
    if moe and m.moe_router_num_groups is not None:
        keys.append(("moe_router_num_groups", m.moe_router_num_groups))
    if moe and m.moe_router_group_topk is not None:
        keys.append(("moe_router_group_topk", m.moe_router_group_topk))
    torchtitan = torchtitan_moe(spec)
    if moe and m.moe_router_enable_expert_bias and not torchtitan:
        # torchtitan 0.3.0's MoE has it: MoE.Config.load_balance_coeff (the update rate)
        keys.append(("moe_router_enable_expert_bias", True))
    if not traits(spec).megatron_core:
        engine = spec.engine.value
        for key, value in keys:
            yield diag(
                R.MEGATRON_ONLY_MODEL_KEY,
                f"model.{key} ({value}) with engine={engine}: "
                f"trainc's {engine} builder cannot express it (only Megatron-LM / "
                "Megatron-Core have the setting), so the model would not be the one "
                "the spec describes",
                f"model.{key}",
                related=("engine",),
                fix=f"set engine=megatron, or remove model.{key}",
                edits={"engine": "megatron"},
                setting=key,
                engine=engine,
            )
        return
    if m.mtp_num_layers and spec.launch.entrypoint is Entrypoint.trainc:
        yield diag(
            R.MEGATRON_ONLY_MODEL_KEY,
            f"model.mtp_num_layers ({m.mtp_num_layers}) with "
            "launch.entrypoint trainc: the trainc worker builds GPTModel without a "
            "multi-token-prediction block, so the MTP modules and their loss would be "
            "missing",
            "model.mtp_num_layers",
            related=("launch.entrypoint",),
            fix="set launch.entrypoint=megatron-lm (pretrain_gpt.py builds the MTP "
            "block), or remove model.mtp_num_layers",
            edits={"launch.entrypoint": "megatron-lm"},
            setting="mtp_num_layers",
            entrypoint="trainc",
        )
