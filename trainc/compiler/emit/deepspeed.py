"""DeepSpeed ``ds_config.json`` (engine=deepspeed): explicit values only, never "auto".

Keys and types are those DeepSpeed 0.19.8 accepts: ``runtime/config.py`` (batch triangle,
``gradient_clipping``, ``steps_per_print``), the pydantic models ``DeepSpeedZeroConfig`` and
``DeepSpeedZeroOffload{Param,Optimizer}Config`` (``extra="forbid"``), ``DeepSpeedBF16Config`` /
``DeepSpeedFP16Config``, and the ``WarmupCosineLR`` scheduler of ``runtime/lr_schedules.py``.
"""

from __future__ import annotations

import json
from typing import Any

#: ZeRO bucket sizes (elements): DeepSpeed's defaults, written out as ints.
REDUCE_BUCKET_SIZE = 500_000_000
ALLGATHER_BUCKET_SIZE = 500_000_000
STAGE3_PREFETCH_BUCKET_SIZE = 50_000_000
STAGE3_PARAM_PERSISTENCE_THRESHOLD = 100_000
STAGE3_MAX_LIVE_PARAMETERS = 1_000_000_000
STAGE3_MAX_REUSE_DISTANCE = 1_000_000_000
#: Adam needs 4 offload buffers (DeepSpeed's advice: one per optimizer state per parameter).
OPTIMIZER_BUFFER_COUNT = 4
PARAM_BUFFER_COUNT = 5


def _offload(device: str, nvme_path: str | None, buffer_count: int) -> dict[str, Any]:
    block: dict[str, Any] = {"device": device, "pin_memory": True, "buffer_count": buffer_count}
    if device == "nvme":
        block["nvme_path"] = nvme_path
    return block


def zero_optimization(plan: dict[str, Any]) -> dict[str, Any]:
    """The ``zero_optimization`` block for the spec's stage, with only the keys that stage uses
    (``DeepSpeedZeroConfig`` of 0.19.8; no removed MiCS/LoCo keys; ints, not floats)."""
    s = plan["spec"]
    stage, t = s["parallel"]["zero_stage"], s["training"]
    z: dict[str, Any] = {"stage": stage}
    if stage == 0:
        return z
    z |= {
        "contiguous_gradients": True,
        "overlap_comm": stage >= 2,
        "reduce_scatter": True,
        "reduce_bucket_size": REDUCE_BUCKET_SIZE,
    }
    if stage in (1, 2):
        z["allgather_partitions"] = True
        z["allgather_bucket_size"] = ALLGATHER_BUCKET_SIZE
    if stage == 3:
        z |= {
            "stage3_prefetch_bucket_size": STAGE3_PREFETCH_BUCKET_SIZE,
            "stage3_param_persistence_threshold": STAGE3_PARAM_PERSISTENCE_THRESHOLD,
            "stage3_max_live_parameters": STAGE3_MAX_LIVE_PARAMETERS,
            "stage3_max_reuse_distance": STAGE3_MAX_REUSE_DISTANCE,
            "stage3_gather_16bit_weights_on_model_save": True,
        }
    if t["offload_optimizer"] != "none":
        z["offload_optimizer"] = _offload(t["offload_optimizer"], t["nvme_path"],
                                          OPTIMIZER_BUFFER_COUNT)
    if stage == 3 and t["offload_param"] != "none":
        z["offload_param"] = _offload(t["offload_param"], t["nvme_path"], PARAM_BUFFER_COUNT)
    return z


def ds_config_dict(plan: dict[str, Any]) -> dict[str, Any]:
    """The DeepSpeed config as a dict. ``train_batch_size == train_micro_batch_size_per_gpu *
    gradient_accumulation_steps * dp`` holds by construction (DeepSpeed's ``_batch_assertion``),
    and ``gradient_clipping`` is explicit (its default changed to 1.0 in 0.19.3)."""
    s, d = plan["spec"], plan["derived"]
    t = s["training"]
    mbs, gas, dp = t["micro_batch_size"], d["gradient_accumulation_steps"], d["dp"]
    assert mbs * gas * dp == t["global_batch_size"], (mbs, gas, dp, t["global_batch_size"])
    cfg: dict[str, Any] = {
        "train_batch_size": t["global_batch_size"],
        "train_micro_batch_size_per_gpu": mbs,
        "gradient_accumulation_steps": gas,
        "gradient_clipping": float(t["grad_clip"]),
        "steps_per_print": s["launch"]["log_interval"],
        "wall_clock_breakdown": False,
        "zero_optimization": zero_optimization(plan),
        "optimizer": {
            "type": "AdamW" if t["optimizer"] == "adam" else "SGD",
            "params": ({
                "lr": float(t["lr"]),
                "betas": [d["adam_beta1"], d["adam_beta2"]],
                "eps": d["adam_eps"],
                "weight_decay": float(t["weight_decay"]),
            } if t["optimizer"] == "adam" else {
                "lr": float(t["lr"]),
                "weight_decay": float(t["weight_decay"]),
            }),
        },
        "scheduler": {
            "type": "WarmupCosineLR",
            "params": {
                "total_num_steps": t["train_iters"],
                # DeepSpeed 0.19.8 requires a positive warmup; no warmup = start at the peak.
                "warmup_num_steps": max(1, t["lr_warmup_iters"]),
                "warmup_min_ratio": 0.0 if t["lr_warmup_iters"] > 0 else 1.0,
                "cos_min_ratio": float(t["min_lr"]) / float(t["lr"]) if t["lr"] else 0.0,
                "warmup_type": "linear",
            },
        },
    }
    if t["precision"] == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif t["precision"] == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0.0, "initial_scale_power": 16,
                       "loss_scale_window": 1000, "hysteresis": 2, "min_loss_scale": 1}
    return cfg


def ds_config(plan: dict[str, Any]) -> dict[str, str]:
    """``ds_config.json`` for engine=deepspeed (``json.dumps(indent=2, sort_keys=True)``),
    nothing otherwise. JSON has no comments: provenance is in ``manifest.json``."""
    if plan["spec"]["engine"] != "deepspeed":
        return {}
    return {"ds_config.json": json.dumps(ds_config_dict(plan), indent=2, sort_keys=True) + "\n"}
