"""The DeepSpeed 0.19.8 config of a validated engine=deepspeed spec (``ds_config.json``, and
what the worker hands to ``deepspeed.initialize``): explicit values only, never "auto".

Keys and types are those DeepSpeed 0.19.8 accepts: ``deepspeed/runtime/config.py`` (batch
triangle, ``gradient_clipping``, ``steps_per_print``), the pydantic models
``DeepSpeedZeroConfig`` and ``DeepSpeedZeroOffload{Param,Optimizer}Config`` (``extra="forbid"``),
``DeepSpeedBF16Config`` / ``DeepSpeedFP16Config``, and the schedulers of
``deepspeed/runtime/lr_schedules.py``.
"""

from __future__ import annotations

from typing import Any

from trainc.compiler.decide import zero_layout
from trainc.compiler.derive import Derived
from trainc.schemas import LrDecayStyle, Offload, Optimizer, Precision, TrainSpec

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
#: lr_decay_style -> DeepSpeed scheduler type. The styles missing here have no DeepSpeed
#: scheduler (TRC323 rejects them for engine=deepspeed); ``linear`` maps to WarmupDecayLR, which
#: warms up from and decays to the same ``warmup_min_lr`` (TRC323 requires min_lr 0).
SCHEDULERS = {
    LrDecayStyle.constant: "WarmupLR",
    LrDecayStyle.cosine: "WarmupCosineLR",
    LrDecayStyle.linear: "WarmupDecayLR",
}


def _offload(device: Offload, nvme_path: str | None, buffer_count: int) -> dict[str, Any]:
    block: dict[str, Any] = {
        "device": device.value,
        "pin_memory": True,
        "buffer_count": buffer_count,
    }
    if device is Offload.nvme:
        block["nvme_path"] = nvme_path
    return block


def zero_optimization(spec: TrainSpec) -> dict[str, Any]:
    """The ``zero_optimization`` block for the spec's stage, with only the keys that stage uses
    (``DeepSpeedZeroConfig`` of 0.19.8; no removed MiCS/LoCo keys; ints, not floats)."""
    stage, t = zero_layout(spec).zero_stage, spec.training
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
    if t.offload_optimizer is not Offload.none:
        z["offload_optimizer"] = _offload(t.offload_optimizer, t.nvme_path, OPTIMIZER_BUFFER_COUNT)
    if stage == 3 and t.offload_param is not Offload.none:
        z["offload_param"] = _offload(t.offload_param, t.nvme_path, PARAM_BUFFER_COUNT)
    return z


def optimizer(spec: TrainSpec) -> dict[str, Any]:
    """``optimizer``: AdamW (decoupled weight decay, as Megatron's ``adam``) or SGD."""
    t = spec.training
    if t.optimizer is Optimizer.adam:
        return {
            "type": "AdamW",
            "params": {
                "lr": float(t.lr),
                "betas": [float(t.adam_beta1), float(t.adam_beta2)],
                "eps": float(t.adam_eps),
                "weight_decay": float(t.weight_decay),
            },
        }
    return {
        "type": "SGD",
        "params": {
            "lr": float(t.lr),
            "momentum": float(t.sgd_momentum),
            "weight_decay": float(t.weight_decay),
        },
    }


def scheduler(spec: TrainSpec) -> dict[str, Any]:
    """``scheduler`` for ``training.lr_decay_style`` (see :data:`SCHEDULERS`): a linear warm-up
    over ``lr_warmup_iters`` from 0, then the decay to ``min_lr`` by ``lr_decay_iters``.
    DeepSpeed 0.19.8 requires a positive warm-up (``warmup_num_steps = max(2, n)`` inside) and
    sets the rate of iteration -1 when it builds the scheduler, so its schedule runs one step
    behind Megatron-Core's OptimizerParamScheduler (the first step at lr 0); see
    docs/divergences.md."""
    t = spec.training
    assert t.lr_decay_iters is not None
    kind = SCHEDULERS[t.lr_decay_style]
    warmup = max(1, t.lr_warmup_iters)
    lr = float(t.lr)
    if kind == "WarmupCosineLR":
        return {
            "type": kind,
            "params": {
                "total_num_steps": t.lr_decay_iters,
                "warmup_num_steps": warmup,
                "warmup_min_ratio": 0.0 if t.lr_warmup_iters > 0 else 1.0,
                # 15 significant digits: min_lr / lr without binary noise (3e-5 / 3e-4 is 0.1)
                "cos_min_ratio": float(f"{float(t.min_lr) / lr:.15g}") if lr else 0.0,
                "warmup_type": "linear",
            },
        }
    start = 0.0 if t.lr_warmup_iters > 0 else lr
    params: dict[str, Any] = {
        "warmup_min_lr": start,
        "warmup_max_lr": lr,
        "warmup_num_steps": warmup,
        "warmup_type": "linear",
    }
    if kind == "WarmupDecayLR":  # decays to warmup_min_lr: 0 (TRC323 requires min_lr 0)
        params["total_num_steps"] = t.lr_decay_iters
    return {"type": kind, "params": params}


def deepspeed_config(spec: TrainSpec, d: Derived) -> dict[str, Any]:
    """The DeepSpeed config as a dict. ``train_batch_size == train_micro_batch_size_per_gpu *
    gradient_accumulation_steps * dp`` holds by construction (DeepSpeed's ``_batch_assertion``),
    and ``gradient_clipping`` is explicit (its default changed to 1.0 in 0.19.3).

    Raises AssertionError for a layout the validators reject (batch triangle, decay style)."""
    t = spec.training
    mbs, gas, dp = t.micro_batch_size, d.num_microbatches, d.dp
    assert gas is not None and dp is not None and mbs * gas * dp == t.global_batch_size
    cfg: dict[str, Any] = {
        "train_batch_size": t.global_batch_size,
        "train_micro_batch_size_per_gpu": mbs,
        "gradient_accumulation_steps": gas,
        "gradient_clipping": float(t.grad_clip),
        "steps_per_print": spec.launch.log_interval,
        "wall_clock_breakdown": False,
        "zero_optimization": zero_optimization(spec),
        "optimizer": optimizer(spec),
        "scheduler": scheduler(spec),
    }
    if t.optimizer is Optimizer.sgd and zero_layout(spec).zero_stage >= 1:
        # torch.optim.SGD is not on DeepSpeed's list of ZeRO-tested optimizers
        # (runtime/zero/utils.py ZERO_SUPPORTED_OPTIMIZERS); initialize refuses it without this
        cfg["zero_allow_untested_optimizer"] = True
    if t.precision is Precision.bf16:
        cfg["bf16"] = {"enabled": True}
        # reduce gradients in fp32 as Megatron-Core does for bf16 (grad_reduce_in_fp32); without
        # it DeepSpeed communicates in the training dtype (DeepSpeedEngine.communication_data_type)
        cfg["communication_data_type"] = "fp32"
    elif t.precision is Precision.fp16:
        cfg["fp16"] = {
            "enabled": True,
            "loss_scale": 0.0,
            "initial_scale_power": 16,
            "loss_scale_window": 1000,
            "hysteresis": 2,
            "min_loss_scale": 1,
        }
    return cfg
