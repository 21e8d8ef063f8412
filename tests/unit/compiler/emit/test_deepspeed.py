"""ds_config.json: explicit values only, DeepSpeed 0.19.8's keys and its batch identity."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.emit import compile_case

CASE = "llama2-7b-deepspeed-zero3-offload"
# DeepSpeedZeroConfig / offload configs of 0.19.8 (pydantic, extra="forbid"); the removed MiCS and
# LoCo keys are absent on purpose.
ZERO_KEYS = {
    "stage",
    "contiguous_gradients",
    "reduce_scatter",
    "reduce_bucket_size",
    "use_multi_rank_bucket_allreduce",
    "allgather_partitions",
    "allgather_bucket_size",
    "overlap_comm",
    "compute_grad_norm",
    "load_from_fp32_weights",
    "elastic_checkpoint",
    "offload_param",
    "offload_optimizer",
    "sub_group_size",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_model_persistence_threshold",
    "stage3_max_live_parameters",
    "stage3_max_reuse_distance",
    "stage3_gather_16bit_weights_on_model_save",
    "stage3_module_granularity_threshold",
    "stage3_use_all_reduce_for_fetch_params",
    "stage3_allgather_sequential",
    "ignore_unused_parameters",
    "round_robin_gradients",
    "parameter_alignment",
    "zero_hpz_partition_size",
    "zero_quantized_weights",
    "zero_quantized_nontrainable_weights",
    "zero_quantized_gradients",
    "memory_efficient_linear",
    "pipeline_loading_checkpoint",
    "override_module_apply",
    "log_trace_cache_warnings",
    "enable_sanity_checks",
    "save_muon_momentum_buffer_in_memory",
    "leaf_module",
}
OFFLOAD_PARAM_KEYS = {
    "device",
    "nvme_path",
    "buffer_count",
    "buffer_size",
    "max_in_cpu",
    "pin_memory",
}
OFFLOAD_OPT_KEYS = {
    "device",
    "nvme_path",
    "buffer_count",
    "pin_memory",
    "pipeline_read",
    "pipeline_write",
    "fast_init",
    "ratio",
    "super_offload",
    "cpuadam_cores_perc",
}
BF16_KEYS = {
    "enabled",
    "immediate_grad_update",
    "check_grad_overflow",
    "bf16_master_weights_and_grads",
    "bf16_optimizer_states",
}
FP16_KEYS = {
    "enabled",
    "auto_cast",
    "loss_scale",
    "initial_scale_power",
    "loss_scale_window",
    "hysteresis",
    "consecutive_hysteresis",
    "min_loss_scale",
    "fp16_master_weights_and_grads",
}
REMOVED_TOP = {
    "nebula",
    "compression_training",
    "amp",
    "quantize_training",
    "sparse_gradients",
    "eigenvalue",
    "sparse_attention",
    "elasticity",
    "graph_harvesting",
    "curriculum_learning",
    "progressive_layer_drop",
}
INT_KEYS = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "steps_per_print",
    "stage",
    "reduce_bucket_size",
    "allgather_bucket_size",
    "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "stage3_max_live_parameters",
    "stage3_max_reuse_distance",
    "buffer_count",
    "total_num_steps",
    "warmup_num_steps",
    "initial_scale_power",
    "loss_scale_window",
    "hysteresis",
    "min_loss_scale",
}

VARIANTS = [
    (),
    (
        "parallel.zero_stage=0",
        "training.offload_optimizer=none",
        "training.offload_param=none",
        "cluster.gpu_memory_gib=192",
    ),  # unsharded Adam state of 7B needs a 192 GiB GPU
    ("parallel.zero_stage=1", "training.offload_param=none"),
    (
        "parallel.zero_stage=2",
        "training.offload_optimizer=none",
        "training.offload_param=none",
        "training.precision=fp16",
    ),
    (
        "training.offload_optimizer=nvme",
        "training.offload_param=nvme",
        "training.nvme_path=/local_nvme",
        "training.precision=fp32",
        "training.lr_warmup_iters=0",
    ),
    ("cluster.num_nodes=2", "training.micro_batch_size=1", "training.global_batch_size=48"),
]


def ds(*overrides: str) -> tuple[dict[str, Any], dict[str, Any]]:
    plan, files = compile_case(CASE, tuple(overrides))
    assert files["ds_config.json"].endswith("}\n")
    return plan, json.loads(files["ds_config.json"])


def _walk(obj: Any, path: str = ""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _walk(v, f"{path}.{k}" if path else k)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _walk(v, f"{path}[{i}]")
    else:
        yield path, obj


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: ",".join(o) or "golden")
def test_ds_config_is_valid_for_0_19_8(overrides: tuple[str, ...]) -> None:
    plan, cfg = ds(*overrides)
    d, t = plan["derived"], plan["spec"]["training"]
    # DeepSpeed's batch identity (runtime/config.py::_batch_assertion), dp = world/(tp*pp*cp)
    assert cfg["train_batch_size"] == (
        cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * d["dp"]
    )
    assert cfg["train_batch_size"] == t["global_batch_size"]
    for path, value in _walk(cfg):
        assert value != "auto", path
        if path.rsplit(".", 1)[-1] in INT_KEYS:
            assert type(value) is int, (path, value)
    assert not REMOVED_TOP & set(cfg)
    z = cfg["zero_optimization"]
    assert z["stage"] == plan["spec"]["parallel"]["zero_stage"]
    assert set(z) <= ZERO_KEYS, set(z) - ZERO_KEYS
    if "offload_param" in z:
        assert z["stage"] == 3 and set(z["offload_param"]) <= OFFLOAD_PARAM_KEYS
    if "offload_optimizer" in z:
        assert z["stage"] >= 1 and set(z["offload_optimizer"]) <= OFFLOAD_OPT_KEYS
    for block in (z.get("offload_param"), z.get("offload_optimizer")):
        if block and block["device"] == "nvme":
            assert block["nvme_path"] == t["nvme_path"]
    assert set(cfg.get("bf16", {})) <= BF16_KEYS and set(cfg.get("fp16", {})) <= FP16_KEYS
    assert not ("bf16" in cfg and "fp16" in cfg)
    assert ("bf16" in cfg) == (t["precision"] == "bf16")
    assert ("fp16" in cfg) == (t["precision"] == "fp16")
    assert cfg["gradient_clipping"] == t["grad_clip"]  # explicit: default changed in 0.19.3
    sp = cfg["scheduler"]["params"]
    assert cfg["scheduler"]["type"] == "WarmupCosineLR"
    assert sp["total_num_steps"] == t["train_iters"] and sp["warmup_num_steps"] >= 1
    assert "max_grad_norm" not in cfg["optimizer"]["params"]


def test_no_ds_config_for_megatron() -> None:
    _, files = compile_case("llama2-70b-tp8pp4")
    assert "ds_config.json" not in files


def test_deepspeed_accepts_it() -> None:
    """Differential check with the real parser when deepspeed is installed (worker extra)."""
    pytest.importorskip("deepspeed")
    from unittest import mock

    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig

    for overrides in VARIANTS:
        plan, cfg = ds(*overrides)
        with (
            mock.patch.object(dist, "get_rank", return_value=0),
            mock.patch.object(dist, "get_world_size", return_value=plan["derived"]["dp"]),
        ):
            c = DeepSpeedConfig(dict(cfg))
        assert c.train_batch_size == cfg["train_batch_size"]
        assert c.zero_optimization_stage == cfg["zero_optimization"]["stage"]


@pytest.mark.parametrize(
    ("lr", "min_lr", "ratio"),
    [("3e-4", "3e-5", 0.1), ("6e-4", "6e-5", 0.1), ("3e-4", "1e-5", 0.0333333333333333)],
)
def test_cos_min_ratio_has_no_binary_noise(lr: str, min_lr: str, ratio: float) -> None:
    """``cos_min_ratio`` is min_lr / lr to 15 significant digits (3e-5 / 3e-4 printed
    0.09999999999999999)."""
    _, files = compile_case(
        CASE, (f"training.lr={lr}", f"training.min_lr={min_lr}", "training.lr_decay_style=cosine")
    )
    sched = json.loads(files["ds_config.json"])["scheduler"]
    assert sched["type"] == "WarmupCosineLR"
    assert sched["params"]["cos_min_ratio"] == ratio
