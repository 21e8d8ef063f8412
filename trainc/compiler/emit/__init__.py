"""emit: render every artifact from ``plan.json`` (pure functions; text out, nothing written).

Each emitter takes the plan dict and returns ``{file name: text}`` (empty when the artifact does
not apply, e.g. ``ds_config.json`` for engine=megatron). ``report.md`` comes last: it lists the
files the others produced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainc.compiler.emit.deepspeed import ds_config
from trainc.compiler.emit.kubernetes import pytorchjob, trainjob
from trainc.compiler.emit.megatron import megatron_args
from trainc.compiler.emit.megatron_core import megatron_core
from trainc.compiler.emit.report import report
from trainc.compiler.emit.report_html import report_html
from trainc.compiler.emit.scripts import sbatch, torchrun
from trainc.compiler.emit.torchtitan import torchtitan_args
from trainc.compiler.ir import Plan
from trainc.compiler.plan import canonical_json

Emitter = Callable[[dict[str, Any]], dict[str, str]]
EMITTERS: tuple[Emitter, ...] = (
    megatron_args,
    megatron_core,
    ds_config,
    torchtitan_args,
    torchrun,
    sbatch,
    report_html,
    pytorchjob,
    trainjob,
)


def emit(ir: Plan) -> dict[str, str]:
    """All artifacts of a plan, including ``plan.json`` itself and ``report.md``
    (``manifest.json`` is added by :func:`trainc.compiler.support.write.write_artifacts`). Every
    emitter renders the plan.json view (``Plan.to_json()``): each artifact is a view of the file
    it ships next to, and reads nothing else."""
    plan = ir.to_json()
    files = {"plan.json": canonical_json(plan)}
    for emitter in EMITTERS:
        files.update(emitter(plan))
    names = sorted([*files, "report.md", "manifest.json"])
    files.update(report(plan, names))
    return files
