"""engine=fsdp activation checkpointing as torchtitan has it (TRC344): ``fsdp.selective_ac_option``
and ``fsdp.memory_budget`` with ``training.recompute``, per torchtitan version (``launch.versions
.torchtitan``; unset: 0.3.0, the release torchtitan_args.txt is written for). The modes and their
sources are in :mod:`trainc.compiler.targets.torchtitan_ac`:

* ``selective_ac_option`` is ``op`` or a positive integer (torchtitan v0.2.2 ``job_config.py``
  ``ActivationCheckpoint.selective_ac_option``: "'int' (e.g., 2) for every nth layer, or 'op'");
  it and ``memory_budget`` choose how a *selective* recompute selects, so either with
  ``training.recompute`` none or full is a value nothing would read;
* every-N-layer AC exists up to torchtitan 0.2.x, the memory budget from 0.2.0;
* ``memory_budget`` is in [0, 1] and needs ``fsdp.compile`` (torchtitan 0.3.0
  ``Trainer.Config.__post_init__``: "Memory budget activation checkpointing requires the model
  to be compiled").
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.decide import traits
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.compiler.targets.torchao import torchtitan_version
from trainc.compiler.targets.torchtitan_ac import (
    LAYER_SAC_LAST,
    MEMORY_BUDGET_FIRST,
    ac_setting,
    parse_option,
)
from trainc.schemas import Recompute, TrainSpec


def fsdp_ac_rules(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC344 for the activation-checkpoint keys of engine=fsdp (nothing for another engine:
    TRC329 reports fsdp.* keys set there)."""
    if not traits(spec).fsdp2:
        return
    f, t = spec.fsdp, spec.training
    opt, budget = f.selective_ac_option, f.memory_budget
    version, stated = torchtitan_version(spec)
    where = f"torchtitan {version}" + (
        ""
        if stated
        else " (launch.versions.torchtitan unset: the release torchtitan_args.txt is written for)"
    )
    if opt is not None and parse_option(opt) is None:
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"fsdp.selective_ac_option ({opt!r}) is neither 'op' "
            "(per-op selective checkpointing) nor a positive integer N (every N-th "
            "block checkpointed)",
            "fsdp.selective_ac_option",
            fix="set fsdp.selective_ac_option=op, or a positive integer such as 2",
            edits={"fsdp.selective_ac_option": "op"},
            setting="selective_ac_option",
            selective_ac_option=opt,
        )
    for key, value in (("fsdp.selective_ac_option", opt), ("fsdp.memory_budget", budget)):
        if value is not None and t.recompute is not Recompute.selective:
            yield diag(
                R.FSDP_UNSUPPORTED,
                f"{key} ({value}) chooses what a selective "
                f"recompute keeps, but training.recompute is {t.recompute.value}: "
                "nothing would read it",
                key,
                related=("training.recompute",),
                fix=f"set training.recompute=selective, or remove {key}",
                edits={key: None},
                setting=key.split(".")[1],
                recompute=t.recompute.value,
            )
    if t.recompute is not Recompute.selective:
        return
    if opt is not None and budget is not None:
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"fsdp.memory_budget ({budget}) and "
            f"fsdp.selective_ac_option ({opt}) are two different torchtitan modes "
            "(MemoryBudgetAC lets the compiler choose; SelectiveAC applies its own "
            "policy): torchtitan runs one",
            "fsdp.memory_budget",
            related=("fsdp.selective_ac_option",),
            fix="remove fsdp.selective_ac_option (the compiler chooses within the "
            "budget), or remove fsdp.memory_budget",
            edits={"fsdp.selective_ac_option": None},
            setting="memory_budget",
        )
    ac = ac_setting(spec)
    if ac.mode == "selective_layer" and ac.minor > LAYER_SAC_LAST:
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"fsdp.selective_ac_option {opt} (every {ac.every_n}-th "
            f"block checkpointed): {where} has per-op selective checkpointing only "
            "(its ActivationCheckpointingConfig is selective / full / memory-budget / "
            "none; every-N-layer AC ended with 0.2.x)",
            "fsdp.selective_ac_option",
            related=("launch.versions",),
            fix="set fsdp.selective_ac_option=op, or launch.versions.torchtitan=0.2.2 "
            "for a torchtitan that still checkpoints every N-th layer",
            edits={"fsdp.selective_ac_option": "op"},
            setting="selective_ac_option",
            torchtitan=version,
        )
    if budget is None:
        return
    if not 0.0 <= budget <= 1.0:
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"fsdp.memory_budget ({budget}) is outside [0, 1] (0 = "
            "the memory of full checkpointing of the compiled region, 1 = the "
            "compiler's default)",
            "fsdp.memory_budget",
            fix="set fsdp.memory_budget between 0 and 1, e.g. 0.5 (torchtitan's default)",
            edits={"fsdp.memory_budget": 0.5},
            setting="memory_budget",
            value=budget,
        )
    if not f.compile:
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"fsdp.memory_budget ({budget}) without fsdp.compile: "
            "the budget is a setting of the compiler's partitioner, and torchtitan "
            'refuses it on an eager model ("Memory budget activation checkpointing '
            'requires the model to be compiled")',
            "fsdp.memory_budget",
            related=("fsdp.compile",),
            fix="set fsdp.compile=true, or remove fsdp.memory_budget (per-op selective "
            "checkpointing)",
            edits={"fsdp.compile": True},
            setting="memory_budget",
        )
    if ac.minor < MEMORY_BUDGET_FIRST:
        yield diag(
            R.FSDP_UNSUPPORTED,
            f"fsdp.memory_budget: {where} has no memory-budget "
            "activation checkpointing (it came with torchtitan 0.2.0)",
            "fsdp.memory_budget",
            related=("launch.versions",),
            fix="remove fsdp.memory_budget, or set launch.versions.torchtitan=0.3.0",
            edits={"fsdp.memory_budget": None},
            setting="memory_budget",
            torchtitan=version,
        )
