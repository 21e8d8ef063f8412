"""Build the model the FSDP2 worker trains (``trainc.launch.worker.engines.fsdp.build_model``:
the plain-torch GPT, ``fully_shard`` per block and on the root with the plan's
``MixedPrecisionPolicy`` and mesh), its optimizer (``build_optimizer``), run one forward,
backward and optimizer step on CPU under gloo, and print, as one JSON line (rank 0, prefixed
``FSDPMEM``), what every rank really holds, for each plan.json given:

* ``param_bytes``: the storages of the sharded parameters (``FSDPParam._sharded_param_data``,
  the padded shard the DTensor's local tensor views; torch 2.13
  ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py`` ``FSDPParam._init_sharded_param``),
  with their local (``param_local_numel``) and padded (``param_padded_numel``) element counts;
* ``grad_bytes``: the storages the sharded gradients view (one flat reduce-scatter output per
  ``fully_shard`` group, ``_fsdp_collectives.py`` ``foreach_reduce``);
* ``exp_avg_bytes`` / ``exp_avg_sq_bytes``: AdamW's moments (``torch/optim/adam.py``
  ``Adam._init_group``: ``zeros_like`` of the DTensor parameter), ``step_bytes`` its step
  counters (host scalars unless fused / capturable);
* ``unsharded_after_step_bytes``: unsharded parameter storages still allocated after the step;
* ``peak_unsharded_param_bytes``: the most unsharded parameter bytes allocated at once, sampled
  before every leaf module's forward and backward.

Usage: ``fsdp_state_oracle.py PORT WORLD PLAN.json [PLAN.json ...]`` (ranks spawned here).
"""

from __future__ import annotations

import gc
import json
import os
import sys
from types import SimpleNamespace
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _storages(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (a storage counted once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        if st.nbytes():
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def _local(t: Any) -> torch.Tensor:
    return t._local_tensor if hasattr(t, "_local_tensor") else t


def _fsdp_params(model: torch.nn.Module) -> list[Any]:
    out = []
    for m in model.modules():
        state = getattr(m, "_get_fsdp_state", None)
        if state is None:
            continue
        group = state()._fsdp_param_group
        if group is not None:
            out.extend(group.fsdp_params)
    return out


def _unsharded(fps: list[Any]) -> int:
    tensors = []
    for fp in fps:
        tensors += list(fp.all_gather_outputs)
        up = getattr(fp, "_unsharded_param", None)
        if up is not None:
            tensors.append(up)
    return _storages(tensors)


def measure(plan: dict[str, Any]) -> dict[str, Any]:
    from trainc.launch.shrink import full_dims
    from trainc.launch.worker.engines import fsdp

    cfg = plan["engines"]["fsdp"]
    s = SimpleNamespace(reference=False, device="cpu", seed=1234, plan=plan)
    dims = full_dims(plan)
    mesh = fsdp.build_mesh(s, cfg)  # type: ignore[arg-type]
    model = fsdp.build_model(s, dims, mesh, cfg)  # type: ignore[arg-type]
    opt = fsdp.build_optimizer(model, cfg["optimizer"], 1e-3)
    fps = _fsdp_params(model)
    peak = [0]

    def sample(*_: Any) -> None:
        peak[0] = max(peak[0], _unsharded(fps))

    for m in model.modules():
        if not list(m.children()):
            m.register_forward_pre_hook(sample)
            m.register_full_backward_pre_hook(sample)
    gen = torch.Generator().manual_seed(dist.get_rank())
    tokens = torch.randint(0, dims.vocab_size, (1, dims.seq_length), generator=gen)
    model(tokens).float().mean().backward()
    opt.step()
    params = list(model.parameters())
    states = [opt.state[p] for p in params]
    shapes = {}
    for name, p in model.named_parameters():
        shapes[name] = list(p.shape)
    out = {
        "tensors": len(params),
        "shapes": shapes,
        "param_bytes": _storages([fp._sharded_param_data for fp in fps]),
        "param_local_numel": sum(_local(p).numel() for p in params),
        "param_padded_numel": sum(fp._sharded_param_data.numel() for fp in fps),
        "param_element_size": {str(_local(p).element_size()) for p in params}.pop(),
        "grad_bytes": _storages([_local(p.grad) for p in params]),
        "grad_local_numel": sum(_local(p.grad).numel() for p in params),
        "grad_element_size": {str(_local(p.grad).element_size()) for p in params}.pop(),
        "exp_avg_bytes": _storages([_local(st["exp_avg"]) for st in states]),
        "exp_avg_sq_bytes": _storages([_local(st["exp_avg_sq"]) for st in states]),
        "step_bytes": sum(st["step"].nbytes for st in states),
        "unsharded_after_step_bytes": _unsharded(fps),
        "peak_unsharded_param_bytes": peak[0],
        "param_dtype": str(fps[0].param_dtype),
    }
    del model, opt, params, states
    gc.collect()
    return out


def _rank(rank: int, world: int, port: str, paths: list[str]) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank), WORLD_SIZE=str(world)
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    results = []
    for path in paths:
        with open(path) as f:
            plan = json.load(f)
        mine = measure(plan)
        every: list[Any] = [None] * world
        dist.all_gather_object(every, mine)
        results.append(every)
    if rank == 0:
        sys.stdout.write("FSDPMEM " + json.dumps(results) + "\n")
        sys.stdout.flush()
    dist.destroy_process_group()


if __name__ == "__main__":
    port, world = sys.argv[1], int(sys.argv[2])
    mp.spawn(_rank, args=(world, port, sys.argv[3:]), nprocs=world, join=True)
