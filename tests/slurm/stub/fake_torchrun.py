"""Stands in for torchrun in the generated scripts when trainc's worker cannot run here.

torchrun.sh runs ``$TORCHRUN --nnodes=N --nproc_per_node=P <rendezvous options> -m
trainc.launch.worker --plan PLAN``. With torch installed this re-runs the real torchrun with the
same launcher options (so the c10d rendezvous across the emulated nodes is the real one) and
``probe.py`` as the program; without torch it starts the P local processes itself, with the
static ranks torchrun would give them (node rank = NODE_RANK, which torchrun.sh takes from each
srun task's SLURM_NODEID). Either way probe.py prints what each rank sees.
"""

import os
import subprocess
import sys

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.py")


def main(argv: list[str]) -> int:
    cut = (
        argv.index("-m")
        if "-m" in argv
        else next(i for i, a in enumerate(argv) if not a.startswith("--"))
    )
    launcher, program = argv[:cut], argv[cut:]
    try:
        import torch.distributed.run  # noqa: F401
    except ImportError:
        pass
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", *launcher, PROBE, *program]
        return subprocess.call(cmd)
    opts = dict(a[2:].split("=", 1) for a in launcher if a.startswith("--") and "=" in a)
    nnodes, nproc = int(opts["nnodes"]), int(opts["nproc_per_node"])
    node = int(os.environ.get("NODE_RANK", "0"))
    procs = []
    for local in range(nproc):
        env = dict(
            os.environ,
            LOCAL_RANK=str(local),
            GROUP_RANK=str(node),
            RANK=str(node * nproc + local),
            WORLD_SIZE=str(nnodes * nproc),
            LOCAL_WORLD_SIZE=str(nproc),
            TRAINC_PROBE_NO_TORCH="1",
        )
        procs.append(subprocess.Popen([sys.executable, PROBE, *program], env=env))
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
