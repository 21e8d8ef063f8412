"""The FSDP2 settings of a validated engine=fsdp spec (``plan.json`` ``engines.fsdp``): the
DeviceMesh, the ``fully_shard`` arguments, the mixed-precision and offload policies, tensor and
pipeline parallelism, activation checkpointing, compile, optimizer and schedule, and the
torchtitan 0.3.0 command line that runs the same layout (``torchtitan_args.txt``).

Sources (torch 2.13): ``torch/distributed/device_mesh.py`` ``init_device_mesh(device_type,
mesh_shape, mesh_dim_names=...)``; ``torch/distributed/fsdp/_fully_shard/_fully_shard.py``
``fully_shard(module, *, mesh, reshard_after_forward, mp_policy, offload_policy)`` (a 2-D mesh
means HSDP: replicate over dim 0, shard over dim 1); ``_fsdp_api.py`` ``MixedPrecisionPolicy
(param_dtype, reduce_dtype)``, ``CPUOffloadPolicy(pin_memory)``;
``torch/distributed/pipelining/schedules.py`` (``Schedule1F1B``, ``ScheduleInterleaved1F1B``,
``ScheduleZBVZeroBubble``). torchtitan 0.3.0: ``torchtitan/config/configs.py``
(``TrainingConfig``, ``ParallelismConfig``, ``CompileConfig``, ``DebugConfig``),
``components/optimizer/lr_scheduler.py`` (``LRSchedulersContainer.Config``); its mesh order is
``pp, dp_replicate, dp_shard, cp, tp`` (``torchtitan/distributed/parallel_dims.py``); its layer
split is ``pipeline_llm`` / ``generate_llm_fqn_per_model_part`` of
``torchtitan/distributed/pipeline_parallel.py`` (see :func:`torchtitan_stage_split`).
"""

from __future__ import annotations

from typing import Any

from trainc.compiler.derive import Derived, moe_layer_pattern, stage_chunk_sizes
from trainc.compiler.ir import filled
from trainc.compiler.targets.torchao import converters
from trainc.compiler.targets.torchtitan_ac import activation_checkpoint, torchtitan_ac_args
from trainc.schemas import (
    Device,
    FsdpDtype,
    LrDecayStyle,
    MoeDispatcher,
    MoeScoreFunction,
    Optimizer,
    PipelineSchedule,
    TrainSpec,
)

#: torchtitan release the ``torchtitan_args.txt`` flags are checked against.
TORCHTITAN_VERSION = "0.3.0"
#: DeviceMesh dimension names, outermost first (torchtitan's order; tp innermost so that a TP
#: group is consecutive ranks on one node).
MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
#: fsdp dtype -> torch dtype name (``getattr(torch, name)``).
TORCH_DTYPES = {FsdpDtype.bf16: "bfloat16", FsdpDtype.fp32: "float32"}
#: pipeline schedule -> torch.distributed.pipelining class name.
SCHEDULE_CLASSES = {
    PipelineSchedule.one_f1b: "Schedule1F1B",
    PipelineSchedule.interleaved_1f1b: "ScheduleInterleaved1F1B",
    PipelineSchedule.zbv_zero_bubble: "ScheduleZBVZeroBubble",
}
#: lr_decay_style -> torchtitan ``lr_scheduler.decay_type`` (the styles missing here have no
#: torchtitan equivalent; constant is written as decay_ratio 0: warm-up, then stable).
TORCHTITAN_DECAY = {
    LrDecayStyle.linear: "linear",
    LrDecayStyle.cosine: "cosine",
    LrDecayStyle.constant: "linear",
}


def mesh(spec: TrainSpec, d: Derived) -> dict[str, Any]:
    """``{"device_type", "dim_names", "shape"}`` for ``init_device_mesh``: all five dimensions
    (size-1 ones included, so every rank's coordinates are explicit); the product is the world
    size (TRC340 guarantees it)."""
    f, p = spec.fsdp, spec.parallel
    shape = [p.pp, f.dp_replicate, filled(f.dp_shard, "fsdp.dp_shard"), p.cp, p.tp]
    assert d.world_size == p.pp * f.dp_replicate * shape[2] * p.cp * p.tp
    return {
        "device_type": "cpu" if spec.launch.device is Device.cpu else "cuda",
        "dim_names": list(MESH_DIMS),
        "shape": shape,
    }


def fully_shard(spec: TrainSpec) -> dict[str, Any]:
    """Arguments of each ``fully_shard`` call: the mesh dimensions parameters are sharded over
    (``["dp_replicate", "dp_shard"]`` = HSDP when dp_replicate > 1; cp is folded into the shard
    dimension as torchtitan's ``dp_shard_cp``), ``reshard_after_forward`` for every block
    (the root module is never resharded after forward: its parameters are needed at once by
    backward, as torchtitan does), and the policies."""
    f = spec.fsdp
    dims = (["dp_replicate"] if f.dp_replicate > 1 else []) + ["dp_shard"]
    if spec.parallel.cp > 1:
        dims.append("cp")
    return {
        "mesh_dims": dims,
        "reshard_after_forward": f.reshard_after_forward,
        "root_reshard_after_forward": False,
        "mp_policy": {
            "param_dtype": TORCH_DTYPES[filled(f.param_dtype, "fsdp.param_dtype")],
            "reduce_dtype": TORCH_DTYPES[f.reduce_dtype],
        },
        "offload_policy": {"cpu": f.cpu_offload, "pin_memory": spec.launch.device is Device.cuda},
    }


def optimizer(spec: TrainSpec) -> dict[str, Any]:
    """``torch.optim.AdamW`` (decoupled weight decay, as Megatron's ``adam``) or ``SGD``
    keyword arguments, by class name."""
    t = spec.training
    if t.optimizer is Optimizer.adam:
        return {
            "class": "AdamW",
            "lr": float(t.lr),
            "betas": [float(t.adam_beta1), float(t.adam_beta2)],
            "eps": float(t.adam_eps),
            "weight_decay": float(t.weight_decay),
        }
    return {
        "class": "SGD",
        "lr": float(t.lr),
        "momentum": float(t.sgd_momentum),
        "weight_decay": float(t.weight_decay),
    }


def lr_schedule(spec: TrainSpec) -> dict[str, Any]:
    """The learning-rate schedule in Megatron-Core's terms (OptimizerParamScheduler: linear
    warm-up from 0 over ``warmup_iters``, then ``style`` decay to ``min_lr`` by ``decay_iters``),
    which the worker evaluates per step."""
    t = spec.training
    return {
        "style": t.lr_decay_style.value,
        "lr": float(t.lr),
        "min_lr": float(t.min_lr),
        "warmup_iters": t.lr_warmup_iters,
        "decay_iters": filled(t.lr_decay_iters, "training.lr_decay_iters"),
    }


def torchtitan_stage_split(spec: TrainSpec, d: Derived) -> tuple[int, int, int] | None:
    """``(layers_per_stage, first_stage_less_layers, last_stage_less_layers)``: the torchtitan
    0.3.0 ``--parallelism.pipeline_parallel_*`` values with which torchtitan builds exactly the
    plan's layer split over the ``pp x vpp`` virtual stages (Megatron-Core's, as
    :func:`~trainc.compiler.derive.stage_chunk_sizes` gives it per virtual stage), or None when
    no such values exist: an uneven split (``parallel.pipeline_first/last_stage_layers``) with
    vpp > 1, or an end stage with more layers than the middle ones.

    torchtitan (``pipeline_llm``) makes ``ceil((L + first + last) / layers_per_stage)`` virtual
    stages and ``generate_llm_fqn_per_model_part`` gives each ``(L + first + last) / stages``
    layer slots, the first stage ``first`` of them to the embedding, the last ``last`` to the norm
    and output. Its defaults (``first = last = 1``, two stages per rank for a looped schedule
    whatever vpp is) differ from Megatron's even split, so all three are always written with
    pp > 1. ``account_for_embedding/loss_in_pipeline_split`` are ``first`` / ``last`` = 1; an
    uneven split is ``first = middle - first_stage_layers`` (and the same for the last stage).
    E.g. 32 layers on pp 4 x vpp 2: ``(4, 0, 0)``; 126 layers on pp 16 x vpp 8 with both
    account_for_* flags: ``(1, 1, 1)``; 30 layers on pp 4 split 6 / 9 / 9 / 6: ``(9, 3, 3)``.
    """
    p, m = spec.parallel, spec.model
    if p.pp == 1 or d.layers_per_stage is None:
        return None
    chunks = stage_chunk_sizes(
        list(d.layers_per_stage),
        p.vpp,
        p.account_for_embedding_in_pipeline_split,
        p.account_for_loss_in_pipeline_split,
    )
    if any(len(c) != p.vpp for c in chunks):
        return None
    virtual = [chunks[r][j] for j in range(p.vpp) for r in range(p.pp)]  # stage j*pp + r
    middle = set(virtual[1:-1]) or {max(virtual[0], virtual[-1])}
    if len(middle) != 1:
        return None
    per = middle.pop()
    first, last = per - virtual[0], per - virtual[-1]
    if first < 0 or last < 0:
        return None
    assert per * len(virtual) == m.num_layers + first + last
    return per, first, last


def torchtitan_args(spec: TrainSpec, d: Derived) -> list[list[str]]:
    """torchtitan 0.3.0 ``torchtitan.train`` overrides, ``[flag, value]`` or ``[flag]``
    (tyro: dotted ``--section.field``; a boolean is ``--section.field`` or, false, tyro's
    ``--section.no-field`` with hyphens, as torchtitan's ``--compile.no-enable``). Batch:
    ``local_batch_size`` is per data-parallel rank and accumulation step; with pp it is the
    pipeline's batch, split into ``pipeline_parallel_microbatch_size`` pieces, so the
    accumulation count (global / (local x dp)) is 1 there. The layer split (vpp, uneven or
    account_for_* splits) is :func:`torchtitan_stage_split`'s."""
    f, p, t = spec.fsdp, spec.parallel, spec.training
    mb = filled(d.num_microbatches, "num_microbatches")
    local = t.micro_batch_size * (mb if p.pp > 1 else 1)
    args: list[list[str]] = [
        ["--parallelism.data_parallel_replicate_degree", str(f.dp_replicate)],
        ["--parallelism.data_parallel_shard_degree", str(filled(f.dp_shard, "fsdp.dp_shard"))],
        [
            "--parallelism.fsdp_reshard_after_forward",
            "always" if f.reshard_after_forward else "never",
        ],
        ["--parallelism.tensor_parallel_degree", str(p.tp)],
        [
            "--parallelism.enable_sequence_parallel"
            if p.sequence_parallel
            else "--parallelism.no-enable-sequence-parallel"
        ],
        ["--parallelism.context_parallel_degree", str(p.cp)],
        ["--parallelism.pipeline_parallel_degree", str(p.pp)],
    ]
    args += expert_args(spec, d)
    if p.pp > 1:
        split = torchtitan_stage_split(spec, d)
        assert split is not None, "TRC344 refuses a layer split torchtitan cannot build"
        per, first, last = split
        args += [
            [
                "--parallelism.pipeline_parallel_schedule",
                filled(f.pp_schedule, "fsdp.pp_schedule").value,
            ],
            ["--parallelism.pipeline_parallel_microbatch_size", str(t.micro_batch_size)],
            ["--parallelism.pipeline_parallel_layers_per_stage", str(per)],
            ["--parallelism.pipeline_parallel_first_stage_less_layers", str(first)],
            ["--parallelism.pipeline_parallel_last_stage_less_layers", str(last)],
        ]
    args += [
        ["--training.local_batch_size", str(local)],
        ["--training.global_batch_size", str(t.global_batch_size)],
        ["--training.seq_len", str(spec.model.seq_length)],
        ["--training.steps", str(t.train_iters)],
        ["--training.max_norm", repr(float(t.grad_clip))],
        [
            "--training.mixed_precision_param",
            TORCH_DTYPES[filled(f.param_dtype, "fsdp.param_dtype")],
        ],
        ["--training.mixed_precision_reduce", TORCH_DTYPES[f.reduce_dtype]],
        ["--training.enable_cpu_offload" if f.cpu_offload else "--training.no-enable-cpu-offload"],
        ["--compile.enable" if f.compile else "--compile.no-enable"],
        ["--lr_scheduler.warmup_steps", str(t.lr_warmup_iters)],
        ["--lr_scheduler.total_steps", str(filled(t.lr_decay_iters, "training.lr_decay_iters"))],
        ["--lr_scheduler.decay_type", TORCHTITAN_DECAY[t.lr_decay_style]],
        ["--lr_scheduler.min_lr_factor", repr(float(t.min_lr) / float(t.lr) if t.lr else 0.0)],
    ]
    if t.lr_decay_style is LrDecayStyle.constant:
        args.append(["--lr_scheduler.decay_ratio", "0.0"])
    args += [
        ["--checkpoint.enable"],
        ["--checkpoint.interval", str(spec.launch.save_interval)],
        ["--debug.seed", str(t.seed)],
    ]
    return args + torchtitan_ac_args(spec)  # a tyro subcommand: last (torchtitan_ac_args)


def torchtitan_registry(spec: TrainSpec) -> dict[str, Any]:
    """What the torchtitan 0.3.0 ``config_registry`` function must set because no command-line
    flag reaches it: the optimizer, one catch-all ``ParamGroupConfig(pattern=".*",
    optimizer_name, optimizer_kwargs)`` of ``OptimizersContainer.Config.param_groups``
    (``torchtitan/components/optimizer/optimizer.py``; its ``default_adamw`` would otherwise
    give betas (0.9, 0.95), eps 1e-8, weight_decay 0.1). torchtitan 0.3.0 builds Adam, AdamW and
    DistMuon only, so SGD needs a custom factory there (TRC344 with launch.entrypoint
    torchtitan)."""
    o = optimizer(spec)
    kwargs = {k: v for k, v in o.items() if k != "class"}
    return {"pattern": ".*", "optimizer_name": o["class"], "optimizer_kwargs": kwargs}


def pipeline(spec: TrainSpec, d: Derived) -> dict[str, Any]:
    """``engines.fsdp.pipeline``: degree, stages per rank (vpp), the schedule class and, with
    pp > 1, the layer split as torchtitan takes it (:func:`torchtitan_stage_split`; None with
    pp 1): layers per virtual stage and the layer slots the embedding and the output take."""
    p, f = spec.parallel, spec.fsdp
    split = torchtitan_stage_split(spec, d) if p.pp > 1 else None
    return {
        "degree": p.pp,
        "stages_per_rank": p.vpp,
        "schedule": SCHEDULE_CLASSES[filled(f.pp_schedule, "fsdp.pp_schedule")]
        if p.pp > 1
        else None,
        "layers_per_stage": split[0] if split else None,
        "first_stage_less_layers": split[1] if split else None,
        "last_stage_less_layers": split[2] if split else None,
    }


def fsdp_config(spec: TrainSpec, d: Derived) -> dict[str, Any]:
    """``engines.fsdp``: everything the FSDP2 worker builds and ``torchtitan_args.txt`` shows.

    Raises AssertionError for a spec the validators reject (mesh product, batch)."""
    f, p, t = spec.fsdp, spec.parallel, spec.training
    mb = filled(d.num_microbatches, "num_microbatches")
    assert t.micro_batch_size * mb * filled(d.dp, "dp") == t.global_batch_size
    return {
        "mesh": mesh(spec, d),
        "fully_shard": fully_shard(spec),
        "tensor_parallel": {"degree": p.tp, "sequence_parallel": bool(p.sequence_parallel)},
        "pipeline": pipeline(spec, d),
        "context_parallel": {"degree": p.cp},
        "activation_checkpoint": activation_checkpoint(spec),
        "compile": f.compile,
        "float8": {"converters": converters(spec)},
        "batch": {
            "micro_batch_size": t.micro_batch_size,
            "gradient_accumulation_steps": mb,
            "global_batch_size": t.global_batch_size,
        },
        "optimizer": optimizer(spec),
        "lr_schedule": lr_schedule(spec),
        "grad_clip": float(t.grad_clip),
        "torchtitan": {
            "version": TORCHTITAN_VERSION,
            "args": torchtitan_args(spec, d),
            "registry": {
                "optimizer": {"param_groups": [torchtitan_registry(spec)]},
                **({"model": {"converters": converters(spec)}} if converters(spec) else {}),
                **({"moe": torchtitan_moe(spec)} if spec.model.num_experts else {}),
            },
        },
        **({"expert_parallel": expert_parallel(spec, d)} if spec.model.num_experts else {}),
    }


#: model.moe_token_dispatcher_type (and moe_flex_dispatcher_backend) -> torchtitan 0.3.0
#: ``comm_backend`` of ``make_token_dispatcher_config`` (``models/common/config_utils.py``:
#: standard = PyTorch all-to-all, deepep / hybridep = those kernels); allgather has none (TRC344).
TORCHTITAN_COMM_BACKEND = {MoeDispatcher.alltoall: "standard"}
#: torchtitan 0.3.0's expert-bias update rate when the spec turns the expert bias on
#: (``MoE.Config.load_balance_coeff`` default; Megatron-Core's ``moe_router_bias_update_rate``
#: default is the same 1e-3).
LOAD_BALANCE_COEFF = 1e-3


def expert_parallel(spec: TrainSpec, d: Derived) -> dict[str, Any]:
    """``engines.fsdp.expert_parallel`` of an MoE model: torchtitan 0.3.0's sparse mesh
    ``(pp, dp_replicate, efsdp, ep)`` over the same ranks as the dense one, with ``efsdp =
    dp_shard * cp * tp / ep`` (``ParallelDims.build_mesh``, ``torchtitan/distributed/
    parallel_dims.py``; TRC348 guarantees the division), the routed experts' FSDP mesh
    (``["dp_replicate", "efsdp"]`` with HSDP, else ``["efsdp"]``: ``parallelize_qwen3``'s
    ``edp_mesh``) and their shard placement (``apply_fsdp_to_decoder``, ``torchtitan/
    distributed/fsdp.py``: ``Shard(1)`` when ``efsdp x ep`` exceeds the experts, else
    ``Shard(0)``), the expert tensor-parallel degree (:func:`~trainc.compiler.derive.default_etp`)
    and the experts each EP rank holds.

    >>> from types import SimpleNamespace as N
    >>> s = N(model=N(num_experts=128), parallel=N(ep=8, pp=1, cp=1, tp=1),
    ...       fsdp=N(dp_shard=8, dp_replicate=1))
    >>> expert_parallel(s, N(etp=1))["efsdp"], expert_parallel(s, N(etp=1))["local_experts"]
    (1, 16)
    """
    m, p, f = spec.model, spec.parallel, spec.fsdp
    e = filled(m.num_experts, "model.num_experts")
    dense = filled(f.dp_shard, "fsdp.dp_shard") * p.cp * p.tp
    assert dense % p.ep == 0, "TRC348 refuses an ep that does not divide dp_shard x cp x tp"
    efsdp = dense // p.ep
    return {
        "degree": p.ep,
        "efsdp": efsdp,
        "etp": d.etp,
        "sparse_mesh": {
            "dim_names": ["pp", "dp_replicate", "efsdp", "ep"],
            "shape": [p.pp, f.dp_replicate, efsdp, p.ep],
        },
        "expert_mesh_dims": (["dp_replicate"] if f.dp_replicate > 1 else [])
        + (["efsdp"] if p.ep > 1 else ["dp_shard"] + (["cp"] if p.cp > 1 else [])),
        "expert_shard_placement": "Shard(1)" if efsdp * p.ep > e else "Shard(0)",
        "local_experts": e // p.ep,
    }


def torchtitan_moe(spec: TrainSpec) -> dict[str, Any]:
    """What the torchtitan 0.3.0 registry function's MoE layers must be (no flag reaches them):
    ``make_moe_config`` / ``make_router_config`` / ``make_routed_experts_config`` arguments of
    ``torchtitan/models/common/config_utils.py``, from the spec's Megatron-Core router:

    * ``score_func`` the same; ``route_norm`` (renormalise the top-k weights): a softmax over the
      chosen logits (``moe_router_pre_softmax`` false) is the full softmax renormalised over the
      top k, a pre-softmax is not, and Megatron-Core renormalises sigmoid scores when top-k > 1
      (megatron-core 0.16.1 ``moe_utils.topk_routing_with_score_function``); ``route_scale``
      ``moe_router_topk_scaling_factor`` (1.0 when unset);
    * ``load_balance_coeff`` :data:`LOAD_BALANCE_COEFF` with the expert bias, else None (no
      balancing: torchtitan has no auxiliary loss, TRC344 refuses one);
    * ``hidden_dim`` of the grouped experts ``moe_ffn_hidden_size``, the shared experts'
      ``moe_shared_expert_intermediate_size`` (None: no shared expert), ``comm_backend``
      (:data:`TORCHTITAN_COMM_BACKEND`; flex: its backend) and the MoE layers (0-based)."""
    m = spec.model
    sigmoid = m.moe_router_score_function is MoeScoreFunction.sigmoid
    norm = m.moe_router_topk > 1 if sigmoid else not m.moe_router_pre_softmax
    backend = (
        m.moe_flex_dispatcher_backend.value
        if m.moe_token_dispatcher_type is MoeDispatcher.flex
        else TORCHTITAN_COMM_BACKEND[m.moe_token_dispatcher_type]
    )
    pattern = moe_layer_pattern(spec)
    return {
        "num_experts": filled(m.num_experts, "model.num_experts"),
        "top_k": m.moe_router_topk,
        "score_func": m.moe_router_score_function.value,
        "route_norm": bool(norm),
        "route_scale": float(m.moe_router_topk_scaling_factor or 1.0),
        "load_balance_coeff": LOAD_BALANCE_COEFF if m.moe_router_enable_expert_bias else None,
        "hidden_dim": filled(m.moe_ffn_hidden_size, "model.moe_ffn_hidden_size"),
        "shared_experts_hidden_dim": m.moe_shared_expert_intermediate_size,
        "comm_backend": backend,
        "moe_layers": [i for i, x in enumerate(pattern) if x],
    }


def expert_args(spec: TrainSpec, d: Derived) -> list[list[str]]:
    """The torchtitan 0.3.0 expert-parallel flag of an MoE model
    (``ParallelismConfig.expert_parallel_degree``; nothing for a dense model, where it has no
    effect). 0.3.0 has no ``expert_tensor_parallel_degree``: the experts' tensor parallelism
    is implied (:func:`expert_parallel` ``etp``)."""
    if not spec.model.num_experts:
        return []
    return [["--parallelism.expert_parallel_degree", str(spec.parallel.ep)]]
