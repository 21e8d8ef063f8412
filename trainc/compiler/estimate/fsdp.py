"""engine=fsdp (PyTorch FSDP2): model-state memory and data-parallel communication per GPU.

Memory (bytes on one GPU of a pipeline stage holding ``P`` parameters after TP/PP; shard group
``n = dp_shard x cp``, the mesh dims ``fully_shard`` shards over):

* sharded states (``fully_shard`` keeps each parameter as a DTensor shard in its original dtype,
  fp32, and its gradient shard in the same dtype; torch 2.13 ``_fsdp_param.py``): fp32 master
  ``4P/n``, gradient ``4P/n``, optimizer ``8P/n`` for AdamW (exp_avg, exp_avg_sq), ``4P/n`` for
  SGD with momentum. With ``fsdp.cpu_offload`` all three live in host memory (CPUOffloadPolicy).
* unsharded parameters during compute, in ``param_dtype`` (MixedPrecisionPolicy): with
  ``reshard_after_forward`` one block being computed plus the next one prefetched (FSDP2's
  implicit forward prefetch and backward prefetch, ``_fsdp_state.py``) = 2 x the largest block;
  without it every block stays gathered from its forward to its backward, the peak at the start
  of backward = the whole stage ``P`` (ZeRO-2-like). The root module (embedding, final norm,
  output) is not resharded after forward (as torchtitan), so its gathered copy is counted in the
  largest-module term.
* unsharded gradients of the block whose reduce-scatter is in flight plus the one being computed:
  2 x largest block in ``reduce_dtype``.

Communication per GPU per step (``M`` micro-batches; FSDP2 reduce-scatters at every backward,
as torchtitan runs gradient accumulation): per micro-batch an all-gather of ``P`` in param_dtype
in forward, another in backward when reshard_after_forward, a reduce-scatter of ``P`` gradients
in reduce_dtype, and with HSDP an all-reduce of the ``P/n`` shard over ``dp_replicate``
(``fully_shard`` on a 2-D mesh; Zhao et al. 2023, PyTorch FSDP, arXiv:2304.11277 §3.2-3.3). The
all-gathers are prefetched one block ahead and the reduce-scatters run behind the next block's
backward, so the time model (``time._dp_exposed``) leaves exposed what exceeds the stage's
compute plus the first block's share; the shard and replicate rings cross the scale-out fabric
with as many NICs in parallel as they have members per NVLink domain (:func:`fsdp_members`).

Experts (torchtitan 0.3.0, ep > 1): the routed experts ``E`` of a GPU (``num_experts / ep`` of
each MoE layer, not tensor-parallel) are FSDP-sharded over their own group ``efsdp = dp_shard x
cp x tp / ep`` (``ParallelDims.build_mesh``; ``apply_fsdp_to_decoder`` with ``edp_mesh``), the
dense parameters ``D`` over ``dp_shard x cp``: sharded states count ``D/(dp_shard x cp) +
E/efsdp`` (:func:`sharded_params`), and the experts are gathered and reduce-scattered over
efsdp as their own collectives. The dispatch and combine all-to-all over ep is
``comm.stage_comm``'s (the same term as Megatron-Core's alltoall dispatcher).
"""

from __future__ import annotations

from trainc.compiler.estimate.comm import (
    StageComm,
    all_gather_bytes,
    all_reduce_bytes,
)
from trainc.compiler.estimate.memory import StateBytes
from trainc.compiler.estimate.params import StageParams
from trainc.compiler.ir import Plan, filled
from trainc.schemas import FsdpDtype, Optimizer, TrainSpec

#: bytes per element of an FSDP dtype
DTYPE_BYTES = {FsdpDtype.bf16: 2, FsdpDtype.fp32: 4}


def shard_group(spec: TrainSpec) -> int:
    """Ranks one parameter is sharded over: dp_shard x cp (torchtitan's ``dp_shard_cp``)."""
    return filled(spec.fsdp.dp_shard, "fsdp.dp_shard") * spec.parallel.cp


def expert_shard_group(spec: TrainSpec) -> int:
    """Ranks one routed-expert parameter is FSDP-sharded over: with ep > 1 torchtitan's
    ``efsdp = dp_shard x cp x tp / ep`` (the experts' own mesh, ``ParallelDims.build_mesh``;
    ``apply_fsdp_to_decoder`` gives them ``edp_mesh``), else the dense shard group (the experts
    are then tensor-parallel over tp and sharded as any parameter). Dense models: the dense
    group."""
    p = spec.parallel
    if p.ep == 1:
        return shard_group(spec)
    return filled(spec.fsdp.dp_shard, "fsdp.dp_shard") * p.cp * p.tp // p.ep


def sharded_params(spec: TrainSpec, sp: StageParams) -> float:
    """Parameters of ``sp`` one GPU keeps as its FSDP2 shard (count): ``dense / (dp_shard x cp)
    + expert / efsdp`` (:func:`shard_group`, :func:`expert_shard_group`). ``sp.expert`` is
    already the EP rank's experts (``num_experts / ep`` of each MoE layer, etp 1 with ep > 1)."""
    return sp.dense / shard_group(spec) + sp.expert / expert_shard_group(spec)


def fsdp_states(spec: TrainSpec, sp: StageParams) -> StateBytes:
    """Model-state bytes of one GPU holding ``sp`` (see the module docstring; exact numbers
    in tests/unit/compiler/targets/test_fsdp.py and, with experts,
    tests/unit/compiler/validate/test_fsdp_moe.py): the sharded states count
    :func:`sharded_params` (dense over dp_shard x cp, experts over efsdp)."""
    f = spec.fsdp
    shard = sharded_params(spec, sp)
    pd = DTYPE_BYTES[filled(f.param_dtype, "fsdp.param_dtype")]
    rd = DTYPE_BYTES[f.reduce_dtype]
    opt_b = 8 if spec.training.optimizer is Optimizer.adam else 4
    host = 0.0 if f.cpu_offload else 1.0
    gathered = 2 * sp.largest_layer if f.reshard_after_forward else sp.total + sp.largest_layer
    return StateBytes(
        params=host * 4 * shard + pd * gathered,
        grads=host * 4 * shard + rd * 2 * sp.largest_layer,
        optimizer=host * opt_b * shard,
    )


def add_fsdp_comm(spec: TrainSpec, plan: Plan, sc: StageComm, sp: StageParams) -> None:
    """Add the FSDP2 collectives of one stage's GPU for one step to ``sc`` (axis ``dp``; group
    kinds ``fsdp_shard`` / ``fsdp_replicate`` for :func:`fsdp_crossings`)."""
    f, M = spec.fsdp, plan.derived.num_microbatches
    n, r = shard_group(spec), f.dp_replicate
    pd = DTYPE_BYTES[filled(f.param_dtype, "fsdp.param_dtype")]
    rd = DTYPE_BYTES[f.reduce_dtype]
    gathers = 2 if f.reshard_after_forward else 1
    own = spec.parallel.ep > 1  # the experts have their own FSDP group (efsdp)
    dense = sp.dense if own else sp.total
    if n > 1:
        ag = sc.get(
            "dp",
            "fsdp param all_gather (fwd+bwd)" if gathers == 2 else "fsdp param all_gather (fwd)",
            n,
        )
        ag.add(all_gather_bytes(n, dense * pd), times=gathers * M)
        ag.group = "fsdp_shard"
        rs = sc.get("dp", "fsdp grad reduce_scatter", n)
        rs.add(all_gather_bytes(n, dense * rd), times=M)
        rs.group = "fsdp_shard"
    n_e = expert_shard_group(spec)
    if own and n_e > 1 and sp.expert:
        ag = sc.get(
            "dp",
            "fsdp expert param all_gather (fwd+bwd)"
            if gathers == 2
            else "fsdp expert param all_gather (fwd)",
            n_e,
        )
        ag.add(all_gather_bytes(n_e, sp.expert * pd), times=gathers * M)
        ag.group = "fsdp_expert"
        rs = sc.get("dp", "fsdp expert grad reduce_scatter", n_e)
        rs.add(all_gather_bytes(n_e, sp.expert * rd), times=M)
        rs.group = "fsdp_expert"
    if r > 1:
        ar = sc.get("dp", "hsdp grad all_reduce (replicate)", r)
        ar.add(all_reduce_bytes(r, sharded_params(spec, sp) * rd), times=M)
        ar.group = "fsdp_replicate"


def fsdp_crossings(spec: TrainSpec) -> dict[str, bool]:
    """Whether the shard and replicate groups leave an NVLink domain. The mesh is
    (pp, dp_replicate, dp_shard, cp, tp) row-major (tp innermost, as Megatron's tp-cp-dp-pp
    order): a shard group spans ``dp_shard x cp x tp`` consecutive ranks, a replicate group
    strides by that many."""
    f, p = spec.fsdp, spec.parallel
    domain = filled(spec.cluster.nvlink_domain_size, "cluster.nvlink_domain_size")
    inner = p.cp * p.tp
    shard = filled(f.dp_shard, "fsdp.dp_shard")
    out = {
        "fsdp_shard": shard * inner > domain and shard * p.cp > 1,
        "fsdp_replicate": f.dp_replicate > 1 and f.dp_replicate * shard * inner > domain,
    }
    if p.ep > 1:  # efsdp strides by ep over the same dp_shard x cp x tp consecutive ranks
        out["fsdp_expert"] = shard * inner > domain and expert_shard_group(spec) > 1
    return out


def fsdp_members(spec: TrainSpec) -> dict[str, int]:
    """Members per NVLink domain of the shard and replicate groups (the rail-optimised fabric's
    parallel NICs, as ``rankmap.members_per_domain`` for Megatron's groups): the shard group
    strides by ``tp`` over ``dp_shard x cp x tp`` consecutive ranks, the replicate group by
    ``dp_shard x cp x tp``, with ep > 1 the experts' efsdp group (``fsdp_expert``) by ``ep``
    over the same span.

    >>> from types import SimpleNamespace as N
    >>> fsdp_members(N(fsdp=N(dp_shard=128, dp_replicate=1), parallel=N(cp=1, tp=1, ep=1),
    ...                cluster=N(nvlink_domain_size=8)))
    {'fsdp_shard': 8, 'fsdp_replicate': 1}
    """
    f, p = spec.fsdp, spec.parallel
    domain = max(filled(spec.cluster.nvlink_domain_size, "cluster.nvlink_domain_size"), 1)
    shard = filled(f.dp_shard, "fsdp.dp_shard")
    inner = shard * p.cp * p.tp
    out = {
        "fsdp_shard": max(min(domain, inner) // max(p.tp, 1), 1),
        "fsdp_replicate": max(domain // max(inner, 1), 1) if f.dp_replicate > 1 else 1,
    }
    if p.ep > 1:
        out["fsdp_expert"] = max(min(domain, inner) // p.ep, 1)
    return out
