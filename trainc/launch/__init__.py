"""Runtime side: the worker every rank runs, the local torchrun launcher, the Slurm submitter."""
