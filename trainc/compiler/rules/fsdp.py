"""TRC34x, engine=fsdp: the FSDP2 DeviceMesh, its precision, schedule and unsupported settings."""

from trainc.compiler.rules.catalog import Family, Rule, Severity
from trainc.schemas.enums import Engine

FSDP_MESH = Rule(
    id="TRC340",
    name="fsdp-mesh-matches-world",
    summary=(
        "engine=fsdp: dp_replicate x dp_shard must equal dp, so that the DeviceMesh (pp, "
        "dp_replicate, dp_shard, cp, tp) covers the world (init_device_mesh refuses another "
        "product)"
    ),
    engines={Engine.deepspeed: Severity.na, Engine.megatron: Severity.na},
    source=(
        "torch 2.13 torch/distributed/device_mesh.py init_device_mesh (mesh size must equal the "
        "world); torchtitan 0.3.0 distributed/parallel_dims.py ParallelDims._validate"
    ),
)

FSDP_HSDP_NODE = Rule(
    id="TRC341",
    name="fsdp-hsdp-shard-group-in-node",
    summary=(
        "engine=fsdp with HSDP: the shard group (dp_shard x cp x tp consecutive ranks) should fit "
        "in one node, so that the per-layer all-gathers and reduce-scatters stay on NVLink"
    ),
    severity=Severity.warning,
    engines={Engine.deepspeed: Severity.na, Engine.megatron: Severity.na},
    source=(
        "torch 2.13 fully_shard on a 2-D mesh (HSDP: all-gather / reduce-scatter over the shard "
        "dim per layer, all-reduce over the replicate dim); arXiv:2304.11277 §3.2"
    ),
)

FSDP_PRECISION = Rule(
    id="TRC342",
    name="fsdp-precision",
    summary=(
        "engine=fsdp trains in bf16 or fp32 (MixedPrecisionPolicy); fp16 needs a sharded gradient "
        "scaler that neither the trainc worker nor torchtitan sets up"
    ),
    engines={Engine.deepspeed: Severity.na, Engine.megatron: Severity.na},
    source=(
        "torch 2.13 torch/distributed/fsdp/_fully_shard/_fsdp_api.py MixedPrecisionPolicy; "
        "torchtitan 0.3.0 config/configs.py TrainingConfig.mixed_precision_param"
    ),
)

FSDP_SCHEDULE = Rule(
    id="TRC343",
    name="fsdp-pipeline-schedule",
    summary=(
        "engine=fsdp with pp > 1: the pipelining schedule must match the stages per rank (1F1B: "
        "vpp 1, Interleaved1F1B: vpp > 1, ZBVZeroBubble: vpp 2)"
    ),
    engines={Engine.deepspeed: Severity.na, Engine.megatron: Severity.na},
    source=(
        "torch 2.13 torch/distributed/pipelining/schedules.py (PipelineScheduleSingle vs "
        "PipelineScheduleMulti; ScheduleZBVZeroBubble needs 2 stages per rank)"
    ),
)

FSDP_TP_REDUCE_BF16 = Rule(
    id="TRC346",
    name="fsdp-tp-reduce-bf16",
    summary=(
        "engine=fsdp with tp > 1 and bf16 parameters: fsdp.reduce_dtype fp32 covers FSDP2's own "
        "reduce-scatter / all-reduce only; the tensor-parallel gradient reductions sum in bf16"
    ),
    severity=Severity.warning,
    engines={Engine.deepspeed: Severity.na, Engine.megatron: Severity.na},
    source=(
        "github.com/pytorch/pytorch/issues/190626 (FSDP2 MixedPrecisionPolicy.reduce_dtype does "
        "not reach DTensor TP Partial -> Replicate reductions); torch 2.13 "
        "torch/distributed/fsdp/_fully_shard/_fsdp_api.py MixedPrecisionPolicy"
    ),
)

FSDP_UNSUPPORTED = Rule(
    id="TRC344",
    name="fsdp-unsupported-setting",
    summary=(
        "engine=fsdp does not read a setting of another engine or one its runner cannot honour "
        "(ZeRO stage and DeepSpeed offload keys: FSDP2 shards by fsdp.* keys; experts on the "
        "trainc worker, an etp or MoE losses torchtitan has not; compile on CPU; Megatron-Core's "
        "cp_comm_type and recompute_method / recompute_num_layers; a pipeline layer split "
        "torchtitan cannot build)"
    ),
    engines={Engine.deepspeed: Severity.na, Engine.megatron: Severity.na},
    source="trainc: what engine=fsdp reads (docs/engines.md)",
)

FSDP_EXPERT_MESH = Rule(
    id="TRC348",
    name="fsdp-expert-mesh",
    summary=(
        "engine=fsdp with experts: ep must divide dp_shard x cp x tp, the ranks torchtitan's "
        "expert parallelism borrows (its sparse mesh is pp, dp_replicate, efsdp, ep with efsdp = "
        "dp_shard x cp x tp / ep)"
    ),
    engines={Engine.deepspeed: Severity.na, Engine.megatron: Severity.na},
    source=(
        "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py ParallelDims.build_mesh (efsdp = "
        "dp_shard * cp * tp // ep; _validate_meshes) and config/configs.py "
        "ParallelismConfig.expert_parallel_degree"
    ),
)

#: the family: its id ranges and, explicitly, its rules
FSDP = Family(
    name="fsdp",
    ids=(range(340, 350),),
    about="engine=fsdp's mesh, precision, schedule and unsupported settings",
    rules=(
        FSDP_MESH,
        FSDP_HSDP_NODE,
        FSDP_PRECISION,
        FSDP_SCHEDULE,
        FSDP_TP_REDUCE_BF16,
        FSDP_UNSUPPORTED,
        FSDP_EXPERT_MESH,
    ),
)
