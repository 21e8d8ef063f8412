"""Per-rank checkpoints for the Megatron-Core path: ``DIR/iter_NNNNNNN/rank_RRRRR.pt`` +
``DIR/latest``.

Each rank writes what it holds: its model chunks, for every (chained) Megatron optimizer the
inner torch optimizer state (Adam moments, step) and its main parameters (the fp32 masters: the
distributed optimizer's shard, Float16Optimizer's copies, or the model params for fp32), and its
random-number state (Python, NumPy, torch's default generator, CUDA's where there is one, and the
tensor-parallel RNG tracker's streams that dropout draws from: what Megatron-LM's
``megatron/training/checkpointing.py`` ``get_rng_state`` records). Loading restores all of it, so
a resumed run continues bit-for-bit, dropout included. The layout is recorded and must match
on load (these are resume checkpoints, not resharding ones).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from trainc.launch import CHECKPOINT_LAYOUT_FILE


def _optimizers(opt: Any) -> list[Any]:
    return list(getattr(opt, "chained_optimizers", None) or [opt])


def _main_params(o: Any) -> list[torch.Tensor]:
    return [p for g in o.optimizer.param_groups for p in g["params"]]


def rng_file(rank: int) -> str:
    """The per-rank random-number state file of the DeepSpeed and FSDP checkpoints."""
    return f"rng_rank_{rank:05d}.pt"


def rng_state(tracker: bool = True) -> dict[str, Any]:
    """This rank's random-number state (restored by :func:`set_rng_state`); ``tracker``: include
    Megatron-Core's tensor-parallel RNG tracker (the Megatron engine; the FSDP one has none)."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
    }
    if tracker:
        from megatron.core import tensor_parallel

        state["tracker"] = tensor_parallel.get_cuda_rng_tracker().get_states()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    if "tracker" in state:
        from megatron.core import tensor_parallel

        tensor_parallel.get_cuda_rng_tracker().set_states(state["tracker"])


def save(directory: str, step: int, chunks: list[Any], opt: Any, layout: dict[str, Any]) -> str:
    """Write this rank's state for ``step``; rank 0 updates ``latest`` after a barrier."""
    it = os.path.join(directory, f"iter_{step:07d}")
    os.makedirs(it, exist_ok=True)
    state = {
        "step": step,
        "layout": layout,
        "model": [c.state_dict() for c in chunks],
        "optim": [
            {
                "inner": o.optimizer.state_dict(),
                "main": [p.detach().clone() for p in _main_params(o)],
            }
            for o in _optimizers(opt)
        ],
        "rng": rng_state(),
    }
    path = os.path.join(it, f"rank_{dist.get_rank():05d}.pt")
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
    dist.barrier()
    if dist.get_rank() == 0:
        # the layout beside the shards, readable without torch: `trainc run` refuses to resume
        # it into another layout before any rank starts (trainc.launch.host.local)
        with open(os.path.join(it, CHECKPOINT_LAYOUT_FILE), "w") as f:
            json.dump(layout, f, sort_keys=True)
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
def load(
    directory: str, chunks: list[Any], opt: Any, layout: dict[str, Any], step: int | None = None
) -> int | None:
    """Restore this rank's state from the checkpoint of ``step`` (default: the latest); returns
    its step (None: there is none)."""
    if step is None:
        step = latest_step(directory)
    if step is None:
        return None
    path = os.path.join(directory, f"iter_{step:07d}", f"rank_{dist.get_rank():05d}.pt")
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state["layout"] != layout:
        raise RuntimeError(
            f"checkpoint {path} was written by layout {state['layout']}, this run is {layout}"
        )
    for c, sd in zip(chunks, state["model"], strict=True):
        c.load_state_dict(sd)
    for o, osd in zip(_optimizers(opt), state["optim"], strict=True):
        o.optimizer.load_state_dict(osd["inner"])
        for p, saved in zip(_main_params(o), osd["main"], strict=True):
            p.copy_(saved.to(p.device))
    set_rng_state(state["rng"])
    return step
