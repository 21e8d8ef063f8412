"""TRC30x-TRC33x and TRC38x-TRC39x, feature compatibility: combinations the engines reject or
mishandle (the engine=fsdp rules are :mod:`.fsdp`, the data path :mod:`.data`, low precision and
the Megatron-Core MoE dispatcher :mod:`.precision`). The Megatron-Core MoE build checks are n/a
for engine=fsdp, whose experts are torchtitan's (TRC344 / TRC348)."""

from trainc.compiler.rules.catalog import Family, Rule, Severity
from trainc.schemas.enums import Engine

SP_NEEDS_TP = Rule(
    id="TRC301",
    name="sp-needs-tp",
    summary="sequence_parallel needs tp > 1",
    source="ModelParallelConfig.__post_init__ (SP needs TP)",
)

# Megatron-Core 0.16.1 MoELayer.forward raises ValueError in training when the attention tp
# group is larger than 1 and sequence_parallel is off (ModelParallelConfig.__post_init__ only
# warns, for ep > 1 and tp > 1). trainc's DeepSpeed runner builds the same Megatron-Core MoELayer
# (trainc/launch/worker/engines/deepspeed.py), so it is an error on both engines.
MOE_TP_SP = Rule(
    id="TRC302",
    name="moe-tp-needs-sp",
    summary="MoE with tp > 1 needs sequence_parallel (Megatron-Core raises in training)",
    engines={Engine.fsdp: Severity.na},
    source=(
        "megatron-core 0.16.1 transformer/moe/moe_layer.py MoELayer.forward raises ValueError; "
        "ModelParallelConfig.__post_init__ only warns"
    ),
)

VPP_PP2_P2P = Rule(
    id="TRC303",
    name="vpp-pp2-unbatched-p2p",
    summary=(
        "pp=2 with interleaving is emitted with overlapped (unbatched) p2p; batched p2p silently "
        "corrupts training on that layout"
    ),
    severity=Severity.info,
    engines={Engine.fsdp: Severity.na},
    source="validate_args overlap_p2p_comm; batched p2p measured on CPU (docs/divergences.md)",
)

DS_ZERO_PP = Rule(
    id="TRC304",
    name="deepspeed-zero-pp",
    summary="DeepSpeed ZeRO-2/3 is incompatible with pipeline parallelism",
    engines={
        Engine.deepspeed: Severity.error,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.na,
    },
    source="DeepSpeed runtime/pipe/engine.py PipelineEngine.__init__ (ZeRO-2/3 assertion)",
)

OFFLOAD_PARAM_STAGE = Rule(
    id="TRC305",
    name="offload-param-needs-zero3",
    summary="offload_param needs DeepSpeed ZeRO stage 3",
    engines={
        Engine.deepspeed: Severity.error,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.na,
    },
    source="DeepSpeed runtime/zero/config.py DeepSpeedZeroConfig",
)

OFFLOAD_ENGINE = Rule(
    id="TRC306",
    name="offload-needs-deepspeed",
    summary="optimizer/parameter offload needs engine=deepspeed",
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.error,
    },
    source="trainc emitters",
)

MEGATRON_ZERO = Rule(
    id="TRC307",
    name="megatron-zero-stage",
    summary=(
        "engine=megatron supports zero_stage 0 (DDP), 1 (distributed optimizer) and 3 "
        "(Megatron-FSDP, optim_grads_params)"
    ),
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.error,
    },
    source="validate_args / megatron/core/optimizer/distrib_optimizer.py",
)

RECOMPUTE_ARGS = Rule(
    id="TRC308",
    name="recompute-method-args",
    summary="recompute_method/recompute_num_layers belong to recompute=full only",
    source="TransformerConfig.__post_init__ / validate_args recompute checks",
)

RECOMPUTE_LAYERS = Rule(
    id="TRC309",
    name="recompute-num-layers-range",
    summary="recompute_num_layers must be in [1, layers per pipeline stage chunk]",
    source="TransformerConfig.__post_init__ recompute_num_layers checks",
)

WINDOW_ATTENTION = Rule(
    id="TRC310",
    name="window-attention-range",
    summary=(
        "sliding-window attention: window_size in [1, seq_length - 2] (a window of "
        "seq_length - 1 keys or more is full causal attention), window_attn_skip_freq >= 1 and "
        "only with window_size"
    ),
    source=(
        "megatron-core 0.16.1 transformer/utils.py get_sliding_window_causal_mask and "
        "is_layer_window_attention (layer_number % window_attn_skip_freq)"
    ),
)

EP_NEEDS_MOE = Rule(
    id="TRC312",
    name="ep-needs-experts",
    summary="ep > 1 or etp != tp needs num_experts",
    source="validate_args (ep > 1 needs num_experts)",
)

DS_UNSUPPORTED_AXIS = Rule(
    id="TRC313",
    name="runner-axes",
    summary=(
        "the runner of the spec (engine x launch.entrypoint) must split every axis above 1 "
        "(trainc/capabilities.py: the trainc worker on DeepSpeed or FSDP2 splits tp and dp only)"
    ),
    source="trainc/capabilities.py (the runners' axes)",
)

MOE_LAYER_FREQ = Rule(
    id="TRC315",
    name="moe-layer-freq-range",
    summary="moe_layer_freq must be in [1, num_layers]",
    source="models/gpt/gpt_layer_specs.py get_gpt_decoder_layer_specs moe_layer_freq pattern",
)

MLA_SETTINGS = Rule(
    id="TRC316",
    name="mla-settings",
    summary=(
        "multi-head latent attention has no grouped-query attention (every head keeps its own key "
        "and value), rotates qk_pos_emb_head_dim channels with RoPE (an even count, rope "
        "positions) and is built by Megatron-Core (engine=megatron or deepspeed)"
    ),
    engines={
        Engine.deepspeed: Severity.error,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.error,
    },
    source=(
        "megatron/core/transformer/transformer_config.py MLATransformerConfig (0.16.1); "
        "training.py num_floating_point_operations asserts not group_query_attention"
    ),
)

LR_RANGE = Rule(
    id="TRC318",
    name="min-lr-le-lr",
    summary="min_lr must not exceed lr",
    source="learning-rate schedule",
)

FP16_CPU = Rule(
    id="TRC319",
    name="precision-on-device",
    summary="fp16 does not run on the CPU device (use bf16 or fp32)",
    source="CPU (gloo) execution",
)

OFFLOAD_OPTIMIZER_STAGE = Rule(
    id="TRC320",
    name="offload-optimizer-needs-zero",
    summary="offload_optimizer needs DeepSpeed ZeRO stage 1-3",
    engines={
        Engine.deepspeed: Severity.error,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.na,
    },
    source="DeepSpeed runtime/engine.py zero_use_cpu_optimizer (ignores the stage)",
)

NVME_PATH = Rule(
    id="TRC321",
    name="nvme-path-required",
    summary="nvme offload needs training.nvme_path",
    engines={
        Engine.deepspeed: Severity.error,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.na,
    },
    source="DeepSpeed runtime/zero/offload_config.py nvme_path (default None)",
)

DS_LR_SHIFTED = Rule(
    id="TRC317",
    name="deepspeed-lr-schedule-shifted",
    summary=(
        "DeepSpeed's scheduler runs the spec's warm-up or cosine schedule shifted against "
        "Megatron-Core's (the first step at lr 0; a cosine after a warm-up never reaches the peak)"
    ),
    severity=Severity.warning,
    engines={Engine.fsdp: Severity.na, Engine.megatron: Severity.na},
    source=(
        "deepspeed/runtime/lr_schedules.py (0.19.8) WarmupCosineLR.get_lr_ratio (real_last_step = "
        "it - warmup + 1), _initialize_lr (iteration -1); "
        "megatron/core/optimizer_param_scheduler.py get_lr (0.16.1)"
    ),
)

LR_SCHEDULE_ENGINE = Rule(
    id="TRC323",
    name="lr-schedule-supported",
    summary=(
        "the learning-rate schedule must be one the engine honours exactly (DeepSpeed: constant, "
        "cosine, linear without both a warm-up and a min_lr), and its steps must be consistent"
    ),
    source=(
        "deepspeed/runtime/lr_schedules.py (0.19.8) WarmupLR, WarmupDecayLR, WarmupCosineLR; "
        "megatron/core/optimizer_param_scheduler.py OptimizerParamScheduler.__init__ asserts "
        "(0.16.1)"
    ),
)

DDP_OVERLAP = Rule(
    id="TRC324",
    name="ddp-overlap-args",
    summary=(
        "overlap_param_gather needs the distributed optimizer and overlap_grad_reduce; both are "
        "Megatron-Core DDP settings (engine=megatron)"
    ),
    source="megatron/training/arguments.py::validate_args overlap checks (core_v0.19.0)",
)

ENTRYPOINT_RUNS = Rule(
    id="TRC325",
    name="entrypoint-runs-spec",
    summary=(
        "launch.entrypoint megatron-lm runs engine=megatron, torchtitan runs engine=fsdp, both on "
        "CUDA only"
    ),
    source=(
        "trainc.capabilities (pretrain_gpt.py needs CUDA and Megatron; torchtitan 0.3.0 trains on "
        "CUDA)"
    ),
)

MOE_CAPACITY_BALANCING = Rule(
    id="TRC326",
    name="moe-capacity-needs-aux-balancing",
    summary=(
        "moe_expert_capacity_factor works only with aux_loss, seq_aux_loss, global_aux_loss or "
        "none load balancing"
    ),
    engines={Engine.fsdp: Severity.na},
    source=(
        "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ (0.16.1)"
    ),
)

MOE_CAPACITY_DISPATCHER = Rule(
    id="TRC390",
    name="moe-capacity-needs-alltoall",
    summary=(
        "moe_expert_capacity_factor needs the alltoall token dispatcher on Megatron-Core before "
        "0.12.0 (TransformerConfig raises for allgather)"
    ),
    engines={Engine.fsdp: Severity.na},
    source=(
        "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ "
        "(core_v0.11.0: 'moe_expert_capacity_factor only works with alltoall token dispatcher'; "
        "the check is gone from core_v0.12.0, NVIDIA/Megatron-LM commit 0d389f5 'Integration of "
        "Deepseek DeepEP kernel'); NVIDIA/Megatron-LM#1277"
    ),
)

SHARED_EXPERT_TP = Rule(
    id="TRC327",
    name="shared-expert-divisible-by-tp",
    summary=(
        "moe_shared_expert_intermediate_size must be a multiple of tp (the shared expert MLP is "
        "split over the tensor-parallel group)"
    ),
    engines={Engine.fsdp: Severity.na},
    source=(
        "megatron/core/transformer/moe/shared_experts.py SharedExpertMLP (0.16.1): '... is not "
        "divisible by' at model build"
    ),
)

MOE_TOP1_PRE_SOFTMAX = Rule(
    id="TRC328",
    name="moe-top1-needs-pre-softmax",
    summary=(
        "a top-1 softmax router needs moe_router_pre_softmax (a softmax over one score is constant)"
    ),
    engines={Engine.fsdp: Severity.na},
    source=(
        "megatron/core/transformer/transformer_config.py TransformerConfig.__post_init__ (0.16.1): "
        "'Please use --moe-router-pre-softmax when topk is 1.'"
    ),
)

SETTING_WITHOUT_EFFECT = Rule(
    id="TRC329",
    name="setting-without-effect",
    summary=(
        "a key set to a non-default value that the rest of the spec makes inert (Adam betas with "
        "sgd, WSD keys with another schedule, RoPE keys with learned positions, router keys on a "
        "dense model, a data split without data)"
    ),
    severity=Severity.warning,
    source="trainc: what each engine reads (docs/engines.md)",
)

LOW_PRECISION_RUNNER = Rule(
    id="TRC330",
    name="low-precision-runner",
    summary=(
        "FP8 / FP4 GEMMs and a precision-aware optimizer need Transformer Engine on CUDA: "
        "engine=megatron with launch.device=cuda"
    ),
    source=(
        "megatron-core 0.16.1 transformer_config.py / optimizer_config.py (Transformer Engine "
        "FusedAdam); trainc capabilities"
    ),
)

FP8_FP4_COMBINATION = Rule(
    id="TRC331",
    name="fp8-fp4-combination",
    summary=(
        "fp8 and fp4 are exclusive; fp8_param_gather needs fp8_format and the distributed optimizer"
    ),
    source="megatron-core 0.16.1 TransformerConfig.__post_init__ (fp8_param, fp4 vs fp8)",
)

OPTIMIZER_STATE_PRECISION = Rule(
    id="TRC332",
    name="optimizer-state-precision",
    summary=(
        "optimizer buffers below fp32 need adam and the distributed optimizer (Megatron-Core "
        "precision-aware optimizer), in the dtypes Megatron-LM accepts for each buffer"
    ),
    source=(
        "megatron-core 0.16.1 OptimizerConfig.__post_init__; Megatron-LM arguments.py "
        "--main-grads-dtype, --main-params-dtype, --exp-avg(-sq)-dtype"
    ),
)

PRETRAIN_RECIPE = Rule(
    id="TRC333",
    name="pretraining-recipe",
    summary=(
        "pre-training a model of 1B parameters or more on CUDA should warm the learning rate up "
        "and run Adam with beta2 below 0.999 (0.95), as the published recipes do"
    ),
    severity=Severity.warning,
    source=(
        "Llama 2, arXiv 2307.09288 section 2.2 (AdamW beta2 0.95, 2,000 warm-up steps); GPT-3, "
        "arXiv 2005.14165 appendix B; OPT, arXiv 2205.01068 section 2.2"
    ),
)

MOE_ROUTER_SETTINGS = Rule(
    id="TRC384",
    name="moe-router-settings",
    summary=(
        "group-limited routing needs moe_router_num_groups and moe_router_group_topk together, "
        "groups that divide num_experts, group_topk <= num_groups and <= topk, and picked groups "
        "that hold topk experts; the expert bias needs sigmoid scores; dense first layers leave at "
        "least one MoE layer (Megatron-Core TransformerConfig.__post_init__)"
    ),
    source=(
        "megatron-core 0.16.1 transformer/transformer_config.py TransformerConfig.__post_init__ "
        "(moe_router_group_topk / moe_router_num_groups asserts; moe_router_enable_expert_bias "
        "needs moe_router_score_function sigmoid); transformer/moe/moe_utils.py group_limited_topk "
        "(topk // group_topk per group)"
    ),
)

MOE_NO_LOAD_BALANCING = Rule(
    id="TRC385",
    name="moe-no-load-balancing",
    summary=(
        "an MoE model trained with no load balancing (no auxiliary loss and no expert bias) routes "
        "most tokens to a few experts (routing collapse)"
    ),
    severity=Severity.warning,
    source=(
        "Megatron-Core MoE docs (megatron/core/transformer/moe/README.md, core_v0.16.1: "
        "--moe-router-load-balancing-type aux_loss with --moe-aux-loss-coeff 1e-2 recommended; "
        "--moe-router-enable-expert-bias for aux-loss-free balancing); arXiv:2101.03961 §2.2 "
        "(Switch), arXiv:2408.15664 (aux-loss-free)"
    ),
)

MEGATRON_ONLY_MODEL_KEY = Rule(
    id="TRC386",
    name="megatron-only-model-key",
    summary=(
        "dense first layers, multi-token prediction, group-limited routing and the expert bias are "
        "built by Megatron-LM / Megatron-Core only: engine=deepspeed and engine=fsdp cannot "
        "express them, and multi-token prediction needs entrypoint megatron-lm (the trainc worker "
        "builds no MTP block)"
    ),
    engines={
        Engine.deepspeed: Severity.error,
        Engine.fsdp: Severity.error,
        Engine.megatron: Severity.error,
    },
    source=(
        "Megatron-LM core_r0.16.0 megatron/training/arguments.py (--moe-layer-freq, "
        "--mtp-num-layers, --moe-router-num-groups, --moe-router-group-topk, "
        "--moe-router-enable-expert-bias); megatron-core 0.16.1 models/gpt/gpt_model.py GPTModel "
        "(mtp_block_spec); trainc: what each engine builds (docs/engines.md)"
    ),
)

FP4_ALL_LAYERS = Rule(
    id="TRC387",
    name="fp4-all-layers",
    summary=(
        "fp4_format on every layer: NVIDIA's NVFP4 pre-training recipes keep the first and last "
        "layers in BF16 (first_last_layers_bf16), and all-NVFP4 runs lose accuracy"
    ),
    severity=Severity.warning,
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.warning,
    },
    source=(
        "arXiv:2509.25149 (Pretraining LLMs with NVFP4: the last ~15 % of layers in BF16); "
        "Megatron-Bridge PR 1347 (Llama-3-8B NVFP4 recipe keeps the last 4 layers in BF16); "
        "Megatron-LM --first-last-layers-bf16"
    ),
)

TP_COMM_OVERLAP = Rule(
    id="TRC380",
    name="tp-comm-overlap",
    summary=(
        "tp_comm_overlap needs engine=megatron on CUDA (Transformer Engine userbuffers) and tp > 1 "
        "with sequence_parallel (Megatron-LM validate_args)"
    ),
    source=(
        "Megatron-LM megatron/training/arguments.py validate_args (--tp-comm-overlap needs "
        "--sequence-parallel); megatron-core 0.16.1 extensions/transformer_engine.py (userbuffers: "
        "Transformer Engine on CUDA)"
    ),
)

TP_COMM_OVERLAP_DOMAIN = Rule(
    id="TRC382",
    name="tp-comm-overlap-domain",
    summary=(
        "tp_comm_overlap runs in Transformer Engine's userbuffers over NVLink peer memory (CUDA "
        "multicast / IPC handles): a TP group wider than the NVLink domain, or cut by it, cannot "
        "run it (tensor parallelism inside one domain only)"
    ),
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.error,
    },
    source=(
        "Transformer Engine userbuffers (transformer_engine/pytorch/module/base.py initialize_ub: "
        "intra-domain NVLink peer-memory communicators); NVIDIA/TransformerEngine#1071 (comm+GEMM "
        "overlap supports single-node tensor parallelism only: Userbuffers relies on CUDA "
        "multicast handles within an NVLink domain)"
    ),
)

MOE_A2A_OVERLAP = Rule(
    id="TRC381",
    name="moe-a2a-overlap",
    summary=(
        "overlap_moe_expert_parallel_comm needs engine=megatron on CUDA, ep > 1, the alltoall or "
        "flex dispatcher, no full recompute, bf16/fp16 and vpp > 1 when pp > 1 (Megatron-Core "
        "TransformerConfig.__post_init__)"
    ),
    source=(
        "megatron-core 0.16.1 transformer/transformer_config.py TransformerConfig.__post_init__ "
        "(overlap_moe_expert_parallel_comm checks)"
    ),
)

MEGATRON_FSDP = Rule(
    id="TRC383",
    name="megatron-fsdp",
    summary=(
        "Megatron-FSDP (zero_stage 3 on engine=megatron) saves fsdp_dtensor checkpoints only, "
        "always overlaps its DP collectives, and runs in Megatron-LM on CUDA (the trainc worker "
        "runs its math on CPU only)"
    ),
    engines={
        Engine.deepspeed: Severity.na,
        Engine.fsdp: Severity.na,
        Engine.megatron: Severity.error,
    },
    source=(
        "Megatron-LM core_v0.16.1 megatron/training/arguments.py validate_args (use_megatron_fsdp: "
        "ckpt_format fsdp_dtensor); "
        "megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py MegatronFSDP.__init__ "
        "(overlaps forced on)"
    ),
)

#: the family: its id ranges and, explicitly, its rules
COMPATIBILITY = Family(
    name="compatibility",
    ids=(range(300, 340), range(380, 400)),
    about="feature combinations the engines reject or mishandle",
    rules=(
        SP_NEEDS_TP,
        MOE_TP_SP,
        VPP_PP2_P2P,
        DS_ZERO_PP,
        OFFLOAD_PARAM_STAGE,
        OFFLOAD_ENGINE,
        MEGATRON_ZERO,
        RECOMPUTE_ARGS,
        RECOMPUTE_LAYERS,
        WINDOW_ATTENTION,
        EP_NEEDS_MOE,
        DS_UNSUPPORTED_AXIS,
        MOE_LAYER_FREQ,
        MLA_SETTINGS,
        LR_RANGE,
        FP16_CPU,
        OFFLOAD_OPTIMIZER_STAGE,
        NVME_PATH,
        DS_LR_SHIFTED,
        LR_SCHEDULE_ENGINE,
        DDP_OVERLAP,
        ENTRYPOINT_RUNS,
        MOE_CAPACITY_BALANCING,
        MOE_CAPACITY_DISPATCHER,
        SHARED_EXPERT_TP,
        MOE_TOP1_PRE_SOFTMAX,
        SETTING_WITHOUT_EFFECT,
        LOW_PRECISION_RUNNER,
        FP8_FP4_COMBINATION,
        OPTIMIZER_STATE_PRECISION,
        PRETRAIN_RECIPE,
        MOE_ROUTER_SETTINGS,
        MOE_NO_LOAD_BALANCING,
        MEGATRON_ONLY_MODEL_KEY,
        FP4_ALL_LAYERS,
        TP_COMM_OVERLAP,
        TP_COMM_OVERLAP_DOMAIN,
        MOE_A2A_OVERLAP,
        MEGATRON_FSDP,
    ),
)
