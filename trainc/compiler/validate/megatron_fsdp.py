"""TRC383: Megatron-FSDP (``engine: megatron`` with ``parallel.zero_stage: 3``).

Sources (Megatron-LM core_v0.16.1; docs/engines.md has the summary):

* ``megatron/training/arguments.py`` ``validate_args``: with ``--use-megatron-fsdp`` the
  checkpoint format must be ``fsdp_dtensor`` ("Megatron FSDP only supports fsdp_dtensor
  checkpoint format"), and ``fsdp_dtensor`` is accepted only with ``--use-megatron-fsdp``;
* ``megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py`` ``MegatronFSDP.__init__``
  forces ``overlap_grad_reduce`` and ``overlap_param_gather`` on for optim_grads_params: a
  ``false`` the user wrote would not reach the engine;
* ``validate_args`` also asserts ``CUDA_DEVICE_MAX_CONNECTIONS`` is not 1 with Megatron-FSDP
  (trainc does not export it then; a ``launch.env`` value of 1 is refused);
* ``megatron/core/distributed/fsdp/mcore_fsdp_adapter.py``: the adapter builds a CUDA device mesh
  and CUDA streams. The trainc worker runs Megatron-FSDP's math on CPU with the distributed
  optimizer (an ``override:`` line: sharding the weights changes memory, not the numbers) and
  leaves Megatron-FSDP on CUDA to Megatron-LM's ``pretrain_gpt.py`` (not validated in the worker).
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.derive import Derived
from trainc.compiler.derive import megatron_fsdp as is_megatron_fsdp
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.schemas import CkptFormat, Device, Entrypoint, TrainSpec


def megatron_fsdp(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC383 (see the module docstring)."""
    p, t, r, lc = spec.parallel, spec.training, spec.resume, spec.launch
    on = is_megatron_fsdp(spec)
    fmt = r.checkpoint_format
    if on and fmt is not None and fmt is not CkptFormat.fsdp_dtensor:
        yield diag(
            R.MEGATRON_FSDP,
            f"resume.checkpoint_format is {fmt.value}, but Megatron-FSDP "
            "(zero_stage 3 on engine=megatron) saves and loads fsdp_dtensor only "
            "(Megatron-LM validate_args)",
            "resume.checkpoint_format",
            related=("parallel.zero_stage",),
            fix="set resume.checkpoint_format=fsdp_dtensor (or unset it), or parallel.zero_stage=1",
            edits={"resume.checkpoint_format": None},
            checkpoint_format=fmt.value,
            zero_stage=p.zero_stage,
        )
    if not on and fmt is CkptFormat.fsdp_dtensor:
        yield diag(
            R.MEGATRON_FSDP,
            "resume.checkpoint_format is fsdp_dtensor, which Megatron-LM "
            "accepts only with Megatron-FSDP (engine=megatron, zero_stage 3); this spec "
            f"runs engine={spec.engine.value} with zero_stage {p.zero_stage}",
            "resume.checkpoint_format",
            related=("parallel.zero_stage", "engine"),
            fix="set resume.checkpoint_format=torch_dist, or parallel.zero_stage=3",
            edits={"resume.checkpoint_format": "torch_dist"},
            checkpoint_format=fmt.value,
            zero_stage=p.zero_stage,
        )
    if not on:
        return
    for key in ("overlap_grad_reduce", "overlap_param_gather"):
        if getattr(t, key) is False:
            yield diag(
                R.MEGATRON_FSDP,
                f"training.{key} is false, but Megatron-FSDP "
                "(zero_stage 3) always overlaps its gradient reduce-scatter and "
                "parameter all-gather (MegatronFSDP.__init__ forces both on)",
                f"training.{key}",
                related=("parallel.zero_stage",),
                fix=f"unset training.{key} (or set it true), or parallel.zero_stage=1",
                edits={f"training.{key}": True},
                zero_stage=p.zero_stage,
            )
    if str(lc.env.get("CUDA_DEVICE_MAX_CONNECTIONS", "")).strip() == "1":
        yield diag(
            R.MEGATRON_FSDP,
            "launch.env sets CUDA_DEVICE_MAX_CONNECTIONS=1, but "
            "Megatron-FSDP (zero_stage 3) asserts it is not 1 (Megatron-LM validate_args: "
            "'FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one')",
            "launch.env.CUDA_DEVICE_MAX_CONNECTIONS",
            related=("parallel.zero_stage",),
            fix="remove launch.env.CUDA_DEVICE_MAX_CONNECTIONS (trainc does not export "
            "it for Megatron-FSDP), or parallel.zero_stage=1",
            edits={},
            zero_stage=p.zero_stage,
        )
    if lc.entrypoint is Entrypoint.trainc and lc.device is Device.cuda:
        yield diag(
            R.MEGATRON_FSDP,
            "the trainc worker does not run Megatron-FSDP (zero_stage 3) "
            "on launch.device=cuda: trainc has not validated its sharded DTensor state "
            "in the worker (on launch.device=cpu it runs the same math with the "
            "distributed optimizer)",
            "parallel.zero_stage",
            related=("launch.entrypoint", "launch.device"),
            fix="set launch.entrypoint=megatron-lm (pretrain_gpt.py with "
            "--use-megatron-fsdp) and launch.megatron_lm_path to your Megatron-LM "
            "checkout, or parallel.zero_stage=1",
            edits={"launch.entrypoint": "megatron-lm"},
            zero_stage=p.zero_stage,
            device=lc.device.value,
        )
