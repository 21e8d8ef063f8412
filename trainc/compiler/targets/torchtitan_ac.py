"""torchtitan's activation checkpointing as engine=fsdp runs it, decided once per plan, and its
command-line spelling per torchtitan version.

The spec says *whether* blocks are checkpointed with ``training.recompute`` (none, full,
selective) and *how* torchtitan selects with ``fsdp.selective_ac_option`` (``op`` or N) and
``fsdp.memory_budget``. The modes (:data:`MODES`):

* ``none``: every block keeps all its activations.
* ``full``: every transformer block wrapped in ``checkpoint_wrapper``: only the block input is
  kept, the whole block is recomputed in backward. torchtitan 0.3.0
  ``torchtitan/distributed/activation_checkpoint.py`` ``FullAC._wrap_block``; before 0.3.0
  ``_apply_full_ac`` with ``--activation_checkpoint.mode full``.
* ``selective_op``: per-op selective activation checkpointing (SAC) of every block, the policy
  of 0.3.0 ``SelectiveAC._wrap_block`` / ``_get_custom_policy``: the outputs of the ops in
  ``_get_default_save_ops`` are saved (``torch._functorch.partitioners.get_default_op_list()
  .compute_intensive_ops``: ``aten.mm``, ``aten._scaled_mm``, the flash / efficient SDPA
  kernels; plus cuDNN / math SDPA, ``aten.max``, flex attention, ``aten.linear``, ``topk``, and
  the ``reduce_scatter_tensor`` / ``all_to_all_single`` collectives), except every second
  ``aten.mm`` / ``aten.linear`` of a block (the counter restarts per block forward); the rest
  (norms, RoPE, activations, all-gathers, all-reduces) is recomputed. With torchao float8 the
  policy sees ``aten.mm`` on the float8 tensor subclass (a dispatch mode runs before a
  subclass's ``__torch_dispatch__``), so the same GEMMs are saved. Before 0.3.0 the same
  policy with per-model save lists (``models/llama3/infra/parallelize.py``
  ``_op_sac_save_list`` @ v0.2.2, ``aten.mm`` and the SDPA kernels),
  ``--activation_checkpoint.selective_ac_option op``.
* ``selective_layer``: every N-th block (the N-th, 2N-th, ... a rank builds) fully
  checkpointed, the others kept whole: ``_apply_layer_sac`` @ v0.2.2 (``_layer_sac_count %
  ac_freq == 0``), ``--activation_checkpoint.selective_ac_option N``. torchtitan 0.3.0 has no
  such mode (its ``ActivationCheckpointingConfig`` is selective / full / memory-budget / none;
  removed by pytorch/torchtitan#2357).
* ``memory_budget``: no wrapper; the compiler's min-cut partitioner recomputes what keeps the
  saved activations within ``memory_budget`` of the range between full checkpointing of the
  compiled region (0.0) and its runtime-optimised default (1.0)
  (``torch._functorch.config.activation_memory_budget``; 0.3.0 ``MemoryBudgetAC.apply``, from
  torchtitan 0.2.0 ``--activation_checkpoint.mode memory_budget``). Needs ``torch.compile`` of
  the model (0.3.0 ``Trainer.Config.__post_init__`` raises otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainc.compiler.targets.torchao import _minor, torchtitan_version
from trainc.schemas import Recompute, TrainSpec

#: The activation-checkpoint modes of engine=fsdp.
MODES = ("none", "full", "selective_op", "selective_layer", "memory_budget")
#: The last torchtitan minor version with every-N-layer selective AC (``selective_ac_option``
#: an integer): 0.2.x; 0.3.0 has per-op SAC only.
LAYER_SAC_LAST = (0, 2)
#: The first torchtitan minor version with the memory-budget mode (v0.2.0 ``job_config.py``
#: ``ActivationCheckpoint.mode: Literal["selective", "full", "memory_budget", "none"]``; v0.1.0
#: has ``selective``, ``full``, ``none``).
MEMORY_BUDGET_FIRST = (0, 2)
#: The first torchtitan minor version whose config is the tyro union
#: ``ActivationCheckpointingConfig`` (subcommands ``activation-checkpoint:<name>``) instead of
#: ``--activation_checkpoint.mode``.
SUBCOMMANDS_FIRST = (0, 3)
#: The first torchtitan minor version whose Llama 3 blocks project q, k and v with one fused
#: ``wqkv`` linear (0.3.0 ``models/llama3/__init__.py`` ``fuse_qkv=True``; v0.2.2
#: ``self.wq(x), self.wk(x), self.wv(x)``): it changes which GEMMs per-op SAC recomputes.
FUSED_QKV_FIRST = (0, 3)
#: torchtitan 0.3.0 subcommand per mode.
SUBCOMMAND = {
    "none": "none",
    "full": "full",
    "selective_op": "selective",
    "memory_budget": "memory-budget",
}


@dataclass(frozen=True)
class AcSetting:
    """One plan's activation checkpointing: ``mode`` (one of :data:`MODES`), ``every_n``
    (selective_layer: the N; else None), ``memory_budget`` (memory_budget mode: in [0, 1];
    else None), ``version`` (the torchtitan version the flags are written for)."""

    mode: str
    every_n: int | None
    memory_budget: float | None
    version: str

    @property
    def minor(self) -> tuple[int, int]:
        """(major, minor) of ``version``; an unparsable one reads as 0.3."""
        return _minor(self.version) or (0, 3)


def parse_option(option: str | None) -> int | str | None:
    """``fsdp.selective_ac_option`` as torchtitan reads it: ``"op"``, a positive int N, or
    None when unset or neither (the validator reports that, TRC344).

    >>> parse_option("op"), parse_option("2"), parse_option("0"), parse_option("x")
    ('op', 2, None, None)
    """
    if option is None:
        return None
    text = option.strip()
    if text == "op":
        return "op"
    return int(text) if text.isdigit() and int(text) >= 1 else None


def ac_setting(spec: TrainSpec) -> AcSetting:
    """The mode engine=fsdp runs (see the module docstring): ``training.recompute`` none /
    full as they are; selective with ``fsdp.memory_budget`` set is memory_budget, with
    ``fsdp.selective_ac_option`` N is selective_layer, else (``op`` or unset: torchtitan
    0.3.0's only selective mode and its default policy) selective_op. A spec the validator
    rejects (TRC344: bad option, a budget with recompute none/full) is read as the nearest
    mode; nothing is emitted for it."""
    f, t = spec.fsdp, spec.training
    version = torchtitan_version(spec)[0]
    if t.recompute is Recompute.none:
        return AcSetting("none", None, None, version)
    if t.recompute is Recompute.full:
        return AcSetting("full", None, None, version)
    if f.memory_budget is not None:
        return AcSetting("memory_budget", None, float(f.memory_budget), version)
    opt = parse_option(f.selective_ac_option)
    if isinstance(opt, int):
        return AcSetting("selective_layer", opt, None, version)
    return AcSetting("selective_op", None, None, version)


def checkpointed_blocks(n_blocks: int, every_n: int) -> list[bool]:
    """Which of a rank's ``n_blocks`` blocks (in build order) every-N selective AC wraps in
    ``checkpoint_wrapper``: the N-th, 2N-th, ... (v0.2.2 ``_apply_layer_sac``: a counter
    incremented per block, checkpoint when ``count % N == 0``).

    >>> checkpointed_blocks(5, 2)
    [False, True, False, True, False]
    """
    return [(k + 1) % every_n == 0 for k in range(n_blocks)]


def activation_checkpoint(spec: TrainSpec) -> dict[str, Any]:
    """``engines.fsdp.activation_checkpoint``: ``mode`` (training.recompute, which the worker
    reads), ``torchtitan_mode`` (one of :data:`MODES`), ``every_n_layers``, ``memory_budget``,
    ``per_block`` (a per-block wrapper is applied: full, selective_op, selective_layer) and, for
    selective_op, the save policy (``save_policy``)."""
    ac = ac_setting(spec)
    out: dict[str, Any] = {
        "mode": spec.training.recompute.value,
        "torchtitan_mode": ac.mode,
        "every_n_layers": ac.every_n,
        "memory_budget": ac.memory_budget,
        "per_block": ac.mode in ("full", "selective_op", "selective_layer"),
    }
    if ac.mode == "selective_op":
        out["save_policy"] = (
            "outputs of mm/linear (all but every second per block), "
            "scaled_mm, SDPA, max, topk, reduce_scatter, all_to_all; "
            "the rest recomputed"
        )
    return out


def torchtitan_ac_args(spec: TrainSpec) -> list[list[str]]:
    """The activation-checkpoint flags of ``torchtitan_args.txt`` for the spec's torchtitan
    version. From 0.3.0 a tyro subcommand (``activation-checkpoint:selective`` / ``full`` /
    ``memory-budget`` / ``none``) followed by its own options (``--activation_checkpoint
    .memory_budget x``): tyro takes a subcommand after every option of the parent, so these
    lines must end the file. Before 0.3.0 ``--activation_checkpoint.mode`` with
    ``--activation_checkpoint.selective_ac_option`` (op or N) or
    ``--activation_checkpoint.memory_budget``. Checked with tyro 1.0.17 against torchtitan
    0.3.0's ``ActivationCheckpointingConfig``
    (tests/unit/compiler/targets/test_torchtitan_ac.py)."""
    ac = ac_setting(spec)
    if ac.minor >= SUBCOMMANDS_FIRST:
        args = [[f"activation-checkpoint:{SUBCOMMAND.get(ac.mode, 'selective')}"]]
        if ac.mode == "memory_budget":
            args.append(["--activation_checkpoint.memory_budget", repr(ac.memory_budget)])
        return args
    mode = {"selective_op": "selective", "selective_layer": "selective"}.get(ac.mode, ac.mode)
    args = [["--activation_checkpoint.mode", mode]]
    if ac.mode == "selective_op":
        args.append(["--activation_checkpoint.selective_ac_option", "op"])
    elif ac.mode == "selective_layer":
        args.append(["--activation_checkpoint.selective_ac_option", str(ac.every_n)])
    elif ac.mode == "memory_budget":
        args.append(["--activation_checkpoint.memory_budget", repr(ac.memory_budget)])
    return args
