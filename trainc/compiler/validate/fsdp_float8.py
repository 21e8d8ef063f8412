"""engine=fsdp FP8: torchao's float8 / MX converters as torchtitan applies them (TRC330).

engine=fsdp has no Transformer Engine: its FP8 GEMMs are torchao's, swapped in by torchtitan's
model converters. Which recipes exist depends on the torchtitan version (``launch.versions
.torchtitan``; unset: the release ``torchtitan_args.txt`` is written for, 0.3.0, checked with a
warning only, since an unset version is unchecked at compile time):

* torchtitan 0.3.0 (the wheel's ``torchtitan/components/quantization/float8.py``
  ``Float8LinearConverter.Config.recipe_name: Literal["rowwise", "rowwise_with_gw_hp"]``;
  ``mx.py`` ``MXFP8LinearConverter``, which raises "MXFP8 is only supported on SM100 or later"
  without compute capability 10.0): rowwise, rowwise_with_gw_hp, mxfp8. No tensorwise.
* torchtitan before 0.3.0 (``docs/float8.md`` of pytorch/torchtitan: ``--model.converters
  float8`` with ``--float8.recipe_name`` unset = tensorwise, ``rowwise``,
  ``rowwise_with_gw_hp``; ``--model.converters mx`` for MXFP8): tensorwise, rowwise,
  rowwise_with_gw_hp, mxfp8.

torchao's float8 needs FP8 tensor cores (compute capability 8.9+: ``torch._scaled_mm``); no
A100. delayed and blockwise are Transformer Engine recipes that torchao's converters do not
build (checked with ``launch.entrypoint=torchtitan``). The trainc FSDP2 worker runs no FP8
GEMMs: on CPU this is an error; on CUDA with the trainc entrypoint a warning (the spec then
describes a run by another FSDP runner, e.g. Composer with Transformer Engine, which the
estimates cover) and ``trainc run`` refuses the plan.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.diagnostics import Diagnostic, Severity, diag
from trainc.compiler.support.hardware import GPU_ARCH
from trainc.compiler.targets.torchao import (
    NEEDS_CC,
    TORCHAO_RECIPES,
    recipes_in,
    torchtitan_version,
)
from trainc.schemas import Device, Entrypoint, Fp8Format, TrainSpec


def fsdp_float8(spec: TrainSpec) -> Iterator[Diagnostic]:
    """TRC330 for engine=fsdp with training.fp8_format set: the runner, the recipe in the
    torchtitan version, and the GPU."""
    t = spec.training
    if t.fp8_format is Fp8Format.none:
        return
    recipe = t.fp8_recipe
    if spec.launch.device is Device.cpu:
        yield diag(
            R.LOW_PRECISION_RUNNER,
            "training.fp8_format with engine=fsdp needs FP8 tensor "
            "cores (torchao float8 / MX or Transformer Engine under FSDP); this spec runs "
            "on launch.device=cpu, where the trainc FSDP2 worker has no FP8 GEMMs",
            "training.fp8_format",
            related=("launch.device",),
            fix="set training.fp8_format=none for the CPU run, or launch.device=cuda "
            "with launch.entrypoint=torchtitan",
            edits={"training.fp8_format": "none"},
            engine="fsdp",
            device="cpu",
        )
        return
    if spec.launch.entrypoint is not Entrypoint.torchtitan:
        yield diag(
            R.LOW_PRECISION_RUNNER,
            "training.fp8_format with engine=fsdp and "
            "launch.entrypoint=trainc: the trainc FSDP2 worker has no FP8 GEMMs, so "
            "`trainc run` refuses this plan; the estimates describe an FSDP runner with FP8 "
            "linears (torchtitan / torchao, or Transformer Engine under Composer)",
            "launch.entrypoint",
            related=("training.fp8_format",),
            fix="set launch.entrypoint=torchtitan to emit a runnable FP8 job",
            edits={"launch.entrypoint": "torchtitan"},
            severity=Severity.warning,
            engine="fsdp",
            entrypoint=spec.launch.entrypoint.value,
        )
        return
    if recipe not in TORCHAO_RECIPES:
        yield diag(
            R.LOW_PRECISION_RUNNER,
            f"training.fp8_recipe {recipe.value} is a Transformer "
            "Engine recipe (engine=megatron); engine=fsdp's torchao converters build "
            + ", ".join(r.value for r in TORCHAO_RECIPES),
            "training.fp8_recipe",
            related=("engine",),
            fix="set training.fp8_recipe=rowwise (or tensorwise / mxfp8), or engine=megatron",
            edits={"training.fp8_recipe": "rowwise"},
            recipe=recipe.value,
        )
        return
    version, stated = torchtitan_version(spec)
    have = recipes_in(version)
    if recipe not in have:
        yield diag(
            R.LOW_PRECISION_RUNNER,
            f"training.fp8_recipe {recipe.value} does not exist "
            f"in torchtitan {version}"
            + (
                ""
                if stated
                else " (launch.versions.torchtitan unset: the release "
                "torchtitan_args.txt is written for)"
            )
            + f", which builds {', '.join(r.value for r in have)}",
            "training.fp8_recipe",
            related=("launch.versions",),
            fix=f"set training.fp8_recipe={have[0].value}, or launch.versions.torchtitan "
            "to a release that has it (tensorwise: 0.2.x or older)",
            edits={"training.fp8_recipe": have[0].value},
            severity=Severity.error if stated else Severity.warning,
            recipe=recipe.value,
            torchtitan=version,
        )
    gpu = spec.cluster.gpu
    if gpu in GPU_ARCH:
        arch, cc = GPU_ARCH[gpu]
        need = NEEDS_CC.get(recipe, (8, 9))
        if cc < need:
            fix_recipe = "rowwise" if cc >= (8, 9) else None
            yield diag(
                R.LOW_PRECISION_RUNNER,
                f"training.fp8_recipe {recipe.value} needs compute "
                f"capability {need[0]}.{need[1]}+; cluster.gpu {gpu.value} is {arch} "
                f"({cc[0]}.{cc[1]})",
                "training.fp8_recipe" if fix_recipe else "training.fp8_format",
                related=("cluster.gpu",),
                fix=(
                    f"set training.fp8_recipe={fix_recipe}, or a Blackwell cluster.gpu"
                    if fix_recipe
                    else "set training.fp8_format=none (BF16 GEMMs), or "
                    "an H100 / H200 / Blackwell cluster.gpu"
                ),
                edits=(
                    {"training.fp8_recipe": fix_recipe}
                    if fix_recipe
                    else {"training.fp8_format": "none"}
                ),
                recipe=recipe.value,
                gpu=gpu.value,
            )
