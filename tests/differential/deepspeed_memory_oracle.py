"""Run the trainc DeepSpeed worker's own model and engine
(``trainc.launch.worker.engines.deepspeed`` ``build_model`` / ``build_engine``, with the plan's
``ds_config``) for each compiled plan named on
the command line, on 2 CPU processes (gloo, ``DS_ACCELERATOR=cpu``, the worker's CPU set-up:
:func:`trainc.launch.worker.runtime.setup`), take one optimizer step and write, per plan and
rank, the bytes of every model-state object the ZeRO optimizer really holds (deepspeed 0.19.8
``runtime/zero/stage_1_and_2.py`` DeepSpeedZeroOptimizer, ``runtime/zero/stage3.py``
DeepSpeedZeroOptimizer_Stage3) as one JSON file ``OUT`` (a list, one dict per plan, each with
``ranks``: one dict per rank).

Usage: ``torchrun --nproc_per_node 2 deepspeed_memory_oracle.py OUT PORT PLAN.json ...``
(``PORT``: the first of one port per plan). Used by
``test_deepspeed_memory.py``. The gradient terms are read inside the wrapped optimizer's step
(the moment every gradient structure of the step is alive); the rest after the step.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _nbytes(t: Any) -> int:
    return 0 if t is None else int(t.numel() * t.element_size())


def _sum_bytes(ts: Any) -> int:
    return sum(_nbytes(t) for t in ts)


def _stage12(opt: Any, model: Any, at_step: dict[str, int]) -> dict[str, int]:
    return {
        "param_numel": sum(int(t.numel()) for t in opt.bit16_groups_flat),
        "param_bytes": _sum_bytes(opt.bit16_groups_flat),
        "param_element_size": int(opt.bit16_groups_flat[0].element_size()),
        "master_numel": sum(int(t.numel()) for t in opt.single_partition_of_fp32_groups),
        "master_bytes": _sum_bytes(opt.single_partition_of_fp32_groups),
        "padding": sum(int(x) for x in opt.groups_padding),
        "partition_size": sum(int(x) for x in opt.partition_size),
        "groups": len(opt.bit16_groups_flat),
        # ZeRO-Offload's staging buffers: the largest parameter, 16-bit, device and host
        "offload_gpu_buffer_bytes": _nbytes(getattr(opt, "temp_grad_buffer_for_gpu_offload", None)),
        "offload_cpu_buffer_bytes": _nbytes(getattr(opt, "temp_grad_buffer_for_cpu_offload", None)),
        "cpu_offload": int(bool(opt.cpu_offload)),
        **at_step,
    }


def _stage3(opt: Any, model: Any, at_step: dict[str, int]) -> dict[str, int]:
    params = [p for g in opt.fp16_groups for p in g]
    persistent = [p for p in model.parameters() if getattr(p, "ds_persist", False)]
    buf = getattr(opt, "lp_param_buffer", None)
    return {
        "param_numel": int(buf.numel()) if buf is not None else 0,
        "param_bytes": _nbytes(buf),
        "param_element_size": int(params[0].ds_tensor.element_size()),
        "ds_numel": sum(int(p.ds_numel) for p in params),
        "partition_numel": sum(int(p.partition_numel()) for p in params),
        "padding": sum(int(p.padding_size()) for p in params),
        "persistent_numel": sum(int(p.ds_numel) for p in persistent),
        "persistent_bytes": sum(int(p.data.numel() * p.data.element_size()) for p in persistent),
        "persistent_tensors": len(persistent),
        "gathered_after_step_bytes": sum(
            _nbytes(p.data) for p in model.parameters() if not getattr(p, "ds_persist", False)
        ),
        "master_numel": sum(int(t.numel()) for t in opt.fp32_partitioned_groups_flat),
        "master_bytes": _sum_bytes(opt.fp32_partitioned_groups_flat),
        "grad_partition_bytes": _nbytes(opt.grad_partitions_flat_buffer),
        "grad_partition_numel": int(opt.grad_partitions_flat_buffer.numel()),
        "cpu_offload": int(bool(opt.offload_optimizer)),
        **at_step,
    }


def _moments(inner: Any) -> dict[str, int]:
    exp = [s[k] for s in inner.state.values() for k in ("exp_avg", "exp_avg_sq") if k in s]
    steps = [s["step"] for s in inner.state.values() if "step" in s and hasattr(s["step"], "numel")]
    return {
        "adam_bytes": _sum_bytes(exp),
        "adam_numel": sum(int(t.numel()) for t in exp),
        "adam_tensors": len(exp),
        "adam_step_bytes": _sum_bytes(steps),
    }


def _buckets(opt: Any) -> dict[str, int]:
    out = {"bucket_bytes": 0, "bucket_numel": 0}
    for bucket in getattr(opt, "ipg_buckets", {}).values():
        buf = bucket.buffer
        bufs = buf if isinstance(buf, list) else [buf]
        out["bucket_bytes"] += _sum_bytes(b for b in bufs if b is not None)
        out["bucket_numel"] += sum(int(b.numel()) for b in bufs if b is not None)
    return out


def measure(s: Any) -> dict[str, Any]:
    """One plan: build, one step, count (this rank)."""
    import torch
    import torch.distributed as dist

    from trainc.launch.worker import runtime
    from trainc.launch.worker.engines import deepspeed as dsw

    dsw._skip_shm_build()
    dims = runtime.resolve_dims(s)
    model = dsw.build_model(s, dims, runtime.resolve_precision(s))
    engine, _ = dsw.build_engine(s, model)
    opt = engine.optimizer
    inner = opt.optimizer
    at_step: dict[str, int] = {}
    orig = inner.step

    def step(*a: Any, **k: Any) -> Any:
        grads = [p.grad for g in inner.param_groups for p in g["params"] if p.grad is not None]
        at_step["master_grad_bytes"] = _sum_bytes(grads)
        at_step["master_grad_numel"] = sum(int(g.numel()) for g in grads)
        at_step["master_grad_element_size"] = int(grads[0].element_size()) if grads else 0
        at_step["model_grad_bytes"] = sum(
            _nbytes(p.grad) for p in model.parameters() if p.grad is not None
        )
        avg = getattr(opt, "averaged_gradients", {}) or {}
        at_step["averaged_grad_bytes"] = sum(
            _sum_bytes(v if isinstance(v, list) else [v]) for v in avg.values() if v is not None
        )
        at_step["grads_in_partition_bytes"] = _nbytes(getattr(opt, "grads_in_partition", None))
        at_step.update({f"step_{k}": v for k, v in _buckets(opt).items()})
        return orig(*a, **k)

    inner.step = step
    t = dsw.prepare_training(s, dims, engine, engine.gradient_accumulation_steps())
    b = t.batches.microbatch(0, 0)
    out = engine(b["tokens"], b["position_ids"], b.get("attention_mask"), labels=b["labels"])
    mask = b["loss_mask"].view(-1)
    engine.backward((out.float().view(-1) * mask).sum() / mask.sum().clamp(min=1))
    # after backward, before the step: the 16-bit gradients this rank keeps for the step
    avg = getattr(opt, "averaged_gradients", {}) or {}
    backward = {
        "bwd_model_grad_bytes": sum(_nbytes(p.grad) for p in model.parameters()),
        "bwd_grad_accum_bytes": sum(
            _nbytes(getattr(p, "grad_accum", None)) for p in model.parameters()
        ),
        "bwd_averaged_grad_bytes": sum(
            _sum_bytes(v if isinstance(v, list) else [v]) for v in avg.values() if v is not None
        ),
        "bwd_grads_in_partition_bytes": _nbytes(getattr(opt, "grads_in_partition", None)),
    }
    backward |= {f"bwd_{k}": v for k, v in _buckets(opt).items()}
    engine.step()
    stage = engine.zero_optimization_stage()
    got = (_stage3 if stage == 3 else _stage12)(opt, model, at_step)
    got |= _moments(inner) | _buckets(opt) | backward
    got |= {
        "stage": stage,
        "optimizer": type(opt).__name__,
        "model_params": sum(
            int(p.ds_numel if hasattr(p, "ds_numel") else p.numel()) for p in model.parameters()
        ),
        "model_tensors": sum(1 for _ in model.parameters()),
        "largest_tensor": max(
            int(p.ds_numel if hasattr(p, "ds_numel") else p.numel()) for p in model.parameters()
        ),
        "dp": int(engine.dp_world_size),
        "rank": dist.get_rank(),
        "ok": bool(torch.isfinite(out.float()).all()),
    }
    return got


def _run(out_path: str, port: int, plans: list[str]) -> None:
    from trainc.launch.worker import runtime
    from trainc.launch.worker_args import parse_args

    results: list[dict[str, Any]] = []
    for i, plan in enumerate(plans):
        s = runtime.setup(parse_args(["--plan", plan]))
        # one TCPStore per plan, hosted by rank 0 (not torchrun's agent store, which serves one
        # process group only)
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"
        os.environ["MASTER_PORT"] = str(port + i)
        with runtime.distributed(s):
            import torch.distributed as dist

            from trainc.launch.worker.engines import deepspeed as dsw

            try:
                got = measure(s)
            finally:
                dsw._forget_groups()
            ranks: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(ranks, got)
        results.append({"plan": plan, "ranks": ranks})
    if os.environ.get("RANK") == "0":
        with open(out_path, "w") as f:
            json.dump(results, f)


if __name__ == "__main__":
    _run(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
