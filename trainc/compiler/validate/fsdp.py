"""TRC340-TRC344: engine=fsdp (PyTorch FSDP2 on a DeviceMesh). A key that engine=fsdp would not
read although the spec sets it (a Megatron-Core or DeepSpeed setting, a layer split torchtitan
cannot build) is TRC344: one truth, no silent fallback. The divisibility rules of the
model (tp divides heads and query groups, TRC201 / TRC202 / TRC207) apply unchanged: DTensor's
column-wise split of the q/k/v projections shards whole heads as Megatron's does.

Sources: torch 2.13 ``init_device_mesh`` (mesh size == world), ``fully_shard`` (HSDP on a 2-D
mesh), ``MixedPrecisionPolicy``, ``torch.distributed.pipelining`` schedules; torchtitan 0.3.0
``ParallelDims`` and ``TrainingConfig``. See docs/engines.md.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.decide import traits
from trainc.compiler.derive import Derived
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.targets.fsdp import torchtitan_stage_split
from trainc.schemas import (
    CpCommType,
    Device,
    Entrypoint,
    FsdpDtype,
    FsdpSpec,
    MoeDispatcher,
    MoeLoadBalancing,
    Offload,
    Optimizer,
    PipelineSchedule,
    PositionEmbedding,
    Precision,
    Recompute,
    RecomputeMethod,
    TrainSpec,
)


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def fsdp_rules(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """The engine=fsdp rules (nothing for another engine: TRC329 reports fsdp.* keys set there)."""
    f, p, t, c = spec.fsdp, spec.parallel, spec.training, spec.cluster
    dp = d.dp
    if dp is not None and f.dp_replicate >= 1:
        shard = f.dp_shard
        if dp % f.dp_replicate:
            # the fix must hold with the other key as given: dp_replicate = dp / dp_shard when
            # dp_shard divides dp, else both keys (the largest divisor of dp below dp_replicate)
            if shard is not None and shard >= 1 and dp % shard == 0:
                edits: dict[str, object] = {"fsdp.dp_replicate": dp // shard}
                fix = f"set fsdp.dp_replicate={dp // shard} (dp {dp} / fsdp.dp_shard {shard})"
            else:
                ok = [k for k in _divisors(dp) if k <= f.dp_replicate][-1]
                edits = {"fsdp.dp_replicate": ok}
                fix = f"set fsdp.dp_replicate={ok} (a divisor of dp {dp})"
                if shard is not None:
                    edits["fsdp.dp_shard"] = dp // ok
                    fix += f" and fsdp.dp_shard={dp // ok}"
            yield diag(
                R.FSDP_MESH,
                f"fsdp.dp_replicate ({f.dp_replicate}) does not divide dp "
                f"({dp}): the mesh (pp={p.pp}, dp_replicate, dp_shard, cp={p.cp}, "
                f"tp={p.tp}) cannot cover the {d.world_size} ranks",
                "fsdp.dp_replicate",
                related=("fsdp.dp_shard", "parallel.tp", "parallel.pp", "parallel.cp"),
                fix=fix,
                edits=edits,
                dp_replicate=f.dp_replicate,
                dp_shard=shard,
                dp=dp,
            )
        elif shard is not None and shard * f.dp_replicate != dp:
            yield diag(
                R.FSDP_MESH,
                f"fsdp.dp_replicate ({f.dp_replicate}) x fsdp.dp_shard "
                f"({shard}) = {f.dp_replicate * shard}, but dp is {dp} (world "
                f"{d.world_size} / (tp*pp*cp = {p.tp * p.pp * p.cp})): init_device_mesh "
                "refuses a mesh whose size is not the world",
                "fsdp.dp_shard",
                related=("fsdp.dp_replicate", "parallel.tp", "parallel.pp", "parallel.cp"),
                fix=f"set fsdp.dp_shard={dp // f.dp_replicate} (or leave it unset)",
                edits={"fsdp.dp_shard": dp // f.dp_replicate},
                dp_shard=shard,
                dp_replicate=f.dp_replicate,
                dp=dp,
            )
        elif shard is not None and f.dp_replicate > 1:
            group = shard * p.cp * p.tp
            if group > c.gpus_per_node:
                fits = [k for k in _divisors(dp) if dp // k * p.cp * p.tp <= c.gpus_per_node]
                better = (
                    f"set fsdp.dp_replicate={fits[0]}"
                    if fits
                    else "lower tp x cp, or use plain FSDP (fsdp.dp_replicate=1)"
                )
                yield diag(
                    R.FSDP_HSDP_NODE,
                    f"HSDP shard group dp_shard x cp x tp = {shard} x "
                    f"{p.cp} x {p.tp} = {group} ranks spans more than one node "
                    f"({c.gpus_per_node} GPUs): every layer's all-gather and "
                    "reduce-scatter crosses the inter-node fabric",
                    "fsdp.dp_shard",
                    related=("fsdp.dp_replicate", "cluster.gpus_per_node"),
                    fix=f"{better} so that one shard group is one node",
                    edits={"fsdp.dp_replicate": fits[0], "fsdp.dp_shard": None} if fits else None,
                    shard_group=group,
                    gpus_per_node=c.gpus_per_node,
                )
    if t.precision is Precision.fp16:
        yield diag(
            R.FSDP_PRECISION,
            "precision fp16 with engine=fsdp: FSDP2 needs a sharded "
            "gradient scaler for fp16, which neither the trainc worker nor torchtitan "
            "sets up (torchtitan's mixed_precision_param is bfloat16 or float32)",
            "training.precision",
            related=("engine",),
            fix="set training.precision=bf16",
            edits={"training.precision": "bf16"},
            precision="fp16",
        )
    param = f.param_dtype.value if f.param_dtype is not None else t.precision.value
    if p.tp > 1 and param == "bf16" and f.reduce_dtype is FsdpDtype.fp32:
        # MixedPrecisionPolicy.reduce_dtype casts FSDP's own reduce-scatter / HSDP all-reduce;
        # the TP gradient reductions (DTensor Partial -> Replicate, e.g. the norm weights
        # replicated over the TP group) run in the bf16 compute dtype:
        # https://github.com/pytorch/pytorch/issues/190626 (torch 2.13, Llama 3.1 TP 8).
        yield diag(
            R.FSDP_TP_REDUCE_BF16,
            f"fsdp.reduce_dtype fp32 with tp = {p.tp}: FSDP2's "
            "reduce_dtype covers its own reduce-scatter / all-reduce only; the tensor-"
            "parallel gradient reductions (the norm weights and other parameters "
            f"replicated over the {p.tp} TP ranks) still sum in bf16",
            "fsdp.reduce_dtype",
            related=("parallel.tp", "fsdp.param_dtype"),
            fix="if bf16 TP gradient sums matter, set parallel.tp=1 (FSDP-only sharding) "
            "or fsdp.param_dtype=fp32; otherwise accept bf16 TP reductions (PyTorch "
            "issue 190626)",
            tp=p.tp,
            param_dtype=param,
            reduce_dtype="fp32",
        )
    yield from _schedule(spec)
    yield from _unsupported(spec)
    yield from _layer_split(spec, d)
    yield from _experts(spec, d)


def _layer_split(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC344 for a pipeline layer split that torchtitan's ``pipeline_parallel_layers_per_stage``
    / ``first|last_stage_less_layers`` cannot express (:func:`torchtitan_stage_split`)."""
    p = spec.parallel
    if p.pp == 1 or d.layers_per_stage is None or torchtitan_stage_split(spec, d) is not None:
        return
    first, last = p.pipeline_first_stage_layers, p.pipeline_last_stage_layers
    key = (
        "parallel.pipeline_first_stage_layers"
        if first is not None
        else "parallel.pipeline_last_stage_layers"
    )
    split = "/".join(map(str, d.layers_per_stage))
    why = (
        f"with vpp {p.vpp} an uneven split resizes every model chunk of the first and the "
        "last rank, but torchtitan shortens only the first and the last "
        "virtual stage"
        if p.vpp > 1
        else "an end stage holds more layers than the middle "
        "stages, and torchtitan can only give the first and the last stage fewer"
    )
    yield diag(
        R.FSDP_UNSUPPORTED,
        f"uneven pipeline split {split} (pipeline_first_stage_layers "
        f"{first}, pipeline_last_stage_layers {last}) with engine=fsdp: torchtitan 0.3.0 "
        "builds a split from pipeline_parallel_layers_per_stage and "
        "pipeline_parallel_first/last_stage_less_layers only: " + why,
        key,
        related=(
            "parallel.pipeline_first_stage_layers",
            "parallel.pipeline_last_stage_layers",
            "parallel.vpp",
            "engine",
        ),
        fix="remove parallel.pipeline_first_stage_layers and "
        "parallel.pipeline_last_stage_layers (an even split), or use "
        "parallel.account_for_embedding_in_pipeline_split / "
        "account_for_loss_in_pipeline_split"
        + (
            ", or set parallel.vpp=1"
            if p.vpp > 1
            else ", or end stages with at most the middle stages' layers"
        ),
        edits={
            "parallel.pipeline_first_stage_layers": None,
            "parallel.pipeline_last_stage_layers": None,
        },
        layers_per_stage=split,
        vpp=p.vpp,
        setting="pipeline split",
    )


def _schedule(spec: TrainSpec) -> Iterator[Diagnostic]:
    f, p = spec.fsdp, spec.parallel
    if p.pp == 1 or f.pp_schedule is None:
        return
    want = {
        PipelineSchedule.one_f1b: "vpp 1",
        PipelineSchedule.interleaved_1f1b: "vpp > 1",
        PipelineSchedule.zbv_zero_bubble: "vpp 2 (a V of two stages per rank)",
    }
    ok = {
        PipelineSchedule.one_f1b: p.vpp == 1,
        PipelineSchedule.interleaved_1f1b: p.vpp > 1,
        PipelineSchedule.zbv_zero_bubble: p.vpp == 2,
    }[f.pp_schedule]
    if not ok:
        fit = PipelineSchedule.one_f1b if p.vpp == 1 else PipelineSchedule.interleaved_1f1b
        # the vpp the written schedule needs (Interleaved1F1B: 2, the smallest looped count)
        vpp = {
            PipelineSchedule.one_f1b: 1,
            PipelineSchedule.interleaved_1f1b: 2,
            PipelineSchedule.zbv_zero_bubble: 2,
        }[f.pp_schedule]
        yield diag(
            R.FSDP_SCHEDULE,
            f"fsdp.pp_schedule {f.pp_schedule.value} needs "
            f"{want[f.pp_schedule]}, but vpp is {p.vpp} (torch.distributed.pipelining "
            "builds one stage per rank for a single-stage schedule and vpp stages for a "
            "looped one)",
            "fsdp.pp_schedule",
            related=("parallel.vpp", "parallel.pp"),
            fix=f"set parallel.vpp={vpp} (keeps {f.pp_schedule.value}), or "
            f"fsdp.pp_schedule={fit.value} (keeps vpp {p.vpp})",
            edits={"parallel.vpp": vpp},
            schedule=f.pp_schedule.value,
            vpp=p.vpp,
            vpp_needed=vpp,
        )


def _unsupported(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC344 / TRC342 for settings engine=fsdp does not read or run, in named steps."""
    yield from _zero_and_offload(spec)
    yield from _megatron_model_settings(spec)
    yield from _recompute_and_compile(spec)
    yield from _worker_tensor_parallel(spec)
    yield from _torchtitan_limits(spec)


def _zero_and_offload(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC344: parallel.zero_stage and training.offload_* are ZeRO settings FSDP2 does not read."""
    p, t, f = spec.parallel, spec.training, spec.fsdp
    # 1 is the schema default; 3 states what FSDP2 with reshard_after_forward does (ZeRO-3):
    # both agree with the plan. Anything else would not reach the engine as written.
    if p.zero_stage not in (1, 3) or (p.zero_stage == 3 and not f.reshard_after_forward):
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"parallel.zero_stage ({p.zero_stage}) is not read by "
            "engine=fsdp: FSDP2 always shards parameters, gradients and optimizer states "
            "over dp_shard (ZeRO-3); fsdp.reshard_after_forward=false keeps the gathered "
            "parameters from forward to backward (ZeRO-2-like), fsdp.dp_replicate > 1 "
            "shards within a group only (HSDP)",
            "parallel.zero_stage",
            related=("engine",),
            fix="remove parallel.zero_stage (and use "
            "fsdp.reshard_after_forward / fsdp.dp_replicate)",
            edits={"parallel.zero_stage": 1},
            zero_stage=p.zero_stage,
        )
    for key in ("offload_optimizer", "offload_param"):
        if getattr(t, key) is not Offload.none:
            yield diag(
                R.FSDP_UNSUPPORTED,
                f"training.{key} ({getattr(t, key).value}) is a "
                "DeepSpeed ZeRO setting; engine=fsdp offloads parameters, gradients and "
                "optimizer states together with fsdp.cpu_offload (CPUOffloadPolicy; no "
                "NVMe)",
                f"training.{key}",
                related=("engine",),
                fix=f"remove training.{key} and set fsdp.cpu_offload=true",
                edits={f"training.{key}": "none", "fsdp.cpu_offload": True},
                setting=key,
            )


def _megatron_model_settings(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC344: model and context-parallel settings only Megatron-Core builds."""
    p = spec.parallel
    if spec.model.multi_latent_attention:
        yield diag(
            R.FSDP_UNSUPPORTED,
            "model.multi_latent_attention: trainc's engine=fsdp builds "
            "grouped-query attention only (the trainc FSDP2 worker's model and "
            "torchtitan's Llama registry); Megatron-Core builds MLA",
            "model.multi_latent_attention",
            related=("engine",),
            fix="set engine=megatron for a model with multi-head latent attention",
            edits={"engine": "megatron"},
            setting="multi_latent_attention",
        )
    if spec.model.qk_layernorm and not spec.model.multi_latent_attention:
        yield diag(
            R.FSDP_UNSUPPORTED,
            "model.qk_layernorm: the trainc FSDP2 worker's attention "
            "has no query / key head norms (Megatron-Core builds them: "
            "TransformerConfig.qk_layernorm)",
            "model.qk_layernorm",
            related=("engine",),
            fix="set engine=megatron (or deepspeed) for a model with QK-norm",
            edits={"engine": "megatron"},
            setting="qk_layernorm",
        )
    if spec.model.window_size is not None:
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"model.window_size ({spec.model.window_size}): the trainc FSDP2 worker's "
            "attention and torchtitan 0.3.0's Llama are full causal on every layer (no "
            "sliding window); training without it is a different model from the spec's",
            "model.window_size",
            related=("engine", "model.window_attn_skip_freq"),
            fix="set engine=megatron (or deepspeed), which build Megatron-Core's "
            "sliding-window attention (TransformerConfig.window_size)",
            edits={"engine": "megatron"},
            setting="window_size",
        )
    if p.cp_comm_type is not CpCommType.p2p:
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"parallel.cp_comm_type ({p.cp_comm_type.value}) is a "
            "Megatron-Core setting (TransformerConfig.cp_comm_type): engine=fsdp's "
            "context parallelism (torchtitan 0.3.0's, which has no such option in "
            "ParallelismConfig; the trainc FSDP2 worker runs no cp) would not read it",
            "parallel.cp_comm_type",
            related=("engine", "parallel.cp"),
            fix="remove parallel.cp_comm_type, or set engine=megatron",
            edits={"parallel.cp_comm_type": "p2p"},
            setting="cp_comm_type",
            cp_comm_type=p.cp_comm_type.value,
        )


def _recompute_and_compile(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC344: Megatron-Core's recompute groups; fsdp.compile on CPU."""
    t, f = spec.training, spec.fsdp
    if t.recompute is Recompute.full and (
        t.recompute_method is RecomputeMethod.block or (t.recompute_num_layers or 1) != 1
    ):
        method = t.recompute_method.value if t.recompute_method else "uniform"
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"training.recompute_method {method} / "
            f"recompute_num_layers {t.recompute_num_layers} with engine=fsdp: full "
            "recompute there checkpoints every transformer block on its own "
            "(torch.utils.checkpoint per block, torchtitan's FullAC); Megatron-Core's "
            "groups of layers and its block method have no FSDP2 equivalent",
            "training.recompute_method"
            if t.recompute_method is RecomputeMethod.block
            else "training.recompute_num_layers",
            related=("training.recompute", "engine"),
            fix="remove training.recompute_method and training.recompute_num_layers "
            "(every block recomputed), or set engine=megatron",
            edits={"training.recompute_method": None, "training.recompute_num_layers": None},
            setting="recompute_method",
            recompute_method=method,
            recompute_num_layers=t.recompute_num_layers,
        )
    if f.compile and spec.launch.device is Device.cpu:
        yield diag(
            R.FSDP_UNSUPPORTED,
            "fsdp.compile with launch.device cpu: the trainc worker "
            "runs FSDP2 eagerly on CPU (torch.compile of FSDP2 blocks needs the inductor "
            "C++/Triton toolchain of a GPU machine)",
            "fsdp.compile",
            related=("launch.device",),
            fix="set fsdp.compile=false for the CPU run",
            edits={"fsdp.compile": False},
            device="cpu",
        )


def _worker_tensor_parallel(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC344: what the trainc FSDP2 worker's tensor-parallel plan lacks."""
    p = spec.parallel
    m = spec.model
    if p.tp > 1 and spec.launch.entrypoint is Entrypoint.trainc:
        worker: list[tuple[str, str, dict[str, object]]] = []
        if not m.untie_embeddings_and_output_weights:
            worker.append(
                (
                    "model.untie_embeddings_and_output_weights",
                    "tied embeddings (one "
                    "weight split row-wise as the embedding and column-wise as the "
                    "output)",
                    {"model.untie_embeddings_and_output_weights": True},
                )
            )
        if m.position_embedding is not PositionEmbedding.rope:
            worker.append(
                (
                    "model.position_embedding",
                    "learned position embeddings (the "
                    "sequence-parallel embedding output is a sequence shard)",
                    {"model.position_embedding": "rope"},
                )
            )
        for key, what, edits in worker:
            yield diag(
                R.FSDP_UNSUPPORTED,
                f"{key}: the trainc FSDP2 worker's tensor-parallel "
                f"plan (tp = {p.tp}) has no {what}",
                key,
                related=("parallel.tp", "launch.entrypoint"),
                fix=f"set parallel.tp=1, or {key}="
                f"{str(next(iter(edits.values()))).lower()}, or "
                "launch.entrypoint=torchtitan",
                edits=edits,
                tp=p.tp,
                setting=key,
            )


def _torchtitan_limits(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC344 / TRC342: what torchtitan 0.3.0 refuses (SGD, a bf16 gradient reduce)."""
    t, f = spec.training, spec.fsdp
    if t.optimizer is Optimizer.sgd and spec.launch.entrypoint is Entrypoint.torchtitan:
        yield diag(
            R.FSDP_UNSUPPORTED,
            "training.optimizer sgd with launch.entrypoint torchtitan: "
            "torchtitan 0.3.0 builds Adam, AdamW and DistMuon only "
            "(OptimizersContainer._resolve_optimizer_factory raises NotImplementedError "
            "for another name)",
            "training.optimizer",
            related=("launch.entrypoint",),
            fix="set training.optimizer=adam, or launch.entrypoint=trainc (the trainc "
            "FSDP2 worker runs SGD)",
            edits={"training.optimizer": "adam"},
            optimizer="sgd",
            entrypoint="torchtitan",
        )
    if f.reduce_dtype is FsdpDtype.bf16:
        yield diag(
            R.FSDP_PRECISION,
            "fsdp.reduce_dtype bf16: the trainc worker reduces in bf16, "
            "but torchtitan 0.3.0 accepts only float32 (mixed_precision_reduce), so "
            "torchtitan_args.txt could not carry it",
            "fsdp.reduce_dtype",
            related=("engine",),
            fix="set fsdp.reduce_dtype=fp32",
            edits={"fsdp.reduce_dtype": "fp32"},
            reduce_dtype="bf16",
        )


def _experts(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC344 / TRC348 for an MoE model (``model.num_experts``) with engine=fsdp, as torchtitan
    0.3.0 builds it (FSDP2 + expert parallelism):

    * the trainc FSDP2 worker (launch.entrypoint trainc) builds dense transformers only: TRC344;
    * ep must divide ``dp_shard x cp x tp``: EP borrows those ranks, the sparse mesh is
      ``(pp, dp_replicate, efsdp, ep)`` with ``efsdp = dp_shard * cp * tp // ep``
      (``ParallelDims.build_mesh`` in ``torchtitan/distributed/parallel_dims.py``; another ep
      fails in ``DeviceMesh._unflatten`` / ``_validate_meshes``): TRC348, with the ep values
      that divide both that product and num_experts (TRC205 checks the experts alone);
    * there is no expert tensor-parallel degree (``ParallelismConfig`` has
      ``expert_parallel_degree`` only): the experts are split over tp without EP and not at all
      with EP, so a ``parallel.etp`` other than that is TRC344;
    * the MoE block has no auxiliary or z-loss and no token capacity (``MoE.Config``,
      ``TokenChoiceTopKRouter.Config`` in ``torchtitan/models/common/moe.py``: load balancing is
      the auxiliary-loss-free expert bias, ``load_balance_coeff``; routing is dropless), and
      its dispatchers are all-to-all, DeepEP or HybridEP (``comm_backend`` standard / deepep /
      hybridep, ``torchtitan/models/common/token_dispatcher.py``), never all-gather: TRC344.
    """
    experts = spec.model.num_experts
    if not experts:
        return
    yield from _experts_on_the_worker(spec)
    yield from _expert_mesh(spec, d, experts)
    yield from _expert_tp(spec)
    if spec.launch.entrypoint is Entrypoint.torchtitan:
        yield from _torchtitan_moe(spec)


def _experts_on_the_worker(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC344: the trainc FSDP2 worker builds dense transformers only."""
    m = spec.model
    if spec.launch.entrypoint is Entrypoint.trainc:
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"model.num_experts ({m.num_experts}) with "
            "launch.entrypoint trainc: the trainc FSDP2 worker builds dense transformers "
            "only; torchtitan 0.3.0 runs FSDP2 with experts and expert parallelism",
            "model.num_experts",
            related=("engine", "launch.entrypoint"),
            fix="set launch.entrypoint=torchtitan (CUDA; torchtitan_args.txt), or engine=megatron",
            edits={"launch.entrypoint": "torchtitan"},
            num_experts=m.num_experts,
            entrypoint="trainc",
        )


def _expert_mesh(spec: TrainSpec, d: Derived, experts: int) -> Iterator[Diagnostic]:
    """TRC348: ep must divide dp_shard x cp x tp (torchtitan borrows those ranks)."""
    p, f = spec.parallel, spec.fsdp
    dp = d.dp
    shard = (
        f.dp_shard
        if f.dp_shard is not None
        else (
            dp // f.dp_replicate
            if dp and f.dp_replicate >= 1 and dp % f.dp_replicate == 0
            else None
        )
    )
    if shard is not None and p.ep > 1:
        dense = shard * p.cp * p.tp
        if dense % p.ep:
            ok = [e for e in _divisors(dense) if experts % e == 0]
            yield diag(
                R.FSDP_EXPERT_MESH,
                f"ep ({p.ep}) does not divide dp_shard x cp x tp = "
                f"{shard} x {p.cp} x {p.tp} = {dense}: torchtitan's expert parallelism "
                "borrows those ranks (efsdp = dp_shard * cp * tp / ep), so "
                "ParallelDims.build_mesh cannot unflatten the sparse mesh (pp, "
                "dp_replicate, efsdp, ep)",
                "parallel.ep",
                related=("fsdp.dp_shard", "parallel.cp", "parallel.tp", "model.num_experts"),
                fix=f"set parallel.ep to one of {', '.join(map(str, ok))} (divisors of "
                f"{dense} that divide the {experts} experts)",
                edits={"parallel.ep": max(e for e in ok if e <= p.ep)},
                ep=p.ep,
                dp_shard=shard,
                cp=p.cp,
                tp=p.tp,
                dense_ranks=dense,
            )


def _expert_tp(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC344: torchtitan 0.3.0 has no expert tensor-parallel degree."""
    p = spec.parallel
    want = p.tp if p.ep == 1 else 1
    if p.etp is not None and p.etp != want:
        why = (
            f"without expert parallelism the experts are split over tp ({p.tp})"
            if p.ep == 1
            else f"with ep {p.ep} the experts are not tensor-parallel (EP borrows the tp ranks)"
        )
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"parallel.etp ({p.etp}) with engine=fsdp: torchtitan "
            "0.3.0 has no expert tensor-parallel degree; " + why,
            "parallel.etp",
            related=("parallel.ep", "parallel.tp", "engine"),
            fix=f"remove parallel.etp (it is {want} here), or set engine=megatron",
            edits={"parallel.etp": None},
            etp=p.etp,
            expected_etp=want,
            ep=p.ep,
            tp=p.tp,
        )


def _torchtitan_moe(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC344: the MoE settings torchtitan 0.3.0's MoE block lacks."""
    m = spec.model
    lb = m.moe_router_load_balancing_type
    missing: list[tuple[str, str, dict[str, object]]] = []
    if lb is MoeLoadBalancing.sinkhorn or (
        lb is not MoeLoadBalancing.none and m.moe_aux_loss_coeff > 0
    ):
        what = (
            "Sinkhorn routing"
            if lb is MoeLoadBalancing.sinkhorn
            else f"{lb.value} load-balancing loss (coefficient {m.moe_aux_loss_coeff:g})"
        )
        balance: dict[str, object] = {
            "model.moe_aux_loss_coeff": 0.0,
            "model.moe_router_load_balancing_type": "none",
        }
        if not m.moe_router_enable_expert_bias:  # what torchtitan balances with instead
            balance["model.moe_router_enable_expert_bias"] = True
        missing.append(
            (
                "model.moe_aux_loss_coeff"
                if lb is not MoeLoadBalancing.sinkhorn
                else "model.moe_router_load_balancing_type",
                what,
                balance,
            )
        )
    if m.moe_z_loss_coeff:
        missing.append(
            (
                "model.moe_z_loss_coeff",
                f"router z-loss ({m.moe_z_loss_coeff:g})",
                {"model.moe_z_loss_coeff": None},
            )
        )
    if m.moe_expert_capacity_factor is not None:
        missing.append(
            (
                "model.moe_expert_capacity_factor",
                f"token capacity ({m.moe_expert_capacity_factor:g}; its routing is dropless)",
                {"model.moe_expert_capacity_factor": None},
            )
        )
    if m.moe_token_dispatcher_type is MoeDispatcher.allgather:
        missing.append(
            (
                "model.moe_token_dispatcher_type",
                "all-gather dispatcher (it dispatches by all-to-all, DeepEP or HybridEP)",
                {"model.moe_token_dispatcher_type": "alltoall"},
            )
        )
    for key, what, edits in missing:
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"{key} with launch.entrypoint torchtitan: torchtitan "
            f"0.3.0's MoE has no {what}; it balances the experts with the "
            "auxiliary-loss-free expert bias only (MoE.Config.load_balance_coeff)",
            key,
            related=("engine", "launch.entrypoint"),
            fix=_fix_without(key, edits),
            edits=edits,
            setting=key,
        )


def _fix_without(key: str, edits: dict[str, object]) -> str:
    """TRC344's fix for a MoE setting torchtitan lacks: remove it, and where it was the load
    balancing, balance with the expert bias instead (else TRC385: no balancing at all)."""
    if edits.get("model.moe_router_enable_expert_bias"):
        return (
            f"remove {key} and set model.moe_router_enable_expert_bias=true (torchtitan's "
            "load_balance_coeff), or set engine=megatron"
        )
    return f"remove {key} (or set engine=megatron)"


def inert_fsdp(spec: TrainSpec) -> Iterator[tuple[str, str]]:
    """(key, why) for ``fsdp.*`` keys set away from their default with another engine, and for
    ``fsdp.pp_schedule`` without a pipeline (pp 1) with engine=fsdp (TRC329)."""
    if traits(spec).fsdp2:
        if spec.parallel.pp == 1 and spec.fsdp.pp_schedule is not None:
            yield "fsdp.pp_schedule", "parallel.pp is 1 (no pipeline to schedule)"
        return
    fields = FsdpSpec.__dataclass_fields__
    for name, fld in fields.items():
        if getattr(spec.fsdp, name) != fld.default:
            yield f"fsdp.{name}", f"engine is {spec.engine.value}"
