"""engine=fsdp (PyTorch FSDP2): model-state memory and data-parallel communication per GPU.

Memory (bytes on one GPU of a pipeline stage holding ``P`` parameters after TP/PP; shard group
``n = dp_shard x cp``, the mesh dims ``fully_shard`` shards over):

* sharded states (``fully_shard`` keeps each parameter as a DTensor shard in its original dtype,
  fp32, and its gradient shard in the same dtype; torch 2.13 ``_fsdp_param.py``): fp32 master
  ``4P/n``, gradient ``4P/n``, optimizer ``8P/n`` for AdamW (exp_avg, exp_avg_sq), ``4P/n`` for
  SGD with momentum. With ``fsdp.cpu_offload`` all three live in host memory (CPUOffloadPolicy):
  :func:`offload_host_bytes_per_node`, and the copies and CPU step :func:`offload_seconds`.
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
from trainc.compiler.estimate.host import (
    CPU_ADAM_BYTES_PER_PARAM,
    HOST_MEMORY_BYTES_PER_S,
    PCIE_BYTES_PER_S,
)
from trainc.compiler.estimate.memory import StateBytes
from trainc.compiler.estimate.params import StageParams, stage_params
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


def optimizer_bytes(spec: TrainSpec) -> int:
    """Bytes of optimizer state per sharded parameter: AdamW's ``exp_avg`` and ``exp_avg_sq``
    in fp32 (8), SGD's momentum buffer (4) (torch 2.13 ``torch/optim/adamw.py``, ``sgd.py``:
    the states take the dtype of the fp32 sharded parameter)."""
    return 8 if spec.training.optimizer is Optimizer.adam else 4


def fsdp_states(spec: TrainSpec, sp: StageParams) -> StateBytes:
    """Model-state bytes of one GPU holding ``sp`` (see the module docstring; exact numbers
    in tests/unit/compiler/targets/test_fsdp.py and, with experts,
    tests/unit/compiler/validate/test_fsdp_moe.py): the sharded states count
    :func:`sharded_params` (dense over dp_shard x cp, experts over efsdp)."""
    f = spec.fsdp
    shard = sharded_params(spec, sp)
    pd = DTYPE_BYTES[filled(f.param_dtype, "fsdp.param_dtype")]
    rd = DTYPE_BYTES[f.reduce_dtype]
    opt_b = optimizer_bytes(spec)
    host = 0.0 if f.cpu_offload else 1.0
    gathered = 2 * sp.largest_layer if f.reshard_after_forward else sp.total + sp.largest_layer
    return StateBytes(
        params=host * 4 * shard + pd * gathered,
        grads=host * 4 * shard + rd * 2 * sp.largest_layer,
        optimizer=host * opt_b * shard,
    )


def offload_host_bytes(spec: TrainSpec, sp: StageParams) -> float:
    """Host bytes one GPU of a stage holding ``sp`` keeps in (pinned) host memory under
    ``fsdp.cpu_offload`` (0.0 without it).

    torch 2.13 ``CPUOffloadPolicy`` (``torch/distributed/fsdp/_fully_shard/_fsdp_api.py``;
    torchtitan 0.3.0 ``training.enable_cpu_offload``): the sharded parameter stays on the CPU in
    its original dtype, fp32 (``FSDPParam._init_sharded_param`` pins it, ``_fsdp_param.py``),
    its reduce-scattered gradient is copied to the CPU in that dtype (``foreach_reduce``,
    ``_fsdp_collectives.py``), and the optimizer, built over the CPU parameters, keeps its
    states there. Per sharded parameter (:func:`sharded_params`): ``4 + 4 +``
    :func:`optimizer_bytes` = 16 bytes with AdamW, 12 with SGD."""
    if not spec.fsdp.cpu_offload:
        return 0.0
    return sharded_params(spec, sp) * (4 + 4 + optimizer_bytes(spec))


def offload_host_bytes_per_node(spec: TrainSpec, plan: Plan) -> float:
    """Host bytes per node that FSDP2's CPU offload keeps (0.0 without ``fsdp.cpu_offload``):
    :func:`offload_host_bytes` of the most loaded pipeline stage's GPU times
    ``cluster.gpus_per_node`` (every GPU of the node holds its own shard; for pp > 1 a bound,
    as a node may hold GPUs of lighter stages). Pinned buffers and the allocator's slack come
    on top: the fit check applies its buffer factor (``fit.HOST_BUFFER_FACTOR``)."""
    if not spec.fsdp.cpu_offload:
        return 0.0
    most = max(offload_host_bytes(spec, sp) for sp in stage_params(spec, plan))
    return most * spec.cluster.gpus_per_node


#: Host bytes torch's CPU AdamW streams per sharded parameter per step with FSDP2 offload:
#: DeepSpeed's fused update (:data:`.host.CPU_ADAM_BYTES_PER_PARAM`: read the fp32 parameter,
#: gradient and both moments, write parameter and moments) without the 16-bit copy it writes
#: for the GPU (FSDP2 copies the fp32 shard itself and casts it on the GPU): 28 bytes.
CPU_ADAMW_BYTES_PER_PARAM = CPU_ADAM_BYTES_PER_PARAM - 2
#: The same for SGD with momentum: read parameter, gradient and momentum, write parameter and
#: momentum (fp32): 20 bytes.
CPU_SGD_BYTES_PER_PARAM = 20
#: Host bytes of the CPU gradient accumulation per sharded parameter and micro-batch after the
#: first: ``sharded_param.grad += new_sharded_grad`` (fp32: read both, write one).
CPU_GRAD_ADD_BYTES_PER_PARAM = 12


def offload_seconds(spec: TrainSpec, plan: Plan, sp: StageParams, compute: float) -> float:
    """Exposed seconds per step that ``fsdp.cpu_offload`` adds on one GPU of a stage holding
    ``sp`` whose compute takes ``compute`` seconds per step (0.0 without the offload).

    With ``S`` = :func:`sharded_params`, ``M`` micro-batches, ``g`` = 2 all-gathers per
    micro-batch with ``reshard_after_forward`` (else 1), PCIe at
    :data:`.host.PCIE_BYTES_PER_S` per direction and the node's host memory bandwidth
    :data:`.host.HOST_MEMORY_BYTES_PER_S` shared by its ``gpus_per_node`` GPUs (``h`` per GPU):

    * H2D: before each all-gather the rank's fp32 shard of that unit is copied to the GPU
      (``FSDPParam.all_gather_inputs``, ``non_blocking=True``, torch 2.13 ``_fsdp_param.py``),
      ``g x M x 4 S`` bytes per step. The copy runs ahead of compute with FSDP2's prefetch, so it
      is counted exposed only where it exceeds the stage's compute: ``max(0, g M 4 S / PCIe -
      compute)``. The bound is optimistic (the all-gathers wait on their copies, so a slow copy
      also delays the collective), hence a floor.
    * D2H: the reduce-scattered fp32 gradient shard is copied to the host at every micro-batch
      (``foreach_reduce``, ``_fsdp_collectives.py``). The first micro-batch's copy is
      non-blocking into pinned memory and overlaps the backward (not counted); the later ones
      accumulate into the CPU gradient, so the copy is blocking and the add runs on the CPU
      thread (the comment there: "the CPU add kernel depends on the copy result"): ``(M - 1) x
      (4 S / PCIe + 12 S / h)`` exposed.
    * the optimizer step on the CPU over the shard after the backward, nothing overlapping it:
      ``S x 28 / h`` for AdamW (:data:`CPU_ADAMW_BYTES_PER_PARAM`, ``20`` for SGD). A floor: the
      trainc worker's ``torch.optim.AdamW`` takes the single-tensor path on CPU tensors (foreach
      needs an accelerator: torch 2.13 ``torch/utils/_foreach_utils.py``
      ``_get_foreach_kernels_supported_devices``), which makes several passes over the
      moments; the fused CPU kernel (``fused=True``) makes one.

    No copy back after the step: the updated fp32 shard stays on the host until the next
    forward's H2D copy."""
    if not spec.fsdp.cpu_offload:
        return 0.0
    s, m = sharded_params(spec, sp), plan.derived.num_microbatches
    h = HOST_MEMORY_BYTES_PER_S / max(spec.cluster.gpus_per_node, 1)
    gathers = 2 if spec.fsdp.reshard_after_forward else 1
    h2d = gathers * m * 4 * s / PCIE_BYTES_PER_S
    d2h = max(m - 1, 0) * (4 * s / PCIE_BYTES_PER_S + CPU_GRAD_ADD_BYTES_PER_PARAM * s / h)
    adam = spec.training.optimizer is Optimizer.adam
    step = s * (CPU_ADAMW_BYTES_PER_PARAM if adam else CPU_SGD_BYTES_PER_PARAM) / h
    return max(h2d - compute, 0.0) + d2h + step


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
