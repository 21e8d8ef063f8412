"""TRC380-TRC382: the compute/communication overlap switches of Megatron-Core.

TRC382 (the TP group leaves the NVLink domain with tp_comm_overlap): NVIDIA/TransformerEngine
#1071, the maintainers: Userbuffers runs single-domain tensor parallelism only.

Sources: Megatron-LM ``megatron/training/arguments.py`` ``validate_args`` (``--tp-comm-overlap``
asserts ``sequence_parallel``; sequence parallelism is dropped at tp = 1), megatron-core 0.16.1
``extensions/transformer_engine.py`` (the overlap runs in Transformer Engine's userbuffers, so
only with ``transformer_impl=transformer_engine``, i.e. on CUDA) and
``transformer/transformer_config.py`` ``TransformerConfig.__post_init__`` (the checks of
``overlap_moe_expert_parallel_comm``: ep > 1, the alltoall or flex dispatcher, no full
recompute, no recompute method, bf16 or fp16, vpp set when pp > 1).
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc.compiler import rules as R
from trainc.compiler.decide import traits
from trainc.compiler.derive import Derived, tp_in_nvlink_domain
from trainc.compiler.diagnostics import Diagnostic, diag
from trainc.schemas import Device, MoeDispatcher, Precision, Recompute, TrainSpec


def tp_comm_overlap_possible(spec: TrainSpec) -> bool:
    """Whether ``training.tp_comm_overlap`` can be on for this layout (what TRC380 checks):
    engine=megatron on CUDA, tp > 1 with sequence parallelism."""
    p = spec.parallel
    return (
        traits(spec).megatron_core
        and spec.launch.device is Device.cuda
        and p.tp > 1
        and bool(p.sequence_parallel)
    )


def comm_overlap(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC380 (tp_comm_overlap), TRC382 (its TP group leaves the NVLink domain), TRC381
    (overlap_moe_expert_parallel_comm)."""
    m, p, t = spec.model, spec.parallel, spec.training
    if t.tp_comm_overlap and not tp_comm_overlap_possible(spec):
        if not traits(spec).megatron_core or spec.launch.device is Device.cpu:
            why = (
                f"engine={spec.engine.value} has no TP communication overlap"
                if not traits(spec).megatron_core
                else "it runs in Transformer Engine's userbuffers, which need CUDA; "
                "launch.device is cpu"
            )
            fix = "set training.tp_comm_overlap=false"
        elif p.tp == 1:
            why = "there is no tensor parallelism to overlap (tp = 1)"
            fix = "set training.tp_comm_overlap=false, or tp > 1 with sequence_parallel"
        else:
            why = (
                "Megatron-LM asserts 'Tensor parallel communication/GEMM overlap can happen "
                "only when sequence parallelism is enabled'"
            )
            fix = "set parallel.sequence_parallel=true (or training.tp_comm_overlap=false)"
        yield diag(
            R.TP_COMM_OVERLAP,
            f"tp_comm_overlap is true but {why}",
            "training.tp_comm_overlap",
            related=("engine", "launch.device", "parallel.tp", "parallel.sequence_parallel"),
            fix=fix,
            edits={"training.tp_comm_overlap": False},
            tp=p.tp,
            sequence_parallel=bool(p.sequence_parallel),
            engine=spec.engine.value,
            device=spec.launch.device.value,
        )
    c = spec.cluster
    if (
        t.tp_comm_overlap
        and tp_comm_overlap_possible(spec)
        and not tp_in_nvlink_domain(
            p.tp, c.nvlink_domain_size, c.gpus_per_node, c.num_nodes * c.gpus_per_node
        )
    ):
        dom = c.nvlink_domain_size or c.gpus_per_node
        # NVIDIA/TransformerEngine#1071: the comm+GEMM overlap (Userbuffers, CUDA multicast /
        # IPC handles inside one NVLink domain) supports tensor parallelism inside the domain
        # only, data parallelism across it; a TP group that leaves it cannot set up the buffers.
        yield diag(
            R.TP_COMM_OVERLAP_DOMAIN,
            f"tp_comm_overlap with tp = {p.tp} across NVLink "
            f"domains of {dom} GPUs: Transformer Engine's userbuffers exchange over "
            "NVLink peer memory (CUDA multicast / IPC handles inside one domain), so "
            "the overlap supports tensor parallelism inside one NVLink domain only "
            "(TransformerEngine #1071)",
            "training.tp_comm_overlap",
            related=("parallel.tp", "cluster.nvlink_domain_size"),
            fix=f"keep tp within the NVLink domain (tp <= {dom}), or set "
            "training.tp_comm_overlap=false",
            edits={"training.tp_comm_overlap": False},
            tp=p.tp,
            nvlink_domain_size=dom,
        )
    if not t.overlap_moe_expert_parallel_comm:
        return
    problems = []
    if not traits(spec).megatron_core:
        problems.append(f"engine={spec.engine.value} has no expert-parallel A2A overlap")
    if spec.launch.device is Device.cpu:
        problems.append("it overlaps on CUDA streams; launch.device is cpu")
    if m.num_experts is None:
        problems.append("the model has no experts (model.num_experts is not set)")
    elif p.ep <= 1:
        problems.append(f"it needs expert parallelism (ep = {p.ep})")
    if m.num_experts is not None and m.moe_token_dispatcher_type not in (
        MoeDispatcher.alltoall,
        MoeDispatcher.flex,
    ):
        problems.append(
            f"it needs the alltoall or flex dispatcher (not {m.moe_token_dispatcher_type.value})"
        )
    if t.recompute is Recompute.full:
        problems.append("it refuses full recompute")
    if t.precision not in (Precision.bf16, Precision.fp16):
        problems.append(f"it needs bf16 or fp16 (precision {t.precision.value})")
    if p.pp > 1 and p.vpp <= 1:
        problems.append(f"with pp = {p.pp} it needs the interleaved schedule (vpp > 1)")
    if problems:
        yield diag(
            R.MOE_A2A_OVERLAP,
            "overlap_moe_expert_parallel_comm is true but "
            + "; ".join(problems)
            + " (Megatron-Core TransformerConfig.__post_init__)",
            "training.overlap_moe_expert_parallel_comm",
            related=(
                "parallel.ep",
                "parallel.vpp",
                "training.recompute",
                "model.moe_token_dispatcher_type",
                "engine",
                "launch.device",
            ),
            fix="set training.overlap_moe_expert_parallel_comm=false, or meet the conditions named",
            edits={"training.overlap_moe_expert_parallel_comm": False},
            ep=p.ep,
            pp=p.pp,
            vpp=p.vpp,
            recompute=t.recompute.value,
        )
