"""``megatron_args.txt``: the Megatron-LM ``pretrain_gpt.py`` flags of ``plan.json``'s
``engines.megatron_lm`` (built by :mod:`trainc.compiler.targets.megatron`, which reads every value
from the same Megatron-Core settings that ``megatron_core.yaml`` shows)."""

from __future__ import annotations

from typing import Any

from trainc.compiler.emit.render import header


def megatron_flags(plan: dict[str, Any]) -> list[list[str]]:
    """``pretrain_gpt.py`` arguments as ``[flag]`` or ``[flag, value]`` items ([] when the plan
    has none: engine=deepspeed with the trainc entrypoint)."""
    return [list(item) for item in plan["engines"]["megatron_lm"] or []]


def megatron_args(plan: dict[str, Any]) -> dict[str, str]:
    """``megatron_args.txt``: Megatron-LM ``pretrain_gpt.py`` flags, one per line (``--flag`` or
    ``--flag value``; the value is the rest of the line; the further values of a multi-valued
    flag follow on lines of their own). Lines starting with ``#`` are comments.

    ``--save``/``--load`` appear only when ``launch.save_dir`` is set; otherwise ``torchrun.sh``
    adds ``<OUTDIR>/checkpoints`` at run time. Not written for engine=deepspeed (unless the
    entrypoint is megatron-lm, which the rules refuse).
    """
    if plan["engines"]["megatron_lm"] is None:
        return {}
    # a flag with several values (a --data-path blend): its first value on the flag's line, one
    # line for each further value (torchrun.sh appends a line without a space as one argument)
    lines = [
        " ".join(item[:2]) + "".join(f"\n{v}" for v in item[2:]) for item in megatron_flags(plan)
    ]
    return {"megatron_args.txt": header(plan) + "\n".join(lines) + "\n"}
