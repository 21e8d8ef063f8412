"""Runtime side: the worker every rank runs, the local torchrun launcher, the Slurm submitter."""

#: The trainc worker's checkpoint layout record: ``DIR/iter_NNNNNNN/layout.json`` holds the
#: tp / pp / vpp / cp / ep / etp / dp / sp of the run that wrote the shards beside it (JSON, no
#: torch needed to read it), so ``trainc run`` refuses a resume into another layout up front.
CHECKPOINT_LAYOUT_FILE = "layout.json"

#: Written into the checkpoint folder when the worker stopped on SIGUSR1; sbatch.sh (with
#: launch.requeue) requeues the job when it finds it, and ``trainc run`` removes it after an
#: interrupt it asked for.
STOPPED_MARKER = ".stopped-by-signal"
