"""The rule catalog: one stable id per rule (never reused), a kebab-case name, a summary and the
default severity. ``docs/rules.md`` is generated from this table (``python -m trainc.docs``).

Families: TRC0xx loading, TRC1xx topology, TRC2xx divisibility, TRC3xx feature compatibility,
TRC4xx resource fit, TRC5xx launcher / cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The severities a rule may take for an engine; ``n/a`` means the rule does not apply to it
#: (its findings are dropped for a spec of that engine).
SEVERITIES = ("error", "warning", "info", "n/a")


@dataclass(frozen=True, slots=True)
class Rule:
    """A rule of the catalog. ``severity`` is ``error``, ``warning`` or ``info``: the default for
    every engine. ``engines`` overrides it per engine (``Engine`` value -> a :data:`SEVERITIES`
    entry), e.g. a check Megatron-Core enforces at init but DeepSpeed only warns about; the
    validate and fit passes apply it (:func:`trainc.compiler.diagnostics.for_engine`)."""

    id: str
    name: str
    summary: str
    severity: str = "error"
    engines: tuple[tuple[str, str], ...] = ()

    def severity_for(self, engine: str) -> str:
        """The severity of this rule's findings for ``engine`` (an ``Engine`` value): the
        override in :attr:`engines`, else :attr:`severity`; ``"n/a"`` when it does not apply."""
        return dict(self.engines).get(engine, self.severity)


def _r(
    id: str, name: str, summary: str, severity: str = "error", engines: dict[str, str] | None = None
) -> Rule:
    return Rule(id, name, summary, severity, tuple(sorted((engines or {}).items())))


# --- TRC0xx: loading -----------------------------------------------------------------------
SPEC_UNREADABLE = _r("TRC000", "spec-unreadable", "the spec file cannot be read or parsed as YAML")
TYPE_MISMATCH = _r("TRC001", "type-mismatch", "a value has the wrong type for its key")
UNKNOWN_KEY = _r("TRC002", "unknown-key", "a key is not part of the spec schema")
MISSING_VALUE = _r("TRC003", "missing-value", "a required key has no value")
UNKNOWN_CHOICE = _r("TRC004", "unknown-choice", "a preset or option name is not one of the choices")
BAD_OVERRIDE = _r("TRC005", "bad-override", "a KEY=VALUE override cannot be parsed or applied")
VALUE_RANGE = _r("TRC006", "value-out-of-range", "a value is outside its allowed range")
UNQUOTED_STRING = _r(
    "TRC007",
    "string-read-as-other-type",
    "a string key's unquoted value was read by YAML 1.1 (or the override grammar) as a number, "
    "base-60 time, boolean or null (time_limit: 4:00:00 is 14400, account: 0123 is 83); quote it",
)
NON_FINITE = _r("TRC008", "non-finite-number", "NaN and infinities are refused in every number key")
CHECKS_SKIPPED = _r(
    "TRC009",
    "checks-skipped",
    "the checks that read an invalid key were skipped (their findings would be computed from a "
    "stand-in value); every other check ran",
    "info",
)

# --- TRC1xx: topology -----------------------------------------------------------------------
WORLD_FACTORIZATION = _r(
    "TRC101",
    "world-divisible-by-model-parallel",
    "world size must be a multiple of tp*pp*cp (Megatron initialize_model_parallel)",
)
DP_MISMATCH = _r("TRC102", "dp-matches-world", "a given dp must equal world / (tp*pp*cp)")
EP_COUNTED_IN_WORLD = _r(
    "TRC103",
    "ep-not-a-world-factor",
    "EP does not multiply the world size in Megatron-Core; dp counts data-parallel replicas of the "
    "dense grid",
)
EXPERT_GRID = _r(
    "TRC104",
    "expert-grid-divisible",
    "world size must be a multiple of etp*ep*pp (Megatron expert rank generator)",
    engines={"fsdp": "n/a"},
)
TP_NVLINK = _r(
    "TRC105",
    "tp-within-nvlink-domain",
    "tensor parallelism wider than the NVLink domain, or cut by a domain boundary (tp does not "
    "divide the domain, nor the Slurm segment), runs its all-reduces over the slow fabric",
    "warning",
)
TP_CP_NVLINK = _r(
    "TRC106",
    "tp-cp-within-nvlink-domain",
    "the tp*cp block wider than the NVLink domain, or cut by a domain boundary, runs "
    "context-parallel traffic over the fabric",
    "warning",
)
EP_NVLINK = _r(
    "TRC107",
    "ep-within-nvlink-domain",
    "the etp*ep block wider than the NVLink domain, or cut by a domain boundary (etp*ep does "
    "not divide the domain, nor the Slurm segment), runs MoE all-to-all over the fabric",
    "warning",
)
WORLD_EXCEEDS_CLUSTER = _r(
    "TRC108", "world-fits-cluster", "tp*pp*cp*dp must not exceed the cluster's GPUs"
)
CLOCK_CAP = _r(
    "TRC109",
    "clock-cap-fraction",
    "cluster.clock_cap is the sustained clock as a fraction of the profile's: 0 < x <= 1",
)

# --- TRC2xx: divisibility -------------------------------------------------------------------
HEADS_TP = _r("TRC201", "heads-divisible-by-tp", "num_attention_heads must be a multiple of tp")
GROUPS_TP = _r(
    "TRC202",
    "query-groups-vs-tp",
    "num_query_groups must be a multiple or a divisor of tp (Megatron-Core >= 0.16)",
)
FFN_TP = _r("TRC203", "ffn-divisible-by-tp", "ffn_hidden_size must be a multiple of tp")
MOE_FFN_ETP = _r(
    "TRC204", "moe-ffn-divisible-by-etp", "moe_ffn_hidden_size must be a multiple of etp"
)
EXPERTS_EP = _r("TRC205", "experts-divisible-by-ep", "num_experts must be a multiple of ep")
TOPK_EXPERTS = _r("TRC206", "topk-within-experts", "moe_router_topk must be in [1, num_experts]")
HEADS_GROUPS = _r(
    "TRC207",
    "heads-divisible-by-query-groups",
    "num_attention_heads must be a multiple of num_query_groups",
)
HIDDEN_HEADS = _r(
    "TRC208",
    "hidden-divisible-by-heads",
    "hidden_size must be a multiple of num_attention_heads unless kv_channels is given",
)
VOCAB_PADDING = _r(
    "TRC209",
    "vocab-padding",
    "vocab_size is padded to a multiple of make_vocab_size_divisible_by*tp",
    "info",
)
LAYERS_PP = _r("TRC210", "layers-divisible-by-pp", "num_layers must be a multiple of pp")
LAYERS_VPP = _r(
    "TRC211",
    "layers-divisible-by-pp-vpp",
    "num_layers must be a multiple of pp*vpp for the interleaved schedule",
)
UNEVEN_PP = _r(
    "TRC212",
    "uneven-pp-layout",
    "first/last stage layers must be given with pp > 1 and leave a middle that divides evenly",
)
VPP_NEEDS_PP = _r("TRC213", "vpp-needs-pp", "vpp > 1 needs pp > 1")
GLOBAL_BATCH = _r(
    "TRC214",
    "global-batch-divisible",
    "global_batch_size must be a multiple of micro_batch_size*dp",
)
MICROBATCHES_PP = _r(
    "TRC215",
    "microbatches-at-least-pp",
    "num_microbatches below pp leaves pipeline stages idle (an error with interleaving, and "
    "with engine=fsdp's single-stage 1F1B schedule, which torch.distributed.pipelining "
    "rejects)",
    "warning",
)
MICROBATCHES_VPP = _r(
    "TRC216",
    "microbatches-multiple-of-pp",
    "the interleaved schedule needs num_microbatches to be a multiple of pp",
)
CP_SEQ = _r("TRC217", "seq-divisible-by-2cp", "seq_length must be a multiple of 2*cp when cp > 1")
SP_SEQ = _r(
    "TRC218",
    "sp-seq-divisible-by-tp",
    "with sequence parallelism seq_length/cp must be a multiple of tp",
)
MAX_POSITIONS = _r(
    "TRC219", "max-positions-cover-seq", "max_position_embeddings must be >= seq_length"
)
CP_A2A_HEADS = _r(
    "TRC220",
    "cp-a2a-heads-divisible",
    "cp_comm_type a2a needs the heads and query groups per TP rank to be multiples of cp",
)
KV_REPLICATED = _r(
    "TRC221",
    "kv-heads-replicated",
    "tp above num_query_groups replicates KV heads (Megatron-Core >= 0.16 only; wasteful); an "
    "error where launch.versions.megatron_core is older than 0.16.0, whose TransformerConfig "
    "raises",
    "warning",
)
RECOMPUTE_UNIFORM_CHUNKS = _r(
    "TRC260",
    "recompute-uniform-divides-chunk",
    "with recompute_method uniform, recompute_num_layers must divide the layers of every "
    "pipeline stage chunk on Megatron-Core before 0.17.0 (the last checkpointed chunk runs past "
    "the stage's layers: IndexError)",
    engines={"deepspeed": "n/a", "fsdp": "n/a"},
)

# --- TRC3xx: feature compatibility ---------------------------------------------------------
#: Megatron-Core MoE build checks: engine=fsdp's experts are torchtitan's (TRC344 / TRC348)
_NO_MOE_FSDP = {"fsdp": "n/a"}
SP_NEEDS_TP = _r("TRC301", "sp-needs-tp", "sequence_parallel needs tp > 1")
# Megatron-Core 0.16.1 MoELayer.forward raises ValueError in training when the attention tp
# group is larger than 1 and sequence_parallel is off (ModelParallelConfig.__post_init__ only
# warns, for ep > 1 and tp > 1). trainc's DeepSpeed runner builds the same Megatron-Core MoELayer
# (trainc/launch/worker/engines/deepspeed.py), so it is an error on both engines.
MOE_TP_SP = _r(
    "TRC302",
    "moe-tp-needs-sp",
    "MoE with tp > 1 needs sequence_parallel (Megatron-Core raises in training)",
    "error",
    engines=_NO_MOE_FSDP,
)
VPP_PP2_P2P = _r(
    "TRC303",
    "vpp-pp2-unbatched-p2p",
    "pp=2 with interleaving is emitted with overlapped (unbatched) p2p; batched p2p silently "
    "corrupts training on that layout",
    "info",
    engines={"fsdp": "n/a"},
)
DS_ZERO_PP = _r(
    "TRC304",
    "deepspeed-zero-pp",
    "DeepSpeed ZeRO-2/3 is incompatible with pipeline parallelism",
    engines={"megatron": "n/a", "deepspeed": "error", "fsdp": "n/a"},
)
OFFLOAD_PARAM_STAGE = _r(
    "TRC305",
    "offload-param-needs-zero3",
    "offload_param needs DeepSpeed ZeRO stage 3",
    engines={"megatron": "n/a", "deepspeed": "error", "fsdp": "n/a"},
)
OFFLOAD_ENGINE = _r(
    "TRC306",
    "offload-needs-deepspeed",
    "optimizer/parameter offload needs engine=deepspeed",
    engines={"megatron": "error", "deepspeed": "n/a", "fsdp": "n/a"},
)
MEGATRON_ZERO = _r(
    "TRC307",
    "megatron-zero-stage",
    "engine=megatron supports zero_stage 0 (DDP), 1 (distributed optimizer) and 3 "
    "(Megatron-FSDP, optim_grads_params)",
    engines={"megatron": "error", "deepspeed": "n/a", "fsdp": "n/a"},
)
RECOMPUTE_ARGS = _r(
    "TRC308",
    "recompute-method-args",
    "recompute_method/recompute_num_layers belong to recompute=full only",
)
RECOMPUTE_LAYERS = _r(
    "TRC309",
    "recompute-num-layers-range",
    "recompute_num_layers must be in [1, layers per pipeline stage chunk]",
)
EP_NEEDS_MOE = _r("TRC312", "ep-needs-experts", "ep > 1 or etp != tp needs num_experts")
DS_UNSUPPORTED_AXIS = _r(
    "TRC313",
    "runner-axes",
    "the runner of the spec (engine x launch.entrypoint) must split every axis above 1 "
    "(trainc/capabilities.py: the trainc worker on DeepSpeed or FSDP2 splits tp and dp only)",
)
MOE_LAYER_FREQ = _r("TRC315", "moe-layer-freq-range", "moe_layer_freq must be in [1, num_layers]")
MLA_SETTINGS = _r(
    "TRC316",
    "mla-settings",
    "multi-head latent attention has no grouped-query attention (every head keeps its own key "
    "and value), rotates qk_pos_emb_head_dim channels with RoPE (an even count, rope positions) "
    "and is built by Megatron-Core (engine=megatron or deepspeed)",
    engines={"megatron": "error", "deepspeed": "error", "fsdp": "n/a"},
)
LR_RANGE = _r("TRC318", "min-lr-le-lr", "min_lr must not exceed lr")
FP16_CPU = _r(
    "TRC319", "precision-on-device", "fp16 does not run on the CPU device (use bf16 or fp32)"
)
OFFLOAD_OPTIMIZER_STAGE = _r(
    "TRC320",
    "offload-optimizer-needs-zero",
    "offload_optimizer needs DeepSpeed ZeRO stage 1-3",
    engines={"megatron": "n/a", "deepspeed": "error", "fsdp": "n/a"},
)
NVME_PATH = _r(
    "TRC321",
    "nvme-path-required",
    "nvme offload needs training.nvme_path",
    engines={"megatron": "n/a", "deepspeed": "error", "fsdp": "n/a"},
)
DS_PIPE_GRAD_ACCUM = _r(
    "TRC322",
    "deepspeed-pipe-grad-accum-scale",
    "DeepSpeed's pipeline engine sums micro-batch gradients: the micro/accumulation split at a "
    "fixed global batch changes the gradient scale",
    "warning",
    engines={"megatron": "n/a", "fsdp": "n/a"},
)
DS_LR_SHIFTED = _r(
    "TRC317",
    "deepspeed-lr-schedule-shifted",
    "DeepSpeed's scheduler runs the spec's warm-up or cosine schedule shifted against "
    "Megatron-Core's (the first step at lr 0; a cosine after a warm-up never reaches the peak)",
    "warning",
    engines={"megatron": "n/a", "fsdp": "n/a"},
)
LR_SCHEDULE_ENGINE = _r(
    "TRC323",
    "lr-schedule-supported",
    "the learning-rate schedule must be one the engine honours exactly (DeepSpeed: constant, "
    "cosine, linear without both a warm-up and a min_lr), and its steps must be consistent",
)
DDP_OVERLAP = _r(
    "TRC324",
    "ddp-overlap-args",
    "overlap_param_gather needs the distributed optimizer and overlap_grad_reduce; both are "
    "Megatron-Core DDP settings (engine=megatron)",
)
ENTRYPOINT_RUNS = _r(
    "TRC325",
    "entrypoint-runs-spec",
    "launch.entrypoint megatron-lm runs engine=megatron, torchtitan runs engine=fsdp, both on "
    "CUDA only",
)
MOE_CAPACITY_BALANCING = _r(
    "TRC326",
    "moe-capacity-needs-aux-balancing",
    "moe_expert_capacity_factor works only with aux_loss, seq_aux_loss, global_aux_loss or none "
    "load balancing",
    engines=_NO_MOE_FSDP,
)
MOE_CAPACITY_DISPATCHER = _r(
    "TRC390",
    "moe-capacity-needs-alltoall",
    "moe_expert_capacity_factor needs the alltoall token dispatcher on Megatron-Core before "
    "0.12.0 (TransformerConfig raises for allgather)",
    engines=_NO_MOE_FSDP,
)
SHARED_EXPERT_TP = _r(
    "TRC327",
    "shared-expert-divisible-by-tp",
    "moe_shared_expert_intermediate_size must be a multiple of tp (the shared expert MLP is "
    "split over the tensor-parallel group)",
    engines=_NO_MOE_FSDP,
)

# --- TRC4xx: resource fit -------------------------------------------------------------------
MEMORY_FIT = _r(
    "TRC401",
    "memory-fits-gpu",
    "estimated memory per GPU must not exceed gpu_memory_gib minus memory_reserve_gib by more "
    "than the memory model's error margin (a sure out-of-memory)",
)
BUBBLE_HIGH = _r(
    "TRC402", "pipeline-bubble-high", "the pipeline bubble exceeds 25 % of the step", "warning"
)
MEMORY_TIGHT = _r(
    "TRC403",
    "memory-tight",
    "estimated memory per GPU is within the memory model's error margin of the budget: it may "
    "or may not fit",
    "warning",
)
STEP_TIME_LIMIT = _r(
    "TRC404",
    "step-vs-time-limit",
    "one step must finish well inside launch.time_limit: before the limit at all, and within "
    "the lead at which Slurm signals the checkpoint (SIGUSR1)",
    "warning",
)
HOST_MEMORY_FIT = _r(
    "TRC420",
    "host-memory-fits-offload",
    "the optimizer / parameter states offloaded to the CPU by the GPUs of one node must fit "
    "host_memory_gib (a sure host out-of-memory otherwise)",
    "error",
    engines={"megatron": "n/a", "fsdp": "n/a"},
)
HOST_MEMORY_TIGHT = _r(
    "TRC421",
    "host-memory-tight",
    "the offloaded states fit host_memory_gib, but not with DeepSpeed's 1.5x buffer factor for "
    "pinned buffers and the CPU optimizer: the host may run out of memory",
    "warning",
    engines={"megatron": "n/a", "fsdp": "n/a"},
)

# --- TRC5xx: launcher / cluster -------------------------------------------------------------
JOB_NAME = _r(
    "TRC501", "job-name-safe", "name must be letters, digits, '.', '_' or '-', and not only dots"
)
TIME_LIMIT = _r("TRC502", "time-limit-format", "time_limit must be a Slurm time ([D-]HH:MM:SS)")
MEGATRON_LM_PATH = _r(
    "TRC503", "megatron-lm-path", "entrypoint megatron-lm needs launch.megatron_lm_path"
)
ENV_NAME = _r("TRC504", "env-name-valid", "launch.env keys must be valid shell variable names")
ENV_MAX_CONNECTIONS = _r(
    "TRC505",
    "cuda-device-max-connections",
    "tp > 1 or cp > 1 needs CUDA_DEVICE_MAX_CONNECTIONS=1 (Megatron validate_args); a value of "
    "1 with engine=fsdp, or with tp = cp = 1 on Megatron, serializes the data-parallel "
    "communication with compute (a warning)",
    engines={"fsdp": "warning"},
)
CPU_FULL_SIZE = _r(
    "TRC506",
    "cpu-needs-shrink",
    "device=cpu with a full-size model will not fit in host memory; use launch.shrink",
    "warning",
)
VISIBLE_DEVICES = _r(
    "TRC507",
    "visible-devices-match-gpus-per-node",
    "launch.env CUDA_VISIBLE_DEVICES must list exactly gpus_per_node devices (one rank per GPU)",
)
SOCKET_IFNAME = _r(
    "TRC508",
    "socket-ifname-multinode",
    "NCCL/GLOO socket interface must not be loopback or a container bridge on a multi-node job",
)
LAUNCHER_ENV = _r(
    "TRC509",
    "launcher-owned-env",
    "launch.env must not set the rendezvous variables (MASTER_ADDR, MASTER_PORT, RANK, ...) that "
    "the generated scripts derive from the allocation",
)

SECRET_IN_SPEC = _r(
    "TRC510",
    "secret-in-spec",
    "a launch.env value whose name looks like a credential (token, secret, password, api key, ...) "
    "is not written to the artifacts; the scripts read it from the submitting environment",
    "warning",
)

LAUNCH_VALUE = _r(
    "TRC511",
    "launch-value-printable",
    "paths, Slurm names and container settings must not contain control characters "
    "(a newline would end an #SBATCH line); env values must not contain NUL",
)
MOE_TOP1_PRE_SOFTMAX = _r(
    "TRC328",
    "moe-top1-needs-pre-softmax",
    "a top-1 softmax router needs moe_router_pre_softmax (a softmax over one score is constant)",
    engines=_NO_MOE_FSDP,
)
SETTING_WITHOUT_EFFECT = _r(
    "TRC329",
    "setting-without-effect",
    "a key set to a non-default value that the rest of the spec makes inert (Adam betas with "
    "sgd, WSD keys with another schedule, RoPE keys with learned positions, router keys on a "
    "dense model, a data split without data)",
    "warning",
)
#: the engine=fsdp rules do not apply to the other engines
_FSDP_ONLY = {"megatron": "n/a", "deepspeed": "n/a"}
FSDP_MESH = _r(
    "TRC340",
    "fsdp-mesh-matches-world",
    "engine=fsdp: dp_replicate x dp_shard must equal dp, so that the DeviceMesh (pp, dp_replicate, "
    "dp_shard, cp, tp) covers the world (init_device_mesh refuses another product)",
    engines=_FSDP_ONLY,
)
FSDP_HSDP_NODE = _r(
    "TRC341",
    "fsdp-hsdp-shard-group-in-node",
    "engine=fsdp with HSDP: the shard group (dp_shard x cp x tp consecutive ranks) should fit in "
    "one node, so that the per-layer all-gathers and reduce-scatters stay on NVLink",
    "warning",
    engines=_FSDP_ONLY,
)
FSDP_PRECISION = _r(
    "TRC342",
    "fsdp-precision",
    "engine=fsdp trains in bf16 or fp32 (MixedPrecisionPolicy); fp16 needs a sharded gradient "
    "scaler that neither the trainc worker nor torchtitan sets up",
    engines=_FSDP_ONLY,
)
FSDP_SCHEDULE = _r(
    "TRC343",
    "fsdp-pipeline-schedule",
    "engine=fsdp with pp > 1: the pipelining schedule must match the stages per rank (1F1B: vpp 1, "
    "Interleaved1F1B: vpp > 1, ZBVZeroBubble: vpp 2)",
    engines=_FSDP_ONLY,
)
FSDP_TP_REDUCE_BF16 = _r(
    "TRC346",
    "fsdp-tp-reduce-bf16",
    "engine=fsdp with tp > 1 and bf16 parameters: fsdp.reduce_dtype fp32 covers FSDP2's own "
    "reduce-scatter / all-reduce only; the tensor-parallel gradient reductions sum in bf16",
    "warning",
    engines=_FSDP_ONLY,
)
FSDP_UNSUPPORTED = _r(
    "TRC344",
    "fsdp-unsupported-setting",
    "engine=fsdp does not read a setting of another engine or one its runner cannot honour (ZeRO "
    "stage and DeepSpeed offload keys: FSDP2 shards by fsdp.* keys; experts on the trainc "
    "worker, an etp or MoE losses torchtitan has not; compile on CPU; "
    "Megatron-Core's cp_comm_type and recompute_method / recompute_num_layers; a pipeline "
    "layer split torchtitan cannot build)",
    engines=_FSDP_ONLY,
)
FSDP_EXPERT_MESH = _r(
    "TRC348",
    "fsdp-expert-mesh",
    "engine=fsdp with experts: ep must divide dp_shard x cp x tp, the ranks torchtitan's "
    "expert parallelism borrows (its sparse mesh is pp, dp_replicate, efsdp, ep with efsdp = "
    "dp_shard x cp x tp / ep)",
    engines=_FSDP_ONLY,
)
LOW_PRECISION_RUNNER = _r(
    "TRC330",
    "low-precision-runner",
    "FP8 / FP4 GEMMs and a precision-aware optimizer need Transformer Engine on CUDA: "
    "engine=megatron with launch.device=cuda",
)
FP8_FP4_COMBINATION = _r(
    "TRC331",
    "fp8-fp4-combination",
    "fp8 and fp4 are exclusive; fp8_param_gather needs fp8_format and the distributed optimizer",
)
OPTIMIZER_STATE_PRECISION = _r(
    "TRC332",
    "optimizer-state-precision",
    "optimizer buffers below fp32 need adam and the distributed optimizer (Megatron-Core "
    "precision-aware optimizer), in the dtypes Megatron-LM accepts for each buffer",
)
PRETRAIN_RECIPE = _r(
    "TRC333",
    "pretraining-recipe",
    "pre-training a model of 1B parameters or more on CUDA should warm the learning rate up and "
    "run Adam with beta2 below 0.999 (0.95), as the published recipes do",
    "warning",
)
#: not applicable to DeepSpeed or FSDP: trainc's runners there have no Transformer Engine GEMMs and
#: no Megatron-Core MoE dispatcher (TRC330 / TRC313 / the FSDP rules report the spec instead)
_MEGATRON_ONLY = {"megatron": "error", "deepspeed": "n/a", "fsdp": "n/a"}
LOW_PRECISION_GPU = _r(
    "TRC370",
    "low-precision-recipe-gpu",
    "the FP8 / FP4 recipe must run on cluster.gpu: FP8 needs compute capability 8.9+ (no A100), "
    "mxfp8 and nvfp4 need Blackwell (B200, GB200), blockwise needs Hopper or a recent "
    "Transformer Engine on Blackwell, and CUDA 12.9 or later (launch.versions.cuda)",
    engines=_MEGATRON_ONLY,
)
LOW_PRECISION_SHAPES = _r(
    "TRC371",
    "low-precision-gemm-shapes",
    "every FP8 / FP4 GEMM's local shape after the TP / ETP split must be aligned: tokens per "
    "micro-batch divisible by 8 and widths by 16 (delayed, tensorwise, blockwise), both by 32 "
    "(mxfp8), both by 16 (nvfp4)",
    engines=_MEGATRON_ONLY,
)
FP8_BF16_LAYERS = _r(
    "TRC372",
    "fp8-bf16-layers",
    "first_last_layers_bf16 needs fp8_format or fp4_format and a recipe other than delayed "
    "(Megatron-Core: 'Delayed scaling does not support first / last layer in BF16')",
    engines=_MEGATRON_ONLY,
)
MOE_BIAS_ETP = _r(
    "TRC373",
    "moe-bias-needs-etp1",
    "add_bias_linear with experts needs etp = 1 (Megatron-Core: 'Bias in Moe is only supported "
    "when ETP==1')",
    engines=_MEGATRON_ONLY,
)
MXFP8_FORMAT = _r(
    "TRC374",
    "mxfp8-e4m3-only",
    "the mxfp8 recipe trains with E4M3 in forward and backward; fp8_format hybrid (E5M2 "
    "gradients) diverged in Megatron-Bridge's MXFP8 runs",
    "warning",
    engines={"megatron": "warning", "deepspeed": "n/a", "fsdp": "n/a"},
)
MXFP8_PARAM_GATHER = _r(
    "TRC379",
    "mxfp8-param-gather",
    "mxfp8 without fp8_param_gather keeps BF16 parameter copies next to the MXFP8 ones "
    "(Megatron-Core: 'will use significant amount additional GPU memory')",
    "warning",
    engines={"megatron": "warning", "deepspeed": "n/a", "fsdp": "n/a"},
)
MOE_FLEX_DISPATCHER = _r(
    "TRC375",
    "moe-flex-dispatcher",
    "the flex token dispatcher needs etp*ep > 1; its deepep backend does not drop-and-pad "
    "(moe_pad_expert_input_to_capacity); its backend key is read only with flex",
    engines=_MEGATRON_ONLY,
)
MOE_PAD_CAPACITY = _r(
    "TRC376",
    "moe-pad-needs-capacity",
    "moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor (the token dispatcher "
    "asserts it at init)",
    engines=_MEGATRON_ONLY,
)
MOE_QUANT_PADDING = _r(
    "TRC377",
    "moe-router-padding-for-quantization",
    "moe_router_padding_for_quantization needs fp8_format or fp4_format and the alltoall or flex "
    "dispatcher (Megatron-Core TransformerConfig.__post_init__)",
    engines=_MEGATRON_ONLY,
)
MOE_FLEX_SCALE = _r(
    "TRC378",
    "moe-flex-dispatcher-intranode",
    "the flex dispatcher (DeepEP) pays off for expert-parallel groups across nodes; inside one "
    "node alltoall or allgather is as fast or faster",
    "warning",
    engines={"megatron": "warning", "deepspeed": "n/a", "fsdp": "n/a"},
)
MOE_ROUTER_SETTINGS = _r(
    "TRC384",
    "moe-router-settings",
    "group-limited routing needs moe_router_num_groups and moe_router_group_topk together, "
    "groups that divide num_experts, group_topk <= num_groups and <= topk, and picked groups "
    "that hold topk experts; the expert bias needs sigmoid "
    "scores; dense first layers leave at least one MoE layer (Megatron-Core "
    "TransformerConfig.__post_init__)",
)
MOE_NO_LOAD_BALANCING = _r(
    "TRC385",
    "moe-no-load-balancing",
    "an MoE model trained with no load balancing (no auxiliary loss and no expert bias) routes "
    "most tokens to a few experts (routing collapse)",
    "warning",
)
MEGATRON_ONLY_MODEL_KEY = _r(
    "TRC386",
    "megatron-only-model-key",
    "dense first layers, multi-token prediction, group-limited routing and the expert bias are "
    "built by Megatron-LM / Megatron-Core only: engine=deepspeed and engine=fsdp cannot express "
    "them, and multi-token prediction needs entrypoint megatron-lm (the trainc worker builds "
    "no MTP block)",
    engines={"megatron": "error", "deepspeed": "error", "fsdp": "error"},
)
FP4_ALL_LAYERS = _r(
    "TRC387",
    "fp4-all-layers",
    "fp4_format on every layer: NVIDIA's NVFP4 pre-training recipes keep the first and last "
    "layers in BF16 (first_last_layers_bf16), and all-NVFP4 runs lose accuracy",
    "warning",
    engines={"megatron": "warning", "deepspeed": "n/a", "fsdp": "n/a"},
)
TP_COMM_OVERLAP = _r(
    "TRC380",
    "tp-comm-overlap",
    "tp_comm_overlap needs engine=megatron on CUDA (Transformer Engine userbuffers) and tp > 1 "
    "with sequence_parallel (Megatron-LM validate_args)",
)
TP_COMM_OVERLAP_DOMAIN = _r(
    "TRC382",
    "tp-comm-overlap-domain",
    "tp_comm_overlap runs in Transformer Engine's userbuffers over NVLink peer memory (CUDA "
    "multicast / IPC handles): a TP group wider than the NVLink domain, or cut by it, cannot "
    "run it (tensor parallelism inside one domain only)",
    "error",
    engines={"megatron": "error", "deepspeed": "n/a", "fsdp": "n/a"},
)
MOE_A2A_OVERLAP = _r(
    "TRC381",
    "moe-a2a-overlap",
    "overlap_moe_expert_parallel_comm needs engine=megatron on CUDA, ep > 1, the alltoall or "
    "flex dispatcher, no full recompute, bf16/fp16 and vpp > 1 when pp > 1 (Megatron-Core "
    "TransformerConfig.__post_init__)",
)
MEGATRON_FSDP = _r(
    "TRC383",
    "megatron-fsdp",
    "Megatron-FSDP (zero_stage 3 on engine=megatron) saves fsdp_dtensor checkpoints only, always "
    "overlaps its DP collectives, and runs in Megatron-LM on CUDA (the trainc worker runs its math "
    "on CPU only)",
    engines={"megatron": "error", "deepspeed": "n/a", "fsdp": "n/a"},
)
DATA_SPLIT = _r(
    "TRC512",
    "data-split-format",
    "launch.data_split is three non-negative numbers, comma-separated, not all zero "
    "(Megatron --split)",
)
NCCL_IB_DISABLED = _r(
    "TRC513",
    "nccl-ib-disabled-multinode",
    "NCCL_IB_DISABLE=1 on a multi-node job turns off InfiniBand and RoCE: NCCL falls back to TCP "
    "sockets across nodes (several times slower collectives)",
    "warning",
)
SLURM_SEGMENT = _r(
    "TRC520",
    "slurm-segment-whole-groups",
    "the #SBATCH --segment size must divide num_nodes, fit one NVLink domain and hold whole "
    "TP x CP and ETP x EP groups (GB200 NVL72 block topology)",
    "warning",
    engines={"megatron": "warning", "deepspeed": "warning"},
)
K8S_RUNTIME = _r(
    "TRC521",
    "k8s-runtime-name",
    "launch.k8s_runtime must be a Kubernetes object name (RFC 1123 subdomain: lower-case "
    "letters, digits, '-' and '.', at most 253)",
    engines={"megatron": "error", "deepspeed": "error"},
)
K8S_SAVE_DIR = _r(
    "TRC522",
    "k8s-save-dir-absolute",
    "launch.save_dir must be an absolute path for trainjob.yaml / pytorchjob.yaml, which mount "
    "the checkpoint volume there (a container mountPath is absolute)",
    "warning",
    engines={"megatron": "warning", "deepspeed": "warning"},
)

# --- TRC35x: the data path (data:) -------------------------------------------------------------
_BOTH_ERR = {"megatron": "error", "deepspeed": "error"}
DATA_BLEND = _r(
    "TRC350",
    "data-blend",
    'data.paths is a blend of PREFIX or "WEIGHT PREFIX" entries (all weighted or none, '
    "weights > 0), not combined with launch.data_path (Megatron --data-path)",
    engines=_BOTH_ERR,
)
TOKENIZER_VOCAB = _r(
    "TRC351",
    "tokenizer-vocab-within-model",
    "data.tokenizer_vocab_size must not exceed model.vocab_size: larger token ids index past "
    "the embedding (CUDA device-side assert / IndexError)",
    engines=_BOTH_ERR,
)
PACKED_CP_PADDING = _r(
    "TRC352",
    "packed-cp-padding",
    "with packed (THD) sequences and cp > 1 every document must be padded to a multiple of "
    "2*cp (cp*lcm(2, tp) with sequence parallelism): data.pad_to_multiple_of",
    engines=_BOTH_ERR,
)
MASK_IGNORED = _r(
    "TRC353",
    "reset-attention-mask-ignored",
    "Transformer Engine attention is causal and ignores the dense mask of "
    "--reset-attention-mask: documents attend across each other silently",
    engines={"megatron": "error", "deepspeed": "n/a"},
)
DATA_RUNNER = _r(
    "TRC356",
    "data-option-runner",
    "a data option the chosen runner does not read (packed THD data; the cross-document mask "
    "in the trainc worker; any data: key for torchtitan) is an error, never silently dropped",
    engines=_BOTH_ERR,
)
EOD_TOKEN = _r(
    "TRC358",
    "eod-token-id",
    "with real data, data.eod_mask_loss / reset_position_ids / reset_attention_mask find "
    "document ends by the NullTokenizer's end-of-document id (vocab_size - 1), which trainc's "
    "artifacts use: data tokenized with another end-of-document id never matches it",
    "warning",
    engines={"megatron": "warning", "deepspeed": "warning"},
)
EPOCHS = _r(
    "TRC357",
    "epochs-derived",
    "train_iters x global_batch_size against the samples in the data: the epoch count, derived "
    "once (derived.steps_per_epoch, derived.epochs); more than one epoch repeats data",
    "info",
    engines={"megatron": "info", "deepspeed": "info"},
)

# --- TRC53x: versions and checkpoints -------------------------------------------------------------
KNOWN_BAD_VERSIONS = _r(
    "TRC530",
    "known-bad-versions",
    "launch.versions (or the installed packages) match a known-bad combination of "
    "trainc/conf/known_bad_versions.yaml for a feature the job uses",
    engines=_BOTH_ERR,
)
VERSION_FORMAT = _r(
    "TRC531",
    "version-key-format",
    "launch.versions keys are torch, cuda, nccl, transformer_engine, megatron_core, deepspeed, "
    "flash_attn; values are release numbers (2.4.0, 12.4, 0.14.4)",
    engines=_BOTH_ERR,
)
VERSION_TARGET = _r(
    "TRC532",
    "version-below-target",
    "the engine library in launch.versions is older than the release trainc emits for "
    "(megatron-core 0.16.1, deepspeed 0.19.8): flags or config keys may not exist there",
    "warning",
    engines={"megatron": "warning", "deepspeed": "warning"},
)
VERSION_CONTAINER = _r(
    "TRC539",
    "version-container-conflict",
    "launch.versions names another release of a component than the one launch.container_image "
    "ships (trainc/conf/container_versions.yaml): the launch.versions value is the one checked",
    "warning",
    engines={"megatron": "warning", "deepspeed": "warning"},
)
CKPT_FORMAT_RUNNER = _r(
    "TRC533",
    "checkpoint-format-runner",
    "resume.checkpoint_format and resume.finetune are Megatron-LM's --ckpt-format / --finetune "
    "(entrypoint=megatron-lm); the trainc worker writes its own files, and torchtitan gets no "
    "resume.load_dir",
    engines=_BOTH_ERR,
)
RESUME_LAYOUT = _r(
    "TRC534",
    "resume-layout-change",
    "a parallel layout change on resume needs a format that reshards (torch_dist); legacy "
    "torch files, the trainc worker's files and DeepSpeed ZeRO shards load only into the "
    "layout that wrote them",
    engines=_BOTH_ERR,
)
RESUME_VOCAB = _r(
    "TRC535",
    "resume-vocab-padding",
    "the padded vocabulary (embedding rows) must equal the saved one: it depends on tp and "
    "make_vocab_size_divisible_by",
    engines=_BOTH_ERR,
)
RESUME_ARCH = _r(
    "TRC536",
    "resume-architecture",
    "layers, widths, heads, experts, learned positions and embedding tying must match the "
    "checkpoint (global shape mismatch on load)",
    engines=_BOTH_ERR,
)
RESUME_SCHEDULE = _r(
    "TRC537",
    "resume-batch-schedule",
    "resuming (not finetune) with another global batch, schedule or iteration count changes the "
    "learning-rate schedule and the data order mid-run",
    "warning",
    engines={"megatron": "warning", "deepspeed": "warning"},
)
RESUME_OPTIMIZER = _r(
    "TRC538",
    "resume-optimizer",
    "the optimizer state in the checkpoint belongs to the saved optimizer (and ZeRO stage); "
    "another one needs resume.finetune",
    engines=_BOTH_ERR,
)

ALL_RULES: tuple[Rule, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Rule))
RULES_BY_ID = {r.id: r for r in ALL_RULES}
assert len(RULES_BY_ID) == len(ALL_RULES), "duplicate rule id"

#: Where each rule comes from: the library function that enforces (or silently breaks on) it, or
#: a paper, or a bug case (docs/bug_cases.md). Unqualified Megatron names are Megatron-LM
#: core_v0.16.1 (``megatron/training/arguments.py::validate_args``, ``megatron/core/...``, the
#: megatron-core 0.16.1 wheel); DeepSpeed names are DeepSpeed v0.19.8.
SOURCES: dict[str, str] = {
    "TRC000": "trainc loader",
    "TRC001": "trainc schema",
    "TRC002": "trainc schema",
    "TRC003": "trainc schema",
    "TRC004": "trainc schema / Hydra defaults list",
    "TRC005": "Hydra override grammar",
    "TRC006": "trainc schema",
    "TRC007": "YAML 1.1 implicit types (yaml.org/type: int, float, bool, null); Hydra override "
    "grammar",
    "TRC008": "RFC 8259 JSON has no NaN or Infinity (plan.json, ds_config.json)",
    "TRC009": "trainc validate (every error whose inputs are known, in one run)",
    "TRC101": "validate_args / parallel_state.initialize_model_parallel: world % (tp*pp*cp)",
    "TRC102": "validate_args: data_parallel_size = W/(tp*pp*cp)",
    "TRC103": "parallel_state.initialize_model_parallel expert RankGenerator; worked example B "
    "(docs/references.md)",
    "TRC104": "parallel_state.initialize_model_parallel expert generator: world % (etp*ep*pp)",
    "TRC105": "parallel_state.RankGenerator order tp-cp-ep-dp-pp (tp fastest); TP inside "
    "a node: Narayanan et al. 2021, arXiv:2104.04473 §3.3",
    "TRC106": "parallel_state.RankGenerator order tp-cp-ep-dp-pp (tp, then cp, fastest)",
    "TRC107": "parallel_state.RankGenerator expert order; with the flex dispatcher: "
    "NVIDIA-NeMo/Megatron-Bridge#2883 "
    "(HybridEP limited to EP 8 on NVL8), deepseek-ai/DeepEP#411, "
    "NVIDIA/Megatron-LM#5039 (DeepEP internode hangs)",
    "TRC108": "cluster size",
    "TRC109": "cluster.clock_cap (nvidia-smi -pl / -lgc)",
    "TRC201": "TransformerConfig.__post_init__ (heads % tp)",
    "TRC202": "TransformerConfig.__post_init__, Megatron-Core >= 0.16 (query groups vs tp)",
    "TRC203": "tensor_parallel/layers.py RowParallelLinear divide()",
    "TRC204": "expert linear layers divide() (moe_ffn % etp)",
    "TRC205": "validate_args / transformer/moe/moe_layer.py MoELayer",
    "TRC206": "not validated by Megatron; torch.topk in transformer/moe/router.py fails at "
    "run time",
    "TRC207": "transformer/attention.py divide(a, g)",
    "TRC208": "validate_args (hidden % heads without kv_channels)",
    "TRC209": "megatron/training/tokenizer/tokenizer.py _vocab_size_with_padding",
    "TRC210": "transformer_block.get_num_layers_to_build (BC-001)",
    "TRC211": "interleaved schedule layer split, TransformerConfig.__post_init__ (BC-003)",
    "TRC212": "TransformerConfig.__post_init__ uneven PP (BC-005)",
    "TRC213": "parallel_state.initialize_model_parallel (vpp needs pp > 1)",
    "TRC214": "num_microbatches_calculator.ConstantNumMicroBatchesCalculator; DeepSpeed "
    "runtime/config.py DeepSpeedConfig._batch_assertion",
    "TRC215": "pipeline_parallel/schedules.py; torch 2.13 torch/distributed/pipelining/"
    "schedules.py Schedule1F1B.__init__ (n_microbatches >= num_stages, pytorch/"
    "pytorch PR 144702; pytorch/torchtitan#775)",
    "TRC216": "schedules.forward_backward_pipelining_with_interleaving",
    "TRC217": "validate_args (seq % (2*cp))",
    "TRC218": "tensor_parallel/mappings.py _split_along_first_dim (BC-015)",
    "TRC219": "validate_args --max-position-embeddings",
    "TRC220": "Transformer Engine pytorch/attention/dot_product_attention/context_parallel.py "
    "AttnFuncWithCPAndQKVOA2A (heads % cp)",
    "TRC221": "attention.py KV replication, Megatron-Core >= 0.16 (BC-011); "
    "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ "
    "(core_v0.15.3: num_query_groups % tp == 0 required; core_v0.16.0: or tp % "
    "num_query_groups == 0)",
    "TRC260": "megatron/core/transformer/transformer_block.py TransformerBlock."
    "_checkpointed_forward, uniform method (core_v0.16.1: custom(layer_idx, layer_idx "
    "+ recompute_num_layers) unclamped; clamped to the stage's layers by "
    "NVIDIA/Megatron-LM PR #3562, first in core_v0.17.0); NVIDIA/Megatron-LM#1807",
    "TRC390": "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ "
    "(core_v0.11.0: 'moe_expert_capacity_factor only works with alltoall token "
    "dispatcher'; the check is gone from core_v0.12.0, NVIDIA/Megatron-LM commit "
    "0d389f5 'Integration of Deepseek DeepEP kernel'); NVIDIA/Megatron-LM#1277",
    "TRC301": "ModelParallelConfig.__post_init__ (SP needs TP)",
    "TRC302": "megatron-core 0.16.1 transformer/moe/moe_layer.py MoELayer.forward raises "
    "ValueError; ModelParallelConfig.__post_init__ only warns",
    "TRC303": "validate_args overlap_p2p_comm; batched p2p measured on CPU (docs/divergences.md)",
    "TRC304": "DeepSpeed runtime/pipe/engine.py PipelineEngine.__init__ (ZeRO-2/3 assertion)",
    "TRC305": "DeepSpeed runtime/zero/config.py DeepSpeedZeroConfig",
    "TRC306": "trainc emitters",
    "TRC307": "validate_args / megatron/core/optimizer/distrib_optimizer.py",
    "TRC308": "TransformerConfig.__post_init__ / validate_args recompute checks",
    "TRC309": "TransformerConfig.__post_init__ recompute_num_layers checks",
    "TRC312": "validate_args (ep > 1 needs num_experts)",
    "TRC313": "trainc/capabilities.py (the runners' axes)",
    "TRC315": "models/gpt/gpt_layer_specs.py get_gpt_decoder_layer_specs moe_layer_freq pattern",
    "TRC316": "megatron/core/transformer/transformer_config.py MLATransformerConfig (0.16.1); "
    "training.py num_floating_point_operations asserts not group_query_attention",
    "TRC318": "learning-rate schedule",
    "TRC319": "CPU (gloo) execution",
    "TRC320": "DeepSpeed runtime/engine.py zero_use_cpu_optimizer (ignores the stage)",
    "TRC321": "DeepSpeed runtime/zero/offload_config.py nvme_path (default None)",
    "TRC322": "DeepSpeed PipelineEngine (BC-025, DeepSpeed #7773)",
    "TRC317": "deepspeed/runtime/lr_schedules.py (0.19.8) WarmupCosineLR.get_lr_ratio "
    "(real_last_step = it - warmup + 1), _initialize_lr (iteration -1); "
    "megatron/core/optimizer_param_scheduler.py get_lr (0.16.1)",
    "TRC323": "deepspeed/runtime/lr_schedules.py (0.19.8) WarmupLR, WarmupDecayLR, "
    "WarmupCosineLR; megatron/core/optimizer_param_scheduler.py "
    "OptimizerParamScheduler.__init__ asserts (0.16.1)",
    "TRC324": "megatron/training/arguments.py::validate_args overlap checks (core_v0.19.0)",
    "TRC325": "trainc.capabilities (pretrain_gpt.py needs CUDA and Megatron; torchtitan 0.3.0 "
    "trains on CUDA)",
    "TRC326": "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ "
    "(0.16.1)",
    "TRC327": "megatron/core/transformer/moe/shared_experts.py SharedExpertMLP (0.16.1): "
    "'... is not divisible by' at model build",
    "TRC401": "trainc estimates",
    "TRC402": "trainc estimates",
    "TRC403": "trainc estimates",
    "TRC404": "trainc estimates; Slurm sbatch --time and --signal (the generated sbatch.sh)",
    "TRC420": "deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs and "
    "stage_1_and_2.py estimate_zero2_model_states_mem_needs (0.19.8); DeepSpeed #4867",
    "TRC421": "deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs "
    "additional_buffer_factor=1.5 (0.19.8)",
    "TRC501": "Slurm job names",
    "TRC502": "Slurm --time",
    "TRC503": "Megatron-LM pretrain_gpt.py",
    "TRC504": "POSIX environment names",
    "TRC505": "validate_args (CUDA_DEVICE_MAX_CONNECTIONS); the warnings: "
    "github.com/verl-project/verl/pull/6976 (FSDP2), "
    "github.com/NVIDIA/Megatron-LM/issues/1468 (tp = cp = 1)",
    "TRC506": "CPU (gloo) execution",
    "TRC507": "torchrun --nproc_per_node (BC-063)",
    "TRC508": "NCCL_SOCKET_IFNAME (BC-067, BC-069)",
    "TRC509": "torchrun / Slurm rendezvous; DeepSpeed comm/comm.py init_distributed "
    "(BC-057, BC-059)",
    "TRC510": "trainc: credentials in launch.env are not written to the artifacts",
    "TRC511": "generated shell scripts and #SBATCH lines (one value per line)",
    "TRC328": "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ "
    "(0.16.1): 'Please use --moe-router-pre-softmax when topk is 1.'",
    "TRC329": "trainc: what each engine reads (docs/engines.md)",
    "TRC340": "torch 2.13 torch/distributed/device_mesh.py init_device_mesh (mesh size must equal "
    "the world); torchtitan 0.3.0 distributed/parallel_dims.py ParallelDims._validate",
    "TRC341": "torch 2.13 fully_shard on a 2-D mesh (HSDP: all-gather / reduce-scatter over the "
    "shard dim per layer, all-reduce over the replicate dim); arXiv:2304.11277 §3.2",
    "TRC346": "github.com/pytorch/pytorch/issues/190626 (FSDP2 MixedPrecisionPolicy.reduce_dtype "
    "does not reach DTensor TP Partial -> Replicate reductions); torch 2.13 "
    "torch/distributed/fsdp/_fully_shard/_fsdp_api.py MixedPrecisionPolicy",
    "TRC342": "torch 2.13 torch/distributed/fsdp/_fully_shard/_fsdp_api.py MixedPrecisionPolicy; "
    "torchtitan 0.3.0 config/configs.py TrainingConfig.mixed_precision_param",
    "TRC343": "torch 2.13 torch/distributed/pipelining/schedules.py (PipelineScheduleSingle vs "
    "PipelineScheduleMulti; ScheduleZBVZeroBubble needs 2 stages per rank)",
    "TRC344": "trainc: what engine=fsdp reads (docs/engines.md)",
    "TRC348": "torchtitan 0.3.0 torchtitan/distributed/parallel_dims.py ParallelDims.build_mesh "
    "(efsdp = dp_shard * cp * tp // ep; _validate_meshes) and config/configs.py "
    "ParallelismConfig.expert_parallel_degree",
    "TRC330": "megatron-core 0.16.1 transformer_config.py / optimizer_config.py (Transformer "
    "Engine FusedAdam); trainc capabilities",
    "TRC331": "megatron-core 0.16.1 TransformerConfig.__post_init__ (fp8_param, fp4 vs fp8)",
    "TRC332": "megatron-core 0.16.1 OptimizerConfig.__post_init__; Megatron-LM arguments.py "
    "--main-grads-dtype, --main-params-dtype, --exp-avg(-sq)-dtype",
    "TRC333": "Llama 2, arXiv 2307.09288 section 2.2 (AdamW beta2 0.95, 2,000 warm-up steps); "
    "GPT-3, arXiv 2005.14165 appendix B; OPT, arXiv 2205.01068 section 2.2",
    "TRC370": "transformer_engine/pytorch/quantization.py check_recipe_support / "
    "_compute_fp8_support (8.9+), _compute_mxfp8_support and _compute_nvfp4_support "
    "(10.0+), _compute_fp8_block_scaling_support (TE 2.x: Hopper, later 9.0+; "
    "torch.version.cuda >= 12.9 in v2.3 .. v2.18; NVIDIA-NeMo/RL#971); "
    "megatron-core 0.16.1 transformer_config.py fp8_recipe ('mxfp8' for Blackwell only)",
    "TRC371": "transformer_engine/pytorch/utils.py assert_dim_for_fp8_exec (height % 8, width % "
    "16); tensor/mxfp8_tensor.py and nvfp4_tensor.py Quantizer.is_quantizable (block "
    "sizes 32 and 16); megatron-core 0.16.1 fp8_utils.get_fp8_align_size",
    "TRC372": "megatron-core 0.16.1 transformer_config.py TransformerConfig.__post_init__ "
    "('Delayed scaling does not support first / last layer in BF16')",
    "TRC373": "megatron-core 0.16.1 transformer_config.py TransformerConfig.__post_init__ "
    "('Bias in Moe is only supported when ETP==1')",
    "TRC374": "Megatron-Bridge PR #638 (github.com/NVIDIA-NeMo/Megatron-Bridge/pull/638): the "
    "MXFP8 recipe must use E4M3 for fprop and bprop; NeMo PR #14793",
    "TRC379": "megatron-core 0.16.1 optimizer/optimizer_config.py OptimizerConfig.__post_init__ "
    "(mxfp8 without reuse_grad_buf_for_mxfp8_param_ag and fp8_param_gather warning)",
    "TRC378": "Megatron-LM issue #1456 (github.com/NVIDIA/Megatron-LM/issues/1456): DeepEP is "
    "optimized for cross-node EP (> 8); for EP <= 8 allgather or alltoall",
    "TRC375": "megatron-core 0.16.1 transformer/moe/token_dispatcher.py MoEFlexTokenDispatcher."
    "__init__ ('Flex token dispatcher requires TPxEP > 1'); transformer_config.py "
    "__post_init__ (deepep backend vs moe_pad_expert_input_to_capacity)",
    "TRC376": "megatron-core 0.16.1 transformer/moe/token_dispatcher.py "
    "MoEAlltoAllTokenDispatcher / _DeepepManager __init__ (assert capacity factor)",
    "TRC377": "megatron-core 0.16.1 transformer_config.py TransformerConfig.__post_init__ "
    "(moe_router_padding_for_quantization checks)",
    "TRC380": "Megatron-LM megatron/training/arguments.py validate_args (--tp-comm-overlap needs "
    "--sequence-parallel); megatron-core 0.16.1 extensions/transformer_engine.py "
    "(userbuffers: Transformer Engine on CUDA)",
    "TRC382": "Transformer Engine userbuffers (transformer_engine/pytorch/module/base.py "
    "initialize_ub: intra-domain NVLink peer-memory communicators); "
    "NVIDIA/TransformerEngine#1071 (comm+GEMM overlap supports single-node tensor "
    "parallelism only: Userbuffers relies on CUDA multicast handles within an NVLink "
    "domain)",
    "TRC383": "Megatron-LM core_v0.16.1 megatron/training/arguments.py validate_args "
    "(use_megatron_fsdp: ckpt_format fsdp_dtensor); megatron/core/distributed/fsdp/"
    "src/megatron_fsdp/megatron_fsdp.py MegatronFSDP.__init__ (overlaps forced on)",
    "TRC384": "megatron-core 0.16.1 transformer/transformer_config.py TransformerConfig."
    "__post_init__ (moe_router_group_topk / moe_router_num_groups asserts; "
    "moe_router_enable_expert_bias needs moe_router_score_function sigmoid); "
    "transformer/moe/moe_utils.py group_limited_topk (topk // group_topk per group)",
    "TRC385": "Megatron-Core MoE docs (megatron/core/transformer/moe/README.md, core_v0.16.1: "
    "--moe-router-load-balancing-type aux_loss with --moe-aux-loss-coeff 1e-2 "
    "recommended; --moe-router-enable-expert-bias for aux-loss-free balancing); "
    "arXiv:2101.03961 §2.2 (Switch), arXiv:2408.15664 (aux-loss-free)",
    "TRC386": "Megatron-LM core_r0.16.0 megatron/training/arguments.py (--moe-layer-freq, "
    "--mtp-num-layers, --moe-router-num-groups, --moe-router-group-topk, "
    "--moe-router-enable-expert-bias); megatron-core 0.16.1 models/gpt/gpt_model.py "
    "GPTModel (mtp_block_spec); trainc: what each engine builds (docs/engines.md)",
    "TRC387": "arXiv:2509.25149 (Pretraining LLMs with NVFP4: the last ~15 % of layers in "
    "BF16); Megatron-Bridge PR 1347 (Llama-3-8B NVFP4 recipe keeps the last 4 "
    "layers in BF16); Megatron-LM --first-last-layers-bf16",
    "TRC381": "megatron-core 0.16.1 transformer/transformer_config.py TransformerConfig."
    "__post_init__ (overlap_moe_expert_parallel_comm checks)",
    "TRC512": "megatron/training/arguments.py --split; megatron/core/datasets utils "
    "parse_and_normalize_split (core_v0.19.0)",
    "TRC513": "NCCL environment variables (docs.nvidia.com/deeplearning/nccl, NCCL_IB_DISABLE); "
    "github.com/scottclowe/pytorch-experiment-template/issues/11 (RoCE off, +56 % step)",
    "TRC520": "Slurm topology/block plugin and sbatch --segment (slurm.schedmd.com/"
    "topology.html, Slurm 24.05+); Megatron-Core RankGenerator order tp-cp-ep-dp-pp",
    "TRC350": "megatron/training/arguments.py --data-path; megatron/core/datasets/utils.py "
    "get_blend_from_list (core_v0.16.x)",
    "TRC351": "Megatron-Bridge PR #455 (vocab size >= tokenizer vocab size); "
    "huggingface/tokenizers #1609 (token id out of range)",
    "TRC352": "Transformer Engine THD context parallelism (TransformerEngine #1368, PR #641); "
    "Megatron-Bridge PR #1867 (pad each packed sample to 2*cp)",
    "TRC353": "NVIDIA/Megatron-LM #2357 (TE attn_mask_type causal ignores the GPTDataset mask)",
    "TRC356": "trainc worker (trainc/launch/worker/data.py: GPTDatasetConfig; no attention mask, "
    "no PackedSeqParams); pretrain_gpt.py reads no THD data (core_v0.16.x)",
    "TRC358": "megatron/core/datasets/gpt_dataset.py _get_ltor_masks_and_position_ids (compares "
    "tokens with tokenizer.eod); megatron/core/tokenizers NullTokenizer (eod = the last "
    "id); trainc/launch/worker/data.py NullTokenizer(V - 1)",
    "TRC357": "megatron/core/datasets/gpt_dataset.py GPTDataset (epochs repeat the documents, "
    "0.16.1); trainc derive.py steps_per_epoch",
    "TRC530": "trainc/conf/known_bad_versions.yaml (each entry links its public report)",
    "TRC531": "trainc schema",
    "TRC532": "trainc target_versions (plan.json)",
    "TRC539": "trainc/conf/container_versions.yaml (NGC PyTorch / NeMo release notes and "
    "support tables; each image names its source)",
    "TRC533": "megatron/training/arguments.py --ckpt-format (core_v0.16.x); "
    "trainc/launch/worker/checkpoint.py",
    "TRC534": "megatron/training/checkpointing.py load_checkpoint (core_v0.16.x: legacy files "
    "per mp_rank); NVIDIA/Megatron-LM #296 (BC-053); DeepSpeed universal checkpoint "
    "(deepspeed/checkpoint/ds_to_universal.py, 0.19.8)",
    "TRC535": "megatron/training/tokenizer vocab_size_with_padding (core_v0.16.x); "
    "THUDM/Chinese-Transformer-XL #3 (BC-051)",
    "TRC536": "megatron/core/dist_checkpointing (global shape check, 0.16.1); "
    "NVIDIA-NeMo/Speech #10715 (BC-055)",
    "TRC537": "megatron/core/optimizer_param_scheduler.py (consumed samples drive the lr, "
    "0.16.1); megatron/training/checkpointing.py --finetune",
    "TRC538": "megatron/training/checkpointing.py load_checkpoint --no-load-optim / --finetune "
    "(core_v0.16.x); deepspeed/runtime/engine.py load_checkpoint (0.19.8)",
    "TRC521": "Kubernetes object names (RFC 1123 subdomain); Kubeflow Trainer v2.3.0 "
    "TrainJob.spec.runtimeRef.name",
    "TRC522": "Kubernetes core/v1 VolumeMount.mountPath (a path inside the container, where the "
    "runtime mounts the volume; runc refuses a relative destination)",
}
