"""plan: turn a validated, normalized spec into a :class:`~trainc.compiler.ir.Plan`, the single
source of truth every artifact is rendered from (``plan.json`` is ``Plan.to_json()``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainc import __version__
from trainc.compiler.decide import zero_layout
from trainc.compiler.derive import derive
from trainc.compiler.ir import Engines, Layout, Plan

# re-exported: trainc.compiler.plan has been their home
from trainc.compiler.spec_json import canonical_json as canonical_json
from trainc.compiler.spec_json import spec_hash as spec_hash
from trainc.compiler.spec_json import spec_to_dict as spec_to_dict
from trainc.compiler.support.secrets import is_secret
from trainc.compiler.targets import TARGETS, engine_configs
from trainc.compiler.targets.settings import layers_per_virtual_stage
from trainc.schemas import Device, Precision, TrainSpec

#: Megatron-LM release whose ``pretrain_gpt.py`` flags ``megatron_args.txt`` targets.
MEGATRON_LM_VERSION = "core_v0.19.0"
#: megatron-core wheel the trainc worker runs on (Python 3.11).
MEGATRON_CORE_VERSION = "0.16.1"
DEEPSPEED_VERSION = "0.19.8"


def recorded_spec(plan_json: Mapping[str, Any]) -> dict[str, Any]:
    """The spec a compiled output's ``plan.json`` stands for, to compile again (``trainc diff``,
    ``trainc calibrate``): ``spec_as_written`` (:attr:`Plan.spec_as_written`: derived values
    stay null, so overrides re-derive them), else -- a plan.json from before trainc recorded it
    -- the resolved ``spec``. Raises KeyError / TypeError when neither is a mapping."""
    written = plan_json.get("spec_as_written")
    return dict(written if isinstance(written, Mapping) else plan_json["spec"])


def plan(spec: TrainSpec, written: TrainSpec | None = None) -> Plan:
    """The :class:`~trainc.compiler.ir.Plan` of a normalized, validated spec (no estimates yet);
    ``written``: the same spec before normalization (``Plan.spec_as_written``), if known.

    ``derived`` holds the grid sizes (world_size, dp, expert_dp, etp), num_microbatches,
    layers_per_stage (transformer layers per PP stage; with vpp each stage's layers form vpp
    chunks, equal except where account_for_embedding/loss_in_pipeline_split takes a slot),
    padded_vocab_size, and the schedule switches the emitters need (overlap/batched p2p).
    ``engines`` holds every engine's settings (:func:`trainc.compiler.targets.engine_configs`),
    which the engine artifacts and the worker read.

    Only ``assert`` here: the validators guarantee the invariants (dp divides, layers split).
    """
    d = derive(spec)
    p, t = spec.parallel, spec.training
    assert d.dp is not None and d.expert_dp is not None and d.num_microbatches is not None
    assert d.layers_per_stage is not None and sum(d.layers_per_stage) == spec.model.num_layers
    eng = engine_configs(spec, d)
    tc = eng["megatron_core"]["TransformerConfig"]
    # Secret launch.env values never reach plan.json, hence no artifact
    # (trainc.compiler.support.secrets): Plan.spec_json masks them; their names (as spec_to_dict
    # spells the keys) go in derived.
    secret_env = sorted(str(k) for k, v in spec.launch.env.items() if is_secret(str(k), v))
    cpu = spec.launch.device is Device.cpu
    zero = zero_layout(spec)
    layout = Layout(
        world_size=d.world_size,
        tp=p.tp,
        pp=p.pp,
        vpp=p.vpp,
        cp=p.cp,
        ep=p.ep,
        etp=d.etp,
        dp=d.dp,
        expert_dp=d.expert_dp,
        model_parallel_size=d.model_parallel,
        num_microbatches=d.num_microbatches,
        layers_per_stage=tuple(d.layers_per_stage),
        layers_per_virtual_stage=layers_per_virtual_stage(spec, d),
        uneven_pipeline=p.pipeline_first_stage_layers is not None
        or p.pipeline_last_stage_layers is not None,
        padded_vocab_size=d.padded_vocab_size,
        num_moe_layers=d.num_moe_layers,
        sequence_parallel=bool(p.sequence_parallel),
        distributed_optimizer=zero.distributed_optimizer,
        megatron_fsdp=zero.megatron_fsdp,
        overlap_p2p_comm=tc["overlap_p2p_comm"],
        batch_p2p_comm=tc["batch_p2p_comm"],
        tokens_per_step=d.tokens_per_step,
        samples_per_step=d.samples_per_step,
        dataset_samples=d.dataset_samples,
        steps_per_epoch=d.steps_per_epoch,
        epochs=d.epochs,
        checkpoint_format=d.checkpoint_format,
        params_dtype="fp32" if t.precision is Precision.fp32 else t.precision.value,
        # Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1 (Megatron-LM validate_args)
        cuda_device_max_connections_1=(p.tp > 1 or p.cp > 1) and not zero.megatron_fsdp,
        gradient_accumulation_steps=d.num_microbatches,
        distributed_backend="gloo" if cpu else "nccl",
        transformer_impl=tc["transformer_impl"],
        add_bias_linear=tc["add_bias_linear"],
        secret_env=tuple(secret_env),
    )
    sections = dict(eng)  # one per TARGETS section (the fields of Engines)
    lm = sections.pop("megatron_lm")
    return Plan(
        spec=spec,
        derived=layout,
        written=written,
        engines=Engines(
            megatron_lm=None if lm is None else tuple(tuple(x) for x in lm), **sections
        ),
        trainc_version=__version__,
        target_versions={
            "megatron_lm": MEGATRON_LM_VERSION,
            "megatron_core": MEGATRON_CORE_VERSION,
            "deepspeed": DEEPSPEED_VERSION,
        }
        | dict(TARGETS[spec.engine].versions),
    )
