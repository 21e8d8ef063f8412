"""TRC330-TRC332: FP8 / FP4 training and the optimizer's state precision.

Sources (megatron-core 0.16.1): ``TransformerConfig.__post_init__`` (``fp8_param`` needs
``fp8``; ``fp4`` and ``fp8`` are exclusive), ``OptimizerConfig.__post_init__``
(``use_precision_aware_optimizer`` only with adam and the distributed optimizer, and only
Transformer Engine's FusedAdam implements it); Megatron-LM ``megatron/training/arguments.py``
(``--main-grads-dtype`` fp32/bf16, ``--main-params-dtype`` fp32/fp16, ``--exp-avg(-sq)-dtype``
fp32/fp16/bf16/fp8). Transformer Engine's FP8/FP4 GEMMs need CUDA; trainc's DeepSpeed and CPU
paths have none. engine=fsdp's FP8 is torchao's (:mod:`trainc.compiler.validate.fsdp_float8`).
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.decide import traits
from trainc.compiler.derive import Derived
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.targets.settings import distributed_optimizer
from trainc.compiler.validate.fsdp_float8 import fsdp_float8
from trainc.schemas import (
    Device,
    Fp4Format,
    Fp8Format,
    Fp8Recipe,
    Optimizer,
    StateDtype,
    TrainSpec,
)

#: The dtypes Megatron-LM's parser accepts for each optimizer buffer.
STATE_CHOICES = {
    "main_grads_dtype": (StateDtype.fp32, StateDtype.bf16),
    "main_params_dtype": (StateDtype.fp32, StateDtype.fp16),
    "exp_avg_dtype": tuple(StateDtype),
    "exp_avg_sq_dtype": tuple(StateDtype),
}


def low_precision_keys(spec: TrainSpec) -> list[str]:
    """The dotted keys of the spec that ask for FP8/FP4 GEMMs or a precision-aware optimizer."""
    t = spec.training
    keys = []
    if t.fp8_format is not Fp8Format.none:
        keys.append("training.fp8_format")
    if t.fp4_format is not Fp4Format.none:
        keys.append("training.fp4_format")
    keys += [f"training.{k}" for k in STATE_CHOICES if getattr(t, k) is not StateDtype.fp32]
    return keys


def precision(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC330 (runner), TRC331 (FP8/FP4 combinations), TRC332 (optimizer state precision),
    TRC387 (NVFP4 on every layer, a warning)."""
    t = spec.training
    keys = low_precision_keys(spec)
    fsdp_fp8 = traits(spec).fsdp2 and t.fp8_format is not Fp8Format.none
    if fsdp_fp8:  # torchao's converters through torchtitan, not Transformer Engine
        yield from fsdp_float8(spec)
        keys = [k for k in keys if k != "training.fp8_format"]
    elif t.fp8_format is not Fp8Format.none and t.fp8_recipe in (
        Fp8Recipe.rowwise,
        Fp8Recipe.rowwise_with_gw_hp,
    ):
        yield diag(
            R.LOW_PRECISION_RUNNER,
            f"training.fp8_recipe {t.fp8_recipe.value} is a "
            "torchao recipe (engine=fsdp); Megatron-LM --fp8-recipe takes delayed, "
            "tensorwise, blockwise, mxfp8",
            "training.fp8_recipe",
            related=("engine",),
            fix="set training.fp8_recipe=tensorwise (current scaling), or engine=fsdp",
            edits={"training.fp8_recipe": "tensorwise"},
            recipe=t.fp8_recipe.value,
            engine=spec.engine.value,
        )
    if keys and (not traits(spec).megatron_core or spec.launch.device is Device.cpu):
        where = (
            f"engine={spec.engine.value}" if not traits(spec).megatron_core else "launch.device=cpu"
        )
        yield diag(
            R.LOW_PRECISION_RUNNER,
            f"{', '.join(keys)} {_need(keys)} Transformer Engine on CUDA with "
            f"engine=megatron; this spec runs on {where}",
            keys[0],
            related=("engine", "launch.device", *keys[1:]),
            fix="use engine=megatron with launch.device=cuda, or set "
            + ", ".join(f"{k}={'none' if 'format' in k else 'fp32'}" for k in keys),
            edits={k: "none" if "format" in k else "fp32" for k in keys},
            engine=spec.engine.value,
            device=spec.launch.device.value,
        )
    fp8 = t.fp8_format is not Fp8Format.none
    fp4 = t.fp4_format is not Fp4Format.none
    if fp8 and fp4:
        yield diag(
            R.FP8_FP4_COMBINATION,
            "fp8_format and fp4_format are both set; Megatron-Core "
            "raises 'fp4 and fp8 cannot be used simultaneously'",
            "training.fp4_format",
            related=("training.fp8_format",),
            fix="set training.fp4_format=none (or training.fp8_format=none)",
            edits={"training.fp4_format": "none"},
            fp8_format=t.fp8_format.value,
            fp4_format=t.fp4_format.value,
        )
    if fp4 and not fp8 and not t.first_last_layers_bf16 and traits(spec).megatron_core:
        # NVIDIA's NVFP4 recipes keep layers at the ends in BF16: the NVFP4 pre-training paper
        # (arXiv:2509.25149) the last ~15 %, Megatron-Bridge's Llama-3-8B recipe (PR 1347) the
        # last 4. trainc's key keeps one layer at each end (Megatron-LM's default count).
        yield diag(
            R.FP4_ALL_LAYERS,
            f"fp4_format {t.fp4_format.value} runs every one of the "
            f"{spec.model.num_layers} layers in NVFP4; NVIDIA's NVFP4 pre-training "
            "recipes keep the first and last layers in BF16 (Megatron-Bridge's "
            "Llama-3-8B recipe the last 4) because all-NVFP4 runs lose accuracy",
            "training.fp4_format",
            related=("training.first_last_layers_bf16",),
            fix="set training.first_last_layers_bf16=true (one BF16 layer at each end; "
            "the recipes' larger BF16 tail, e.g. the last 4 layers, needs Megatron-LM "
            "--num-layers-at-end-in-bf16, which the spec cannot set yet)",
            edits={"training.first_last_layers_bf16": True},
            fp4_format=t.fp4_format.value,
            num_layers=spec.model.num_layers,
        )
    if t.fp8_param_gather and not fp8:
        yield diag(
            R.FP8_FP4_COMBINATION,
            "fp8_param_gather keeps parameters in FP8 but "
            "fp8_format is none (Megatron-Core: 'fp8_param must be used together with fp8 "
            "mode')",
            "training.fp8_param_gather",
            related=("training.fp8_format",),
            fix="set training.fp8_format (e4m3 or hybrid), or fp8_param_gather=false",
            edits={"training.fp8_param_gather": False},
            fp8_param_gather=True,
            fp8_format="none",
        )
    if t.fp8_param_gather and fp8 and not distributed_optimizer(spec):
        if traits(spec).megatron_core:
            why = f"which this spec does not use (zero_stage {spec.parallel.zero_stage})"
            fix = "set parallel.zero_stage=1 (the distributed optimizer), or fp8_param_gather=false"
            edits: dict[str, object] = {"parallel.zero_stage": 1}
        else:  # zero_stage does not choose Megatron's optimizer on another engine
            why = f"which engine={spec.engine.value} does not have"
            fix = "set training.fp8_param_gather=false, or engine=megatron"
            edits = {"training.fp8_param_gather": False}
        yield diag(
            R.FP8_FP4_COMBINATION,
            "fp8_param_gather all-gathers FP8 parameters in "
            f"Megatron-Core's distributed optimizer, {why}",
            "training.fp8_param_gather",
            related=("parallel.zero_stage", "engine"),
            fix=fix,
            edits=edits,
            engine=spec.engine.value,
        )
    yield from _state(spec)


def _state(spec: TrainSpec) -> Iterator[Diagnostic]:
    t = spec.training
    for key, ok in STATE_CHOICES.items():
        value = getattr(t, key)
        if value not in ok:
            yield diag(
                R.OPTIMIZER_STATE_PRECISION,
                f"{key}={value.value} is not accepted (Megatron-LM --"
                f"{key.replace('_', '-')} takes {', '.join(v.value for v in ok)})",
                f"training.{key}",
                fix=f"set training.{key} to one of " + ", ".join(v.value for v in ok),
                edits={f"training.{key}": ok[-1].value},
                value=value.value,
            )
    lowered = [f"training.{k}" for k in STATE_CHOICES if getattr(t, k) is not StateDtype.fp32]
    if not lowered:
        return
    if t.optimizer is not Optimizer.adam:
        yield diag(
            R.OPTIMIZER_STATE_PRECISION,
            f"{', '.join(lowered)} {_need(lowered)} the "
            "precision-aware optimizer, which supports adam only (optimizer is "
            f"{t.optimizer.value})",
            lowered[0],
            related=("training.optimizer", *lowered[1:]),
            fix="set training.optimizer=adam, or the optimizer dtypes to fp32",
            edits={"training.optimizer": "adam"},
            optimizer=t.optimizer.value,
        )
    if traits(spec).megatron_core and not distributed_optimizer(spec):
        yield diag(
            R.OPTIMIZER_STATE_PRECISION,
            f"{', '.join(lowered)} {_need(lowered)} the "
            "precision-aware optimizer, which Megatron-Core supports only with the "
            f"distributed optimizer (zero_stage is {spec.parallel.zero_stage})",
            lowered[0],
            related=("parallel.zero_stage", *lowered[1:]),
            fix="set parallel.zero_stage=1, or the optimizer dtypes to fp32",
            edits={"parallel.zero_stage": 1},
            zero_stage=spec.parallel.zero_stage,
        )


def _need(keys: list[str]) -> str:
    return "needs" if len(keys) == 1 else "need"
