"""Per-rank checkpoints for the Megatron-Core path: ``DIR/iter_NNNNNNN/rank_RRRRR.pt`` +
``DIR/latest``.

Each rank writes what it holds: its model chunks, and for every (chained) Megatron optimizer the
inner torch optimizer state (Adam moments, step) and its main parameters (the fp32 masters: the
distributed optimizer's shard, Float16Optimizer's copies, or the model params for fp32). Loading
restores all three, so a resumed run continues bit-for-bit. The layout is recorded and must match
on load (these are resume checkpoints, not resharding ones).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist


def _optimizers(opt: Any) -> list[Any]:
    return list(getattr(opt, "chained_optimizers", None) or [opt])


def _main_params(o: Any) -> list[torch.Tensor]:
    return [p for g in o.optimizer.param_groups for p in g["params"]]


def save(directory: str, step: int, chunks: list[Any], opt: Any, layout: dict[str, Any]) -> str:
    """Write this rank's state for ``step``; rank 0 updates ``latest`` after a barrier."""
    it = os.path.join(directory, f"iter_{step:07d}")
    os.makedirs(it, exist_ok=True)
    state = {
        "step": step, "layout": layout,
        "model": [c.state_dict() for c in chunks],
        "optim": [{"inner": o.optimizer.state_dict(),
                   "main": [p.detach().clone() for p in _main_params(o)]}
                  for o in _optimizers(opt)],
    }
    path = os.path.join(it, f"rank_{dist.get_rank():05d}.pt")
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
    dist.barrier()
    if dist.get_rank() == 0:
        with open(os.path.join(directory, "latest.tmp"), "w") as f:
            f.write(f"{step}\n")
        os.replace(os.path.join(directory, "latest.tmp"), os.path.join(directory, "latest"))
    dist.barrier()
    return it


def latest_step(directory: str) -> int | None:
    """The step recorded in ``DIR/latest``, or None when there is no checkpoint."""
    try:
        with open(os.path.join(directory, "latest")) as f:
            return int(f.read().strip())
    except FileNotFoundError:
        return None


@torch.no_grad()
def load(directory: str, chunks: list[Any], opt: Any, layout: dict[str, Any],
         step: int | None = None) -> int | None:
    """Restore this rank's state from the checkpoint of ``step`` (default: the latest); returns
    its step (None: there is none)."""
    if step is None:
        step = latest_step(directory)
    if step is None:
        return None
    path = os.path.join(directory, f"iter_{step:07d}", f"rank_{dist.get_rank():05d}.pt")
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state["layout"] != layout:
        raise RuntimeError(f"checkpoint {path} was written by layout {state['layout']}, "
                           f"this run is {layout}")
    for c, sd in zip(chunks, state["model"], strict=True):
        c.load_state_dict(sd)
    for o, osd in zip(_optimizers(opt), state["optim"], strict=True):
        o.optimizer.load_state_dict(osd["inner"])
        for p, saved in zip(_main_params(o), osd["main"], strict=True):
            p.copy_(saved.to(p.device))
    return step
