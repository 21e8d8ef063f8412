"""What one rank sees, as one line (run by fake_torchrun.py in place of trainc's worker).

    probe: rank=R world=W local_rank=L group_rank=G node=SLURMD_NODENAME slurm_nodeid=I
           master=ADDR:PORT program=... plan_ok=True allreduce=X expected=Y

With torch it also does a gloo all_reduce over the whole world (the sum of rank+1), which only
completes when every rank joined the same rendezvous. Exit 1 on any mismatch.
"""

import os
import sys


def main(argv: list[str]) -> int:
    env = os.environ
    rank, world = int(env["RANK"]), int(env["WORLD_SIZE"])
    plan = argv[argv.index("--plan") + 1] if "--plan" in argv else ""
    fields = {
        "rank": rank,
        "world": world,
        "local_rank": env.get("LOCAL_RANK"),
        "group_rank": env.get("GROUP_RANK"),
        "node": env.get("SLURMD_NODENAME"),
        "slurm_nodeid": env.get("SLURM_NODEID"),
        "master": f"{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}",
        "program": "+".join(argv),
        "plan_ok": bool(plan) and os.path.isfile(plan),
    }
    ok = fields["plan_ok"]
    if not env.get("TRAINC_PROBE_NO_TORCH"):
        import datetime

        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t)
        expected = world * (world + 1) / 2
        fields.update(allreduce=t.item(), expected=expected)
        ok = ok and t.item() == expected and dist.get_world_size() == world
        dist.barrier()
        dist.destroy_process_group()
    print("probe: " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
