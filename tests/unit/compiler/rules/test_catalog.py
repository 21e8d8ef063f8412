"""Every rule of the catalog has a reject case and an allow case, asserted as data (rule id, key).

The allow case differs from the reject case only in the field(s) the rule is about, so the pair
pins the rule's boundary. TRC4xx (resource fit) rules are tested with the estimates.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.kit import find, lint_cfg
from trainc.compiler import rules as R
from trainc.compiler.load import load_spec
from trainc.schemas import Engine

MOE = {"model.num_experts": 8, "model.moe_router_topk": 2}
DS = {"engine": "deepspeed"}
H100_FP8 = {"training.fp8_format": "hybrid", "cluster.gpu": "h100-80g"}
BIG = {"model.num_layers": 32, "model.hidden_size": 8192}
FSDP = {"engine": "fsdp", "parallel.pp": 1}  # tp2 x dp4 on 8 GPUs
#: 20 GB200 NVL72 trays (4 GPUs each, 18 per 72-GPU NVLink domain)
NVL72 = {
    "cluster.gpu": "gb200",
    "cluster.gpus_per_node": 4,
    "cluster.nvlink_domain_size": 72,
    "cluster.num_nodes": 20,
    "parallel.pp": 1,
}
#: pretrain_gpt.py on CUDA (Transformer Engine attention)
LM = {"launch.entrypoint": "megatron-lm", "launch.megatron_lm_path": "/opt/Megatron-LM"}
PACKED_CP = {"data.packed": True, "parallel.cp": 2, "parallel.pp": 1}

# rule id -> (changes that trigger it, changes that do not, expected key)
SPEC_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "TRC006": ({"parallel.tp": 0}, {"parallel.tp": 1}, "parallel.tp"),
    "TRC101": ({"parallel.pp": 3}, {"parallel.pp": 4}, "parallel.pp"),
    "TRC102": ({"parallel.dp": 1}, {"parallel.dp": 2}, "parallel.dp"),
    "TRC103": (
        {**MOE, "parallel.ep": 2, "parallel.dp": 1},
        {**MOE, "parallel.ep": 2, "parallel.dp": 2},
        "parallel.dp",
    ),
    "TRC104": ({**MOE, "parallel.ep": 8}, {**MOE, "parallel.ep": 2}, "parallel.ep"),
    "TRC105": (
        {"cluster.num_nodes": 2, "cluster.gpus_per_node": 4, "parallel.tp": 8, "parallel.pp": 1},
        {"cluster.num_nodes": 2, "cluster.gpus_per_node": 4, "parallel.tp": 4, "parallel.pp": 2},
        "parallel.tp",
    ),
    "TRC106": (
        {"cluster.nvlink_domain_size": 2, "parallel.cp": 2, "parallel.pp": 1},
        {"cluster.nvlink_domain_size": 4, "parallel.cp": 2, "parallel.pp": 1},
        "parallel.cp",
    ),
    "TRC107": (
        {
            **MOE,
            "cluster.nvlink_domain_size": 4,
            "parallel.tp": 1,
            "parallel.pp": 1,
            "parallel.ep": 8,
        },
        {
            **MOE,
            "cluster.nvlink_domain_size": 4,
            "parallel.tp": 1,
            "parallel.pp": 1,
            "parallel.ep": 4,
        },
        "parallel.ep",
    ),
    "TRC108": ({"parallel.dp": 8}, {"parallel.dp": 2}, "parallel.dp"),
    "TRC109": ({"cluster.clock_cap": 1.2}, {"cluster.clock_cap": 0.85}, "cluster.clock_cap"),
    "TRC201": (
        {
            "model.num_attention_heads": 12,
            "model.num_query_groups": 12,
            "model.hidden_size": 768,
            "parallel.tp": 8,
            "parallel.pp": 1,
        },
        {
            "model.num_attention_heads": 12,
            "model.num_query_groups": 12,
            "model.hidden_size": 768,
            "parallel.tp": 4,
            "parallel.pp": 1,
        },
        "parallel.tp",
    ),
    "TRC202": (
        {"model.num_attention_heads": 12, "model.num_query_groups": 3, "model.hidden_size": 768},
        {"model.num_attention_heads": 12, "model.num_query_groups": 6, "model.hidden_size": 768},
        "parallel.tp",
    ),
    "TRC203": ({"model.ffn_hidden_size": 2049}, {"model.ffn_hidden_size": 2050}, "parallel.tp"),
    "TRC204": (
        {**MOE, "model.moe_ffn_hidden_size": 1025},
        {**MOE, "model.moe_ffn_hidden_size": 1026},
        "parallel.etp",
    ),
    "TRC205": (
        {**MOE, "model.num_experts": 6, "parallel.pp": 1, "parallel.ep": 4, "parallel.etp": 1},
        {**MOE, "model.num_experts": 8, "parallel.pp": 1, "parallel.ep": 4, "parallel.etp": 1},
        "parallel.ep",
    ),
    "TRC206": (
        {**MOE, "model.num_experts": 4, "model.moe_router_topk": 5},
        {**MOE, "model.num_experts": 4, "model.moe_router_topk": 4},
        "model.moe_router_topk",
    ),
    "TRC207": (
        {"model.num_query_groups": 3, "parallel.tp": 1, "parallel.pp": 1},
        {"model.num_query_groups": 4, "parallel.tp": 1, "parallel.pp": 1},
        "model.num_query_groups",
    ),
    "TRC208": ({"model.hidden_size": 500}, {"model.hidden_size": 504}, "model.hidden_size"),
    "TRC209": ({"model.vocab_size": 32001}, {"model.vocab_size": 32256}, "model.vocab_size"),
    "TRC210": ({"model.num_layers": 9}, {"model.num_layers": 10}, "parallel.pp"),
    "TRC211": ({"parallel.vpp": 3}, {"parallel.vpp": 2}, "parallel.vpp"),
    "TRC212": (
        {"parallel.pipeline_first_stage_layers": 3, "parallel.pipeline_last_stage_layers": 3},
        {"parallel.pipeline_first_stage_layers": 3, "parallel.pipeline_last_stage_layers": 5},
        "parallel.pipeline_first_stage_layers",
    ),
    "TRC213": (
        {"parallel.pp": 1, "parallel.vpp": 2},
        {"parallel.pp": 2, "parallel.vpp": 2},
        "parallel.vpp",
    ),
    "TRC214": (
        {"training.global_batch_size": 15},
        {"training.global_batch_size": 14},
        "training.global_batch_size",
    ),
    "TRC215": (
        {"training.global_batch_size": 2},
        {"training.global_batch_size": 4},
        "training.global_batch_size",
    ),
    "TRC216": (
        {"parallel.vpp": 2, "training.global_batch_size": 6},
        {"parallel.vpp": 2, "training.global_batch_size": 8},
        "training.global_batch_size",
    ),
    "TRC217": (
        {"parallel.cp": 2, "parallel.pp": 1, "model.seq_length": 1026},
        {"parallel.cp": 2, "parallel.pp": 1, "model.seq_length": 1032},
        "model.seq_length",
    ),
    "TRC218": ({"model.seq_length": 1025}, {"model.seq_length": 1026}, "model.seq_length"),
    "TRC219": (
        {"model.max_position_embeddings": 1023},
        {"model.max_position_embeddings": 1024},
        "model.max_position_embeddings",
    ),
    "TRC220": (
        {
            "parallel.tp": 4,
            "parallel.pp": 1,
            "parallel.cp": 2,
            "parallel.cp_comm_type": "a2a",
            "model.num_query_groups": 4,
        },
        {
            "parallel.tp": 4,
            "parallel.pp": 1,
            "parallel.cp": 2,
            "parallel.cp_comm_type": "a2a",
            "model.num_query_groups": 8,
        },
        "parallel.cp_comm_type",
    ),
    "TRC221": ({"model.num_query_groups": 1}, {"model.num_query_groups": 2}, "parallel.tp"),
    "TRC222": (
        {
            "model.hidden_size": 192,
            "model.num_attention_heads": 6,
            "model.num_query_groups": 1,
            "model.ffn_hidden_size": 768,
            "cluster.gpus_per_node": 3,
            "parallel.tp": 3,
            "parallel.pp": 1,
            "training.global_batch_size": 4,
        },
        {
            "model.hidden_size": 288,
            "model.num_attention_heads": 6,
            "model.num_query_groups": 1,
            "model.ffn_hidden_size": 768,
            "cluster.gpus_per_node": 3,
            "parallel.tp": 3,
            "parallel.pp": 1,
            "training.global_batch_size": 4,
        },
        "parallel.tp",
    ),
    "TRC260": (
        {
            "training.recompute": "full",
            "training.recompute_method": "uniform",
            "training.recompute_num_layers": 3,
        },
        {
            "training.recompute": "full",
            "training.recompute_method": "uniform",
            "training.recompute_num_layers": 2,
        },
        "training.recompute_num_layers",
    ),
    "TRC390": (
        {
            **MOE,
            "model.moe_token_dispatcher_type": "allgather",
            "model.moe_expert_capacity_factor": 1.25,
            "launch.versions": {"megatron_core": "0.11.0"},
        },
        {
            **MOE,
            "model.moe_token_dispatcher_type": "allgather",
            "model.moe_expert_capacity_factor": 1.25,
            "launch.versions": {"megatron_core": "0.12.0"},
        },
        "model.moe_expert_capacity_factor",
    ),
    "TRC301": (
        {"parallel.tp": 1, "parallel.sequence_parallel": True},
        {"parallel.tp": 1, "parallel.sequence_parallel": False},
        "parallel.sequence_parallel",
    ),
    "TRC302": (
        {**MOE, "parallel.sequence_parallel": False},
        {**MOE, "parallel.sequence_parallel": True},
        "parallel.sequence_parallel",
    ),
    "TRC303": ({"parallel.vpp": 2}, {"parallel.vpp": 1}, "parallel.vpp"),
    "TRC304": (
        {**DS, "parallel.zero_stage": 2},
        {**DS, "parallel.zero_stage": 1},
        "parallel.zero_stage",
    ),
    "TRC305": (
        {**DS, "parallel.pp": 1, "parallel.zero_stage": 2, "training.offload_param": "cpu"},
        {**DS, "parallel.pp": 1, "parallel.zero_stage": 3, "training.offload_param": "cpu"},
        "training.offload_param",
    ),
    "TRC306": (
        {"training.offload_optimizer": "cpu"},
        {**DS, "parallel.pp": 1, "training.offload_optimizer": "cpu"},
        "training.offload_optimizer",
    ),
    "TRC307": ({"parallel.zero_stage": 2}, {"parallel.zero_stage": 1}, "parallel.zero_stage"),
    "TRC308": (
        {"training.recompute": "selective", "training.recompute_method": "block"},
        {"training.recompute": "full", "training.recompute_method": "block"},
        "training.recompute_method",
    ),
    "TRC309": (
        {"training.recompute": "full", "training.recompute_num_layers": 5},
        {"training.recompute": "full", "training.recompute_num_layers": 4},
        "training.recompute_num_layers",
    ),
    "TRC310": ({"model.window_size": 1023}, {"model.window_size": 1022}, "model.window_size"),
    "TRC312": ({"parallel.ep": 2}, {**MOE, "parallel.ep": 2}, "parallel.ep"),
    "TRC313": ({**DS, "parallel.pp": 2}, {**DS, "parallel.pp": 1}, "parallel.pp"),
    "TRC315": (
        {**MOE, "model.moe_layer_freq": 9},
        {**MOE, "model.moe_layer_freq": 8},
        "model.moe_layer_freq",
    ),
    "TRC316": (
        {"model.multi_latent_attention": True, "model.num_query_groups": 2},
        {"model.multi_latent_attention": True},
        "model.num_query_groups",
    ),
    "TRC318": ({"training.min_lr": 1.0}, {"training.min_lr": 3.0e-4}, "training.min_lr"),
    "TRC319": (
        {"launch.device": "cpu", "training.precision": "fp16"},
        {"launch.device": "cpu", "training.precision": "bf16"},
        "training.precision",
    ),
    "TRC320": (
        {**DS, "parallel.pp": 1, "parallel.zero_stage": 0, "training.offload_optimizer": "cpu"},
        {**DS, "parallel.pp": 1, "parallel.zero_stage": 1, "training.offload_optimizer": "cpu"},
        "training.offload_optimizer",
    ),
    "TRC321": (
        {**DS, "parallel.pp": 1, "training.offload_optimizer": "nvme"},
        {
            **DS,
            "parallel.pp": 1,
            "training.offload_optimizer": "nvme",
            "training.nvme_path": "/local/nvme",
        },
        "training.nvme_path",
    ),
    "TRC317": (
        {**DS, "parallel.pp": 1, "training.lr_decay_style": "cosine"},
        {
            **DS,
            "parallel.pp": 1,
            "training.lr_decay_style": "constant",
            "training.lr_warmup_iters": 0,
        },
        "training.lr_decay_style",
    ),
    "TRC323": (
        {**DS, "parallel.pp": 1, "training.lr_decay_style": "WSD"},
        {**DS, "parallel.pp": 1, "training.lr_decay_style": "cosine"},
        "training.lr_decay_style",
    ),
    "TRC324": (
        {"training.overlap_param_gather": True, "training.overlap_grad_reduce": False},
        {"training.overlap_param_gather": True, "training.overlap_grad_reduce": True},
        "training.overlap_param_gather",
    ),
    "TRC325": (
        {
            "launch.entrypoint": "megatron-lm",
            "launch.megatron_lm_path": "/opt/M",
            "launch.device": "cpu",
        },
        {
            "launch.entrypoint": "megatron-lm",
            "launch.megatron_lm_path": "/opt/M",
            "launch.device": "cuda",
        },
        "launch.device",
    ),
    "TRC326": (
        {
            **MOE,
            "model.moe_expert_capacity_factor": 1.0,
            "model.moe_router_load_balancing_type": "sinkhorn",
        },
        {
            **MOE,
            "model.moe_expert_capacity_factor": 1.0,
            "model.moe_router_load_balancing_type": "aux_loss",
        },
        "model.moe_expert_capacity_factor",
    ),
    "TRC327": (
        {
            **MOE,
            "parallel.tp": 4,
            "parallel.pp": 1,
            "model.moe_shared_expert_intermediate_size": 2730,
        },
        {
            **MOE,
            "parallel.tp": 4,
            "parallel.pp": 1,
            "model.moe_shared_expert_intermediate_size": 2732,
        },
        "model.moe_shared_expert_intermediate_size",
    ),
    "TRC328": (
        {**MOE, "model.moe_router_topk": 1, "model.moe_router_pre_softmax": False},
        {**MOE, "model.moe_router_topk": 1, "model.moe_router_pre_softmax": True},
        "model.moe_router_pre_softmax",
    ),
    "TRC329": (
        {"training.optimizer": "sgd", "training.adam_beta2": 0.95},
        {"training.optimizer": "adam", "training.adam_beta2": 0.95},
        "training.adam_beta2",
    ),
    "TRC340": (
        {**FSDP, "fsdp.dp_replicate": 2, "fsdp.dp_shard": 4},
        {**FSDP, "fsdp.dp_replicate": 2, "fsdp.dp_shard": 2},
        "fsdp.dp_shard",
    ),
    "TRC341": (
        {**FSDP, "cluster.num_nodes": 4, "cluster.gpus_per_node": 2, "fsdp.dp_replicate": 2},
        {**FSDP, "cluster.num_nodes": 4, "cluster.gpus_per_node": 2, "fsdp.dp_replicate": 4},
        "fsdp.dp_shard",
    ),
    "TRC346": (FSDP, {**FSDP, "parallel.tp": 1}, "fsdp.reduce_dtype"),
    "TRC342": (
        {**FSDP, "training.precision": "fp16"},
        {**FSDP, "training.precision": "bf16"},
        "training.precision",
    ),
    "TRC343": (
        {"engine": "fsdp", "parallel.vpp": 2, "fsdp.pp_schedule": "1F1B"},
        {"engine": "fsdp", "parallel.vpp": 2, "fsdp.pp_schedule": "ZBVZeroBubble"},
        "fsdp.pp_schedule",
    ),
    "TRC344": (
        {**FSDP, "parallel.zero_stage": 2},
        {**FSDP, "parallel.zero_stage": 1},
        "parallel.zero_stage",
    ),
    "TRC348": (
        {
            **FSDP,
            **MOE,
            "launch.entrypoint": "torchtitan",
            "parallel.tp": 1,
            "fsdp.dp_replicate": 2,
            "parallel.ep": 8,
        },
        {
            **FSDP,
            **MOE,
            "launch.entrypoint": "torchtitan",
            "parallel.tp": 1,
            "fsdp.dp_replicate": 2,
            "parallel.ep": 4,
        },
        "parallel.ep",
    ),
    "TRC330": (
        {"training.fp8_format": "hybrid", "launch.device": "cpu"},
        {"training.fp8_format": "hybrid", "launch.device": "cuda"},
        "training.fp8_format",
    ),
    "TRC331": (
        {"training.fp8_format": "e4m3", "training.fp4_format": "e2m1"},
        {"training.fp8_format": "e4m3"},
        "training.fp4_format",
    ),
    "TRC332": (
        {"training.exp_avg_dtype": "bf16", "parallel.zero_stage": 0},
        {"training.exp_avg_dtype": "bf16", "parallel.zero_stage": 1},
        "training.exp_avg_dtype",
    ),
    "TRC333": (
        {
            "model.num_layers": 32,
            "model.hidden_size": 4096,
            "model.num_attention_heads": 32,
            "model.num_query_groups": 32,
            "model.ffn_hidden_size": 11008,
            "training.lr_warmup_iters": 100,
        },
        {
            "model.num_layers": 32,
            "model.hidden_size": 4096,
            "model.num_attention_heads": 32,
            "model.num_query_groups": 32,
            "model.ffn_hidden_size": 11008,
            "training.lr_warmup_iters": 100,
            "training.adam_beta2": 0.95,
        },
        "training.adam_beta2",
    ),
    "TRC370": (
        {
            "training.fp8_format": "hybrid",
            "training.fp8_recipe": "mxfp8",
            "cluster.gpu": "h100-80g",
        },
        {"training.fp8_format": "hybrid", "training.fp8_recipe": "mxfp8", "cluster.gpu": "b200"},
        "training.fp8_recipe",
    ),
    "TRC371": (
        {**H100_FP8, "model.ffn_hidden_size": 2056},
        {**H100_FP8, "model.ffn_hidden_size": 2080},
        "parallel.tp",
    ),
    "TRC372": (
        {**H100_FP8, "training.first_last_layers_bf16": True},
        {**H100_FP8, "training.first_last_layers_bf16": True, "training.fp8_recipe": "tensorwise"},
        "training.first_last_layers_bf16",
    ),
    "TRC373": (
        {
            **MOE,
            "model.add_bias_linear": True,
            "parallel.etp": 2,
            "parallel.sequence_parallel": True,
        },
        {
            **MOE,
            "model.add_bias_linear": True,
            "parallel.etp": 1,
            "parallel.sequence_parallel": True,
        },
        "model.add_bias_linear",
    ),
    "TRC374": (
        {"training.fp8_format": "hybrid", "training.fp8_recipe": "mxfp8", "cluster.gpu": "b200"},
        {"training.fp8_format": "e4m3", "training.fp8_recipe": "mxfp8", "cluster.gpu": "b200"},
        "training.fp8_format",
    ),
    "TRC378": (
        {
            **MOE,
            "model.moe_token_dispatcher_type": "flex",
            "parallel.tp": 1,
            "parallel.pp": 1,
            "parallel.ep": 8,
        },
        {
            **MOE,
            "model.moe_token_dispatcher_type": "flex",
            "parallel.tp": 1,
            "parallel.pp": 1,
            "parallel.ep": 8,
            "cluster.gpus_per_node": 4,
            "cluster.num_nodes": 2,
        },
        "model.moe_token_dispatcher_type",
    ),
    "TRC379": (
        {"training.fp8_format": "e4m3", "training.fp8_recipe": "mxfp8", "cluster.gpu": "b200"},
        {
            "training.fp8_format": "e4m3",
            "training.fp8_recipe": "mxfp8",
            "cluster.gpu": "b200",
            "training.fp8_param_gather": True,
            "parallel.zero_stage": 1,
        },
        "training.fp8_param_gather",
    ),
    "TRC375": (
        {**MOE, "model.moe_token_dispatcher_type": "flex", "parallel.tp": 1, "parallel.pp": 1},
        {
            **MOE,
            "model.moe_token_dispatcher_type": "flex",
            "parallel.tp": 1,
            "parallel.pp": 1,
            "parallel.ep": 8,
        },
        "model.moe_token_dispatcher_type",
    ),
    "TRC380": (
        {"training.tp_comm_overlap": True, "parallel.sequence_parallel": False},
        {"training.tp_comm_overlap": True, "parallel.sequence_parallel": True},
        "training.tp_comm_overlap",
    ),
    "TRC382": (
        {
            "training.tp_comm_overlap": True,
            "parallel.sequence_parallel": True,
            "cluster.gpus_per_node": 4,
            "cluster.num_nodes": 2,
            "parallel.tp": 8,
            "parallel.pp": 1,
        },
        {
            "training.tp_comm_overlap": True,
            "parallel.sequence_parallel": True,
            "cluster.gpus_per_node": 4,
            "cluster.num_nodes": 2,
            "parallel.tp": 4,
            "parallel.pp": 1,
        },
        "training.tp_comm_overlap",
    ),
    "TRC383": (
        {"parallel.zero_stage": 3, "training.overlap_grad_reduce": False, "launch.device": "cpu"},
        {"parallel.zero_stage": 3, "launch.device": "cpu"},
        "training.overlap_grad_reduce",
    ),
    "TRC381": (
        {**MOE, "parallel.ep": 2, "training.overlap_moe_expert_parallel_comm": True},
        {
            **MOE,
            "parallel.ep": 2,
            "parallel.pp": 1,
            "training.overlap_moe_expert_parallel_comm": True,
        },
        "training.overlap_moe_expert_parallel_comm",
    ),
    "TRC384": (
        {**MOE, "model.moe_router_num_groups": 3, "model.moe_router_group_topk": 1},
        {**MOE, "model.moe_router_num_groups": 4, "model.moe_router_group_topk": 2},
        "model.moe_router_num_groups",
    ),
    "TRC385": (
        {**MOE, "model.moe_router_load_balancing_type": "none"},
        {**MOE, "model.moe_aux_loss_coeff": 0.01},
        "model.moe_aux_loss_coeff",
    ),
    "TRC386": (
        {**MOE, **DS, "model.moe_first_k_dense_layers": 2},
        {**MOE, "model.moe_first_k_dense_layers": 2},
        "model.moe_first_k_dense_layers",
    ),
    "TRC376": (
        {**MOE, "model.moe_pad_expert_input_to_capacity": True},
        {
            **MOE,
            "model.moe_pad_expert_input_to_capacity": True,
            "model.moe_expert_capacity_factor": 1.0,
        },
        "model.moe_pad_expert_input_to_capacity",
    ),
    "TRC377": (
        {
            **MOE,
            "model.moe_router_padding_for_quantization": True,
            "parallel.sequence_parallel": True,
        },
        {
            **MOE,
            **H100_FP8,
            "model.moe_router_padding_for_quantization": True,
            "parallel.sequence_parallel": True,
        },
        "model.moe_router_padding_for_quantization",
    ),
    "TRC512": (
        {"launch.data_split": "969,30"},
        {"launch.data_split": "98,1,1"},
        "launch.data_split",
    ),
    "TRC003": (
        {"cluster.gpu": "custom", "cluster.gpu_memory_gib": None},
        {
            "cluster.gpu": "custom",
            "cluster.gpu_memory_gib": 80.0,
            "cluster.peak_tflops": 100.0,
            "cluster.intra_node_bandwidth_gbps": 100.0,
            "cluster.inter_node_bandwidth_gbps": 10.0,
        },
        "cluster.gpu_memory_gib",
    ),
    "TRC009": ({"parallel.tp": 0}, {"parallel.tp": 1}, "parallel.tp"),
    "TRC501": ({"name": "my job!"}, {"name": "my-job_1.0"}, "name"),
    "TRC502": (
        {"launch.time_limit": "4h"},
        {"launch.time_limit": "1-04:00:00"},
        "launch.time_limit",
    ),
    "TRC503": (
        {"launch.entrypoint": "megatron-lm"},
        {"launch.entrypoint": "megatron-lm", "launch.megatron_lm_path": "/opt/Megatron-LM"},
        "launch.megatron_lm_path",
    ),
    "TRC504": (
        {"launch.env": {"BAD-NAME": "1"}},
        {"launch.env": {"GOOD_NAME": "1"}},
        "launch.env.BAD-NAME",
    ),
    "TRC505": (
        {"launch.env": {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}},
        {"launch.env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}},
        "launch.env.CUDA_DEVICE_MAX_CONNECTIONS",
    ),
    "TRC506": (
        {**BIG, "launch.device": "cpu"},
        {**BIG, "launch.device": "cpu", "launch.shrink": True},
        "launch.shrink",
    ),
    "TRC507": (
        {"launch.env": {"CUDA_VISIBLE_DEVICES": "2,3"}},
        {"launch.env": {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}},
        "launch.env.CUDA_VISIBLE_DEVICES",
    ),
    "TRC508": (
        {"cluster.num_nodes": 2, "launch.env": {"NCCL_SOCKET_IFNAME": "lo"}},
        {"cluster.num_nodes": 2, "launch.env": {"NCCL_SOCKET_IFNAME": "ib0"}},
        "launch.env.NCCL_SOCKET_IFNAME",
    ),
    "TRC509": (
        {"launch.env": {"MASTER_ADDR": "localhost"}},
        {"launch.env": {"NCCL_DEBUG": "WARN"}},
        "launch.env.MASTER_ADDR",
    ),
    "TRC510": (
        {"launch.env": {"WANDB_API_KEY": "x"}},
        {"launch.env": {"WANDB_PROJECT": "x"}},
        "launch.env.WANDB_API_KEY",
    ),
    "TRC511": (
        {"launch.partition": "batch\n#SBATCH --qos=high"},
        {"launch.partition": "batch"},
        "launch.partition",
    ),
    "TRC387": (
        {"cluster.gpu": "b200", "training.fp4_format": "e2m1", "training.fp8_recipe": "tensorwise"},
        {
            "cluster.gpu": "b200",
            "training.fp4_format": "e2m1",
            "training.fp8_recipe": "tensorwise",
            "training.first_last_layers_bf16": True,
        },
        "training.fp4_format",
    ),
    "TRC513": (
        {"cluster.num_nodes": 2, "launch.env": {"NCCL_IB_DISABLE": "1"}},
        {"cluster.num_nodes": 2, "launch.env": {"NCCL_IB_DISABLE": "0"}},
        "launch.env.NCCL_IB_DISABLE",
    ),
    "TRC514": (
        {"cluster.max_time_limit": "04:00:00", "launch.time_limit": "06:00:00"},
        {"cluster.max_time_limit": "04:00:00", "launch.time_limit": "240"},
        "launch.time_limit",
    ),
    "TRC520": (
        {**NVL72, "launch.slurm_segment": 8},
        {**NVL72, "launch.slurm_segment": 10},
        "launch.slurm_segment",
    ),
    "TRC350": (
        {"data.paths": ["0.7 /d/web", "/d/code"]},
        {"data.paths": ["0.7 /d/web", "0.3 /d/code"]},
        "data.paths",
    ),
    "TRC351": (
        {"data.tokenizer_vocab_size": 32001},
        {"data.tokenizer_vocab_size": 32000},
        "data.tokenizer_vocab_size",
    ),
    "TRC352": (
        {**PACKED_CP, "data.pad_to_multiple_of": 2},
        {**PACKED_CP, "data.pad_to_multiple_of": 8},
        "data.pad_to_multiple_of",
    ),
    "TRC353": (
        {**LM, "data.reset_attention_mask": True},
        {**LM, "data.reset_attention_mask": False, "data.reset_position_ids": True},
        "data.reset_attention_mask",
    ),
    "TRC356": (
        {"data.packed": True},
        {"data.packed": False, "data.eod_mask_loss": True},
        "data.packed",
    ),
    "TRC358": (
        {"data.paths": ["/d/web"], "data.eod_mask_loss": True},
        {"data.paths": ["/d/web"], "data.eod_mask_loss": False},
        "data.eod_mask_loss",
    ),
    "TRC357": (
        {"data.num_samples": 1000, "training.train_iters": 100},
        {"data.num_samples": 1600, "training.train_iters": 100},
        "training.train_iters",
    ),
    "TRC530": (
        {**MOE, "parallel.ep": 2, "launch.versions": {"nccl": "2.19.3"}},
        {**MOE, "parallel.ep": 2, "launch.versions": {"nccl": "2.20.3"}},
        "launch.versions.nccl",
    ),
    "TRC531": (
        {"launch.versions": {"pytorch": "2.4.0"}},
        {"launch.versions": {"torch": "2.4.0"}},
        "launch.versions.pytorch",
    ),
    "TRC532": (
        {"launch.versions": {"megatron_core": "0.12.0"}},
        {"launch.versions": {"megatron_core": "0.16.1"}},
        "launch.versions.megatron_core",
    ),
    "TRC539": (
        {
            "launch.container_image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "launch.versions": {"torch": "2.6.0"},
        },
        {
            "launch.container_image": "nvcr.io/nvidia/pytorch:24.05-py3",
            "launch.versions": {"torch": "2.4.0"},
        },
        "launch.versions.torch",
    ),
    "TRC540": (
        {**MOE, "parallel.tp": 1, "parallel.ep": 1, "parallel.etp": 2},
        {
            **MOE,
            "parallel.tp": 1,
            "parallel.ep": 1,
            "parallel.etp": 2,
            "launch.versions": {"megatron_core": "0.19.0"},
        },
        "launch.versions.megatron_core",
    ),
    "TRC533": ({"resume.finetune": True}, {**LM, "resume.finetune": True}, "resume.finetune"),
    "TRC534": ({"resume.saved.tp": 4}, {"resume.saved.tp": 2}, "parallel.tp"),
    "TRC535": (
        {"resume.saved.padded_vocab_size": 32256},
        {"resume.saved.padded_vocab_size": 32000},
        "model.make_vocab_size_divisible_by",
    ),
    "TRC536": ({"resume.saved.num_layers": 12}, {"resume.saved.num_layers": 8}, "model.num_layers"),
    "TRC537": (
        {"resume.saved.global_batch_size": 32},
        {"resume.saved.global_batch_size": 16},
        "training.global_batch_size",
    ),
    "TRC538": (
        {"resume.saved.optimizer": "sgd"},
        {"resume.saved.optimizer": "adam"},
        "training.optimizer",
    ),
    "TRC521": (
        {"launch.k8s_runtime": "Torch_Distributed"},
        {"launch.k8s_runtime": "torch-distributed-v2"},
        "launch.k8s_runtime",
    ),
    "TRC522": (
        {"launch.save_dir": "ckpt/run1"},
        {"launch.save_dir": "/ckpt/run1"},
        "launch.save_dir",
    ),
}

SPEC_YAML = """\
name: loader-case
model:
  num_layers: 8
  hidden_size: 512
  num_attention_heads: 8
  vocab_size: 32000
  seq_length: 1024
cluster:
  num_nodes: 1
  gpu: a100-80g
parallel:
  tp: 2
training:
  global_batch_size: 16
"""

# rule id -> (spec text, overrides) for reject, the same for allow, expected key
LOADER_CASES: dict[str, tuple[tuple[str, list[str]], tuple[str, list[str]], str]] = {
    "TRC000": ((SPEC_YAML + "  bad: [\n", []), (SPEC_YAML, []), "<file>"),
    "TRC001": ((SPEC_YAML.replace("tp: 2", "tp: two"), []), (SPEC_YAML, []), "parallel.tp"),
    "TRC002": ((SPEC_YAML.replace("tp: 2", "tpp: 2"), []), (SPEC_YAML, []), "parallel.tpp"),
    "TRC003": (
        (SPEC_YAML.replace("  num_layers: 8\n", ""), []),
        (SPEC_YAML, []),
        "model.num_layers",
    ),
    "TRC004": ((SPEC_YAML, ["model=llama9"]), (SPEC_YAML, ["model=llama2-7b"]), "model"),
    "TRC005": ((SPEC_YAML, ["parallel.tp=[1"]), (SPEC_YAML, ["parallel.tp=1"]), "<command line>"),
    "TRC007": (
        (SPEC_YAML + "launch:\n  time_limit: 4:00:00\n", []),
        (SPEC_YAML + 'launch:\n  time_limit: "4:00:00"\n', []),
        "launch.time_limit",
    ),
    "TRC008": ((SPEC_YAML + "  lr: .nan\n", []), (SPEC_YAML + "  lr: 1.0e-4\n", []), "training.lr"),
}


def _loader_diags(tmp_path: Path, text: str, overrides: list[str]):
    f = tmp_path / "spec.yaml"
    f.write_text(text)
    return load_spec(f, overrides).diagnostics


@pytest.mark.parametrize("rule_id", sorted(SPEC_CASES))
def test_spec_rule_rejects(rule_id: str) -> None:
    reject, _allow, key = SPEC_CASES[rule_id]
    found = find(lint_cfg(**reject), rule_id)
    assert found, f"{rule_id} not reported for {reject}"
    assert key in {d.key for d in found}, [d.key for d in found]
    for d in found:
        spec_engine = {**reject}.get("engine", "megatron")
        assert d.severity.value == R.RULES_BY_ID[rule_id].severity_for(str(spec_engine))
        if d.is_error:
            assert d.fix, f"{rule_id} error without a fix"
        assert d.facts, f"{rule_id} reports no values (facts)"


@pytest.mark.parametrize("rule_id", sorted(SPEC_CASES))
def test_spec_rule_allows(rule_id: str) -> None:
    _reject, allow, _key = SPEC_CASES[rule_id]
    assert not find(lint_cfg(**allow), rule_id)


@pytest.mark.parametrize("rule_id", sorted(LOADER_CASES))
def test_loader_rule_rejects(rule_id: str, tmp_path: Path) -> None:
    (text, ov), _allow, key = LOADER_CASES[rule_id]
    found = find(_loader_diags(tmp_path, text, ov), rule_id)
    assert found and key in {d.key for d in found}, [(d.rule.id, d.key) for d in found]


@pytest.mark.parametrize("rule_id", sorted(LOADER_CASES))
def test_loader_rule_allows(rule_id: str, tmp_path: Path) -> None:
    _reject, (text, ov), _key = LOADER_CASES[rule_id]
    assert not find(_loader_diags(tmp_path, text, ov), rule_id)


#: Closed vocabularies of the schema (enums): an unknown value is one TRC004 at load time, with
#: a did-you-mean, whichever engine the spec targets.
ENUM_CASES = [
    ("training.optimizer", "adamw", "adam"),
    ("launch.device", "gpu", None),
    ("launch.entrypoint", "megatronlm", "megatron-lm"),
    ("cluster.gpu", "a100-80", "a100-80g"),
    ("training.lr_decay_style", "cosin", "cosine"),
    ("model.moe_router_load_balancing_type", "aux_los", "aux_loss"),
]


@pytest.mark.parametrize(("key", "bad", "suggested"), ENUM_CASES)
@pytest.mark.parametrize("engine", ["megatron", "deepspeed"])
def test_unknown_enum_value_is_one_diagnostic(
    key: str, bad: str, suggested: str | None, engine: str, tmp_path: Path
) -> None:
    diags = _loader_diags(tmp_path, SPEC_YAML, [f"engine={engine}", f"{key}={bad}"])
    assert [(d.rule.id, d.key) for d in diags] == [("TRC004", key)]
    if suggested:
        assert f"did you mean `{suggested}`" in diags[0].message, diags[0].message
    good = _loader_diags(tmp_path, SPEC_YAML, [f"engine={engine}"])
    assert not good


def test_every_rule_has_a_reject_and_an_allow_case() -> None:
    covered = set(SPEC_CASES) | set(LOADER_CASES)
    missing = [r.id for r in R.ALL_RULES if not r.id.startswith("TRC4") and r.id not in covered]
    assert not missing, f"rules without a reject/allow pair: {missing}"


def test_catalog_ids_are_unique_and_well_formed() -> None:
    import re

    for r in R.ALL_RULES:
        assert re.fullmatch(r"TRC\d{3}", r.id)
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r.name)
        assert r.severity in (R.Severity.error, R.Severity.warning, R.Severity.info)
        engines = dict(r.engines)
        assert set(engines) <= set(Engine), (r.id, engines)
        assert set(engines.values()) <= set(R.Severity), (r.id, engines)
        assert r.source, f"{r.id} names no source"
    assert len({r.name for r in R.ALL_RULES}) == len(R.ALL_RULES)
    assert len(R.RULES_BY_ID) == len(R.ALL_RULES), "duplicate rule id"


def test_no_active_id_is_retired() -> None:
    """A retired id (or one published before a rule had it) is never given to a rule."""
    import re

    assert not set(R.RULES_BY_ID) & set(R.RETIRED)
    for rid, why in R.RETIRED.items():
        assert re.fullmatch(r"TRC\d{3}", rid) and why, rid


def test_families_own_disjoint_id_ranges() -> None:
    """Each rule lies in the id ranges of the family that lists it, and no two families share
    an id, so ids cannot collide across families."""
    seen: dict[int, str] = {}
    for f in R.FAMILIES:
        for rng in f.ids:
            for n in rng:
                assert n not in seen, (n, f.name, seen.get(n))
                seen[n] = f.name
        for r in f.rules:
            assert f.owns(r.id) and R.family_of(r) is f, (r.id, f.name)
    assert sorted(r.id for f in R.FAMILIES for r in f.rules) == [r.id for r in R.ALL_RULES]


def test_every_declared_rule_is_listed_in_its_family() -> None:
    """A rule declared in a family module but missing from its family's explicit list would be
    in no catalog: every ``Rule`` the package exposes is in ``ALL_RULES``."""
    import importlib

    for f in R.FAMILIES:
        module = importlib.import_module(f"trainc.compiler.rules.{f.name}")
        declared = {id(v) for v in vars(module).values() if isinstance(v, R.Rule)}
        assert declared == {id(r) for r in f.rules}, f.name
    exposed = {v.id for v in vars(R).values() if isinstance(v, R.Rule)}
    assert exposed == set(R.RULES_BY_ID)


def test_next_free_id_skips_declared_and_retired_ids() -> None:
    """The id a new rule takes is the lowest of its family's first range with room, above the
    range's first declared rule, that no rule has and ``RETIRED`` does not hold (FSDP's skips
    the reserved TRC345). Stated as that property, so adding a rule changes no expectation."""
    for f in R.FAMILIES:
        new = R.next_free_id(f)
        assert f.owns(new) and new not in R.RULES_BY_ID and new not in R.RETIRED, new
        rng = next(r for r in f.ids if int(new[3:]) in r)
        first = min((int(r.id[3:]) for r in f.rules if int(r.id[3:]) in rng), default=rng.start)
        between = {f"TRC{n:03d}" for n in range(first, int(new[3:]))}
        assert between <= set(R.RULES_BY_ID) | set(R.RETIRED), (f.name, new)
    assert R.next_free_id(R.FSDP) > "TRC345"


def test_engine_grades_apply_to_findings() -> None:
    """A rule graded ``n/a`` for an engine reports nothing for it; one graded otherwise takes
    that engine's severity (TRC317 is a DeepSpeed lr-schedule warning, n/a on Megatron)."""
    from trainc.compiler.diagnostics import Severity, diag, for_engine

    rule = R.DS_LR_SHIFTED
    d = diag(rule, "m", "parallel.pp")
    assert for_engine([d], "megatron") == []
    assert [x.severity for x in for_engine([d], "deepspeed")] == [Severity.warning]
    graded = R.Rule(
        id="TRC999",
        name="x",
        summary="s",
        source="a test",
        engines={Engine.deepspeed: R.Severity.warning},
    )
    e = diag(graded, "m", "parallel.tp")
    assert [x.severity for x in for_engine([e], "deepspeed")] == [Severity.warning]
    assert [x.severity for x in for_engine([e], "megatron")] == [Severity.error]
    # a severity the check chose itself is kept
    kept = diag(graded, "m", "parallel.tp", severity=Severity.info)
    assert [x.severity for x in for_engine([kept], "deepspeed")] == [Severity.info]


def test_microbatches_below_pp_is_an_error_with_interleaving() -> None:
    [d] = find(lint_cfg(**{"parallel.vpp": 2, "training.global_batch_size": 2}), "TRC215")
    assert d.is_error and d.key == "training.global_batch_size"
    assert d.edits == {"training.global_batch_size": 4}


def test_fixes_are_valid_alternatives() -> None:
    """Applying a diagnostic's machine-readable edit removes that diagnostic."""
    from tests.support.kit import BASE, apply

    for rule_id, (reject, _allow, key) in sorted(SPEC_CASES.items()):
        cfg = apply(BASE, reject)
        for d in find(lint_cfg(cfg), rule_id):
            if not d.edits or d.key != key:
                continue
            fixed = lint_cfg(apply(cfg, dict(d.edits)))
            assert not [x for x in find(fixed, rule_id) if x.key == key], (rule_id, d.edits)


def test_deepspeed_pipeline_warning_is_retired() -> None:
    """TRC322 (DeepSpeed's PipelineEngine sums micro-batch gradients) is retired: no runner of
    engine=deepspeed splits pp, so it could only stand beside TRC313 (the trainc worker) or
    TRC325 (megatron-lm, torchtitan); its id stays reserved."""
    assert "TRC322" in R.RETIRED and "TRC322" not in R.RULES_BY_ID
    for entrypoint, refusal in (("trainc", "TRC313"), ("megatron-lm", "TRC325")):
        diags = lint_cfg(**DS, **{"parallel.pp": 2, "launch.entrypoint": entrypoint})
        assert find(diags, refusal) and all(d.rule.id != "TRC322" for d in diags), entrypoint


@pytest.mark.parametrize(
    ("rule", "fsdp", "megatron", "deepspeed"),
    [
        (R.ENV_MAX_CONNECTIONS, "warning", "error", "error"),
        (R.DS_ZERO_PP, "n/a", "n/a", "error"),
        (R.OFFLOAD_PARAM_STAGE, "n/a", "n/a", "error"),
        (R.OFFLOAD_OPTIMIZER_STAGE, "n/a", "n/a", "error"),
        (R.NVME_PATH, "n/a", "n/a", "error"),
        (R.OFFLOAD_ENGINE, "n/a", "error", "n/a"),
        (R.MEGATRON_ZERO, "n/a", "error", "n/a"),
        (R.VPP_PP2_P2P, "n/a", "info", "info"),
        (R.MOE_TP_SP, "n/a", "error", "error"),
        (R.MOE_CAPACITY_BALANCING, "n/a", "error", "error"),
        (R.SHARED_EXPERT_TP, "n/a", "error", "error"),
        (R.MOE_TOP1_PRE_SOFTMAX, "n/a", "error", "error"),
        (R.FSDP_UNSUPPORTED, "error", "n/a", "n/a"),
        (R.FSDP_MESH, "error", "n/a", "n/a"),
        (R.DS_UNSUPPORTED_AXIS, "error", "error", "error"),
        (R.SETTING_WITHOUT_EFFECT, "warning", "warning", "warning"),
    ],
)
def test_engine_columns(rule: R.Rule, fsdp: str, megatron: str, deepspeed: str) -> None:
    """The per-engine grades: Megatron-only and DeepSpeed-only rules are n/a for fsdp (the fsdp
    torchrun.sh exports no CUDA_DEVICE_MAX_CONNECTIONS; FSDP2 reads no ZeRO stage)."""
    assert (
        rule.severity_for("fsdp"),
        rule.severity_for("megatron"),
        rule.severity_for("deepspeed"),
    ) == (fsdp, megatron, deepspeed)


def test_max_connections_is_not_checked_for_fsdp() -> None:
    """TRC505 for tp 2 with CUDA_DEVICE_MAX_CONNECTIONS=8: Megatron's error, nothing for fsdp."""
    env = {"launch.env": {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}}
    assert [d.severity.value for d in find(lint_cfg(**env), "TRC505")] == ["error"]
    assert not find(lint_cfg(**FSDP, **env), "TRC505")


def test_max_connections_one_is_a_warning_for_fsdp() -> None:
    """TRC505 for engine=fsdp with CUDA_DEVICE_MAX_CONNECTIONS=1: one hardware queue serializes
    FSDP2's prefetch with compute (verl PR 6976), a warning on the env key; Megatron (tp 2)
    wants exactly that value and gets nothing."""
    env = {"launch.env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}}
    got = find(lint_cfg(**FSDP, **env), "TRC505")
    assert [(d.severity.value, d.key) for d in got] == [
        ("warning", "launch.env.CUDA_DEVICE_MAX_CONNECTIONS")
    ]
    assert "remove launch.env.CUDA_DEVICE_MAX_CONNECTIONS" in (got[0].fix or "")
    assert not find(lint_cfg(**env), "TRC505")


def test_max_connections_one_without_tp_cp_is_a_warning_for_megatron() -> None:
    """TRC505 for engine=megatron with tp = cp = 1 and CUDA_DEVICE_MAX_CONNECTIONS=1: the single
    queue serializes the DP overlap (Megatron-LM issue 1468), a warning; with tp 2 the value is
    what Megatron needs and nothing is reported."""
    env = {"launch.env": {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}}
    got = find(lint_cfg(**env, **{"parallel.tp": 1}), "TRC505")
    assert [(d.severity.value, d.key) for d in got] == [
        ("warning", "launch.env.CUDA_DEVICE_MAX_CONNECTIONS")
    ]
    assert "dp 4" in got[0].message  # the base spec: 8 GPUs, pp 2
    assert not find(lint_cfg(**env, **{"parallel.tp": 2}), "TRC505")


def test_fsdp_tp_reductions_in_bf16_warn_unless_params_are_fp32() -> None:
    """TRC346 (pytorch issue 190626): FSDP2's fp32 reduce_dtype does not reach the TP gradient
    reductions, which sum in the bf16 parameter dtype: a warning with tp 2 and bf16 params, none
    with fp32 params (the TP reductions are then fp32) or without TP."""
    got = find(lint_cfg(**FSDP), "TRC346")
    assert [(d.severity.value, d.key, d.facts["tp"]) for d in got] == [
        ("warning", "fsdp.reduce_dtype", 2)
    ]
    assert not find(lint_cfg(**FSDP, **{"fsdp.param_dtype": "fp32"}), "TRC346")
    assert not find(lint_cfg(**FSDP, **{"parallel.tp": 1}), "TRC346")


def test_fsdp_tp_above_query_groups_is_an_error() -> None:
    """engine=fsdp splits K/V by whole heads (no KV replication, torchtitan issue 932): tp 4
    over 2 query groups is TRC202, an error; Megatron-Core 0.16 replicates (TRC221 warning)."""
    groups = {"model.num_query_groups": 2, "parallel.tp": 4}
    got = find(lint_cfg(**FSDP, **groups), "TRC202")
    assert [(d.severity.value, d.key) for d in got] == [("error", "parallel.tp")]
    assert "1, 2" in (got[0].fix or "")
    assert not find(lint_cfg(**FSDP, **groups), "TRC221")
    assert not find(lint_cfg(**groups), "TRC202")
    assert [d.severity.value for d in find(lint_cfg(**groups), "TRC221")] == ["warning"]


def test_fp8_keys_without_fp8_are_inert() -> None:
    """fp8_recipe and first_last_layers_bf16 without fp8_format/fp4_format reach no artifact:
    TRC329 says so (they are written only with FP8/FP4 on)."""
    found = find(
        lint_cfg(**{"training.fp8_recipe": "tensorwise", "training.first_last_layers_bf16": True}),
        "TRC329",
    )
    assert sorted(d.key for d in found) == [
        "training.first_last_layers_bf16",
        "training.fp8_recipe",
    ]
    assert not find(
        lint_cfg(
            **{
                "training.fp8_format": "hybrid",
                "training.fp8_recipe": "tensorwise",
                "training.first_last_layers_bf16": True,
            }
        ),
        "TRC329",
    )
    assert not find(
        lint_cfg(**{"training.fp4_format": "e2m1", "training.first_last_layers_bf16": True}),
        "TRC329",
    )


def test_mla_keys_without_mla_are_inert_and_fsdp_refuses_mla() -> None:
    """The MLA ranks and head widths reach no artifact without multi_latent_attention (TRC329);
    engine=fsdp builds no MLA (TRC344); MLA rotates its rotary channels in pairs (TRC316)."""
    found = find(lint_cfg(**{"model.kv_lora_rank": 256, "model.v_head_dim": 64}), "TRC329")
    assert sorted(d.key for d in found) == ["model.kv_lora_rank", "model.v_head_dim"]
    mla = {"model.multi_latent_attention": True, "model.kv_lora_rank": 256}
    assert not find(lint_cfg(**mla), "TRC329")
    refused = find(lint_cfg(**FSDP, **mla), "TRC344")
    assert [d.key for d in refused] == ["model.multi_latent_attention"]
    assert refused[0].edits == {"engine": "megatron"}
    odd = find(lint_cfg(**mla, **{"model.qk_pos_emb_head_dim": 63}), "TRC316")
    assert [d.key for d in odd] == ["model.qk_pos_emb_head_dim"]
    learned = find(lint_cfg(**mla, **{"model.position_embedding": "learned"}), "TRC316")
    assert [d.key for d in learned] == ["model.position_embedding"]
