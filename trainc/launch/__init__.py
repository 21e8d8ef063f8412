"""Runtime side: the worker every rank runs, the local torchrun launcher, the Slurm submitter.

What both sides share: the checkpoint files they agree on and :data:`WORKER_ENGINES`, what the
trainc worker does differently per engine (a registration keyed by :class:`~trainc.schemas.Engine`,
read by the rank side to dispatch and prepare the process, and by the login-node side to check a
resume).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from trainc.schemas import Engine

#: The trainc worker's checkpoint layout record: ``DIR/iter_NNNNNNN/layout.json`` holds the
#: tp / pp / vpp / cp / ep / etp / dp / sp of the run that wrote the shards beside it (JSON, no
#: torch needed to read it), so ``trainc run`` refuses a resume into another layout up front.
CHECKPOINT_LAYOUT_FILE = "layout.json"

#: Written into the checkpoint folder when the worker stopped on SIGUSR1; sbatch.sh (with
#: launch.requeue) requeues the job when it finds it, and ``trainc run`` removes it after an
#: interrupt it asked for.
STOPPED_MARKER = ".stopped-by-signal"


@dataclass(frozen=True, slots=True)
class WorkerEngine:
    """How the trainc worker runs one engine (``spec.engine``)."""

    #: The rank side's training loop: a module with ``run(settings)``, imported only once the
    #: process is prepared (torch, Megatron-Core, DeepSpeed load then).
    module: str
    #: The model is Megatron-Core's (``GPTModel``): on CPU the worker applies
    #: :mod:`trainc.launch.worker.cpu_compat`'s patches before the loop imports it.
    megatron_core: bool
    #: Environment defaults on ``--device cpu`` (``os.environ.setdefault``), set before torch
    #: is imported: DeepSpeed picks its accelerator from ``DS_ACCELERATOR`` at import.
    cpu_env: tuple[tuple[str, str], ...]
    #: Its checkpoints carry :data:`CHECKPOINT_LAYOUT_FILE` beside the shards, which
    #: ``trainc run`` compares with the plan before resuming.
    layout_record: bool


#: The trainc worker's engines (``launch.entrypoint: trainc``).
WORKER_ENGINES: Mapping[Engine, WorkerEngine] = MappingProxyType(
    {
        Engine.megatron: WorkerEngine(
            module="trainc.launch.worker.engines.megatron",
            megatron_core=True,
            cpu_env=(),
            layout_record=True,
        ),
        Engine.deepspeed: WorkerEngine(
            module="trainc.launch.worker.engines.deepspeed",
            megatron_core=True,
            cpu_env=(("DS_ACCELERATOR", "cpu"),),
            layout_record=False,
        ),
        Engine.fsdp: WorkerEngine(
            module="trainc.launch.worker.engines.fsdp",
            megatron_core=False,
            cpu_env=(),
            layout_record=False,
        ),
    }
)


def worker_engine(name: str) -> WorkerEngine:
    """The :data:`WORKER_ENGINES` entry of plan.json's ``spec.engine`` (its value, e.g.
    ``"megatron"``). Raises ValueError for a name that is no :class:`~trainc.schemas.Engine`."""
    return WORKER_ENGINES[Engine(name)]
