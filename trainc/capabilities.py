"""What each (engine, entrypoint) can run: one table read by the compiler's rules (a layout
outside it is a compile error, TRC313 / TRC323 / TRC325) and by the worker (which checks the
plan against the same table before it starts). Standard library and :mod:`trainc.schemas` only.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainc.schemas import Device, Engine, Entrypoint, LrDecayStyle


@dataclass(frozen=True, slots=True)
class Capability:
    """One runner of a plan: the trainc worker on an engine, or Megatron-LM's pretrain_gpt.py."""

    runner: str
    """How diagnostics name it ("the trainc worker on DeepSpeed", "Megatron-LM pretrain_gpt.py")."""
    axes: frozenset[str]
    """Parallel axes it can split (tp, pp, vpp, cp, ep, dp); an axis outside must be 1."""
    devices: frozenset[Device]
    """Devices it runs on."""
    lr_decay_styles: frozenset[LrDecayStyle]
    """lr_decay_style values it honours exactly."""
    why: str
    """One clause saying why the missing axes are missing (for the diagnostic)."""


ALL_AXES = frozenset({"tp", "pp", "vpp", "cp", "ep", "dp"})
ALL_STYLES = frozenset(LrDecayStyle)

CAPABILITIES: dict[tuple[Engine, Entrypoint], Capability] = {
    (Engine.megatron, Entrypoint.trainc): Capability(
        "the trainc worker on Megatron-Core", ALL_AXES, frozenset(Device), ALL_STYLES, ""
    ),
    (Engine.deepspeed, Entrypoint.trainc): Capability(
        "the trainc worker on DeepSpeed",
        frozenset({"tp", "dp"}),
        frozenset(Device),
        frozenset({LrDecayStyle.constant, LrDecayStyle.cosine, LrDecayStyle.linear}),
        "it runs deepspeed.initialize on one Megatron-Core model chunk (no PipelineEngine, no "
        "context or expert parallel groups)",
    ),
    (Engine.fsdp, Entrypoint.trainc): Capability(
        "the trainc worker on FSDP2",
        frozenset({"tp", "dp"}),
        frozenset(Device),
        frozenset({LrDecayStyle.constant, LrDecayStyle.cosine, LrDecayStyle.linear}),
        "it applies fully_shard and DTensor tensor parallelism to one model; pipeline schedules "
        "(torch.distributed.pipelining), context parallelism and expert parallelism run in "
        "torchtitan only (torchtitan_args.txt)",
    ),
    (Engine.fsdp, Entrypoint.torchtitan): Capability(
        "torchtitan 0.3.0 torchtitan.train",
        frozenset({"tp", "pp", "vpp", "cp", "ep", "dp"}),
        frozenset({Device.cuda}),
        frozenset({LrDecayStyle.constant, LrDecayStyle.cosine, LrDecayStyle.linear}),
        "",
    ),
    (Engine.megatron, Entrypoint.megatron_lm): Capability(
        "Megatron-LM pretrain_gpt.py", ALL_AXES, frozenset({Device.cuda}), ALL_STYLES, ""
    ),
}


def capability(engine: Engine, entrypoint: Entrypoint) -> Capability | None:
    """The runner of ``engine`` started by ``entrypoint``; None when that pair cannot run at all
    (pretrain_gpt.py is Megatron-LM: it runs engine=megatron only; torchtitan engine=fsdp only)."""
    return CAPABILITIES.get((engine, entrypoint))


def unsupported_axes(cap: Capability, degrees: dict[str, int]) -> list[str]:
    """The axes of ``degrees`` (axis -> degree) above 1 that ``cap`` cannot split, in order."""
    return [a for a, v in degrees.items() if v > 1 and a not in cap.axes]
