"""CPU compatibility shim: run Megatron-Core 0.16.1 on a CPU-only torch build (gloo, no CUDA).

Megatron-Core assumes CUDA in a few places that have nothing to do with the parallel layout
(RNG tracker, buffer devices, a handful of literal ``device="cuda"``). Each patch below is the
smallest override that makes the *same* Megatron-Core code path run on CPU; none changes the
parallel algorithm (groups, schedules, collectives, sharding). Every applied patch prints one line
``trainc-worker: override: cpu-patch <name>: <why>``. Findings and ablation (every patch was seen to
be needed): ``docs/worker.md`` (the CPU shim section) and each patch's own docstring.

The patches touch private functions, so the versions are asserted: an upgrade fails loudly here
instead of silently mis-patching. ``TRAINC_CPU_PATCH_SKIP=name,...`` leaves patches out (ablation).
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

SUPPORTED = {"torch": "2.13.0", "megatron-core": "0.16.1"}
_applied: list[str] = []
_mode: torch.overrides.TorchFunctionMode | None = None


def _say(name: str, why: str) -> None:
    if os.environ.get("RANK", "0") == "0":
        sys.stdout.write(f"trainc-worker: override: cpu-patch {name}: {why}\n")
        sys.stdout.flush()


def _check_versions() -> None:
    from megatron.core.package_info import __version__ as mcore

    torch_v = torch.__version__.split("+")[0]
    if torch_v != SUPPORTED["torch"] or mcore != SUPPORTED["megatron-core"]:
        raise RuntimeError(
            f"trainc cpu_compat is written for torch {SUPPORTED['torch']} and megatron-core "
            f"{SUPPORTED['megatron-core']}, found torch {torch_v} and megatron-core {mcore}; "
            "re-check every patch in trainc/launch/worker/cpu_compat.py before changing the pins"
        )


# --- the patches ------------------------------------------------------------------------------


def _rng() -> str:
    """CudaRNGStatesTracker keeps per-group RNG states through torch.cuda's RNG API."""
    from megatron.core.tensor_parallel import random as mrandom

    torch.cuda.get_rng_state = lambda device="cuda": torch.get_rng_state()
    torch.cuda.manual_seed = lambda seed: None  # the CPU generator is seeded by the tracker fork
    torch.cuda.manual_seed_all = lambda seed: None
    mrandom._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    mrandom._set_cuda_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
    return "tensor_parallel.random RNG tracker uses the CPU generator instead of torch.cuda's"


def _current_device() -> str:
    """Buffers (DDP grad buffers, p2p, TP gathers) are allocated on torch.cuda.current_device()."""
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment,return-value]
    return "torch.cuda.current_device() returns 'cpu'"


def _synchronize() -> str:
    """p2p communication calls torch.cuda.synchronize() after batched sends."""
    torch.cuda.synchronize = lambda device=None: None
    return "torch.cuda.synchronize() is a no-op (gloo ops complete on wait())"


class _CpuDeviceMode(torch.overrides.TorchFunctionMode):
    """Rewrites device='cuda' / int device to cpu and drops pin_memory in tensor factories."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        dev = kwargs.get("device")
        if (
            dev is not None
            and not (isinstance(dev, torch.device) and dev.type == "cpu")
            and str(dev) != "cpu"
            and str(dev) != "meta"
        ):
            kwargs["device"] = "cpu"
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        if (
            func is torch.Tensor.to
            and args
            and len(args) > 1
            and (
                (isinstance(args[1], int) and not isinstance(args[1], bool))
                or (isinstance(args[1], str) and args[1].startswith("cuda"))
                or (isinstance(args[1], torch.device) and args[1].type == "cuda")
            )
        ):
            args = (args[0], "cpu", *args[2:])
        return func(*args, **kwargs)


def _device_mode() -> str:
    """Literal device='cuda' in schedules (token counts), optimizer (found_inf), clip_grads,
    grad scaler; .cuda() in embedding setup; pin_memory=True in RoPE CP slicing."""
    global _mode
    _mode = _CpuDeviceMode()
    _mode.__enter__()
    torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    torch.nn.Module.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]
    return "device='cuda' in tensor factories -> cpu, pin_memory dropped, .cuda() is identity"


def _tensor_type() -> str:
    """clip_grads and DistributedOptimizer assert param.type() is a torch.cuda.*Tensor string."""
    orig = torch.Tensor.type

    def type_(self, dtype=None, non_blocking=False, **kw):  # type: ignore[no-untyped-def]
        if dtype is None and not kw:
            t = orig(self)
            if (
                self.device.type == "cpu"
                and t.startswith("torch.")
                and not t.startswith("torch.cuda.")
            ):
                return "torch.cuda." + t[len("torch.") :]
            return t
        return orig(self, dtype, non_blocking, **kw)

    torch.Tensor.type = type_  # type: ignore[method-assign]
    return "Tensor.type() (no arguments) reports torch.cuda.<X>Tensor for CPU tensors"


def _sp_norm() -> str:
    """Without Apex/TE the norm is torch's, which refuses sequence_parallel; build it anyway and
    mark its params sequence_parallel (as FusedLayerNorm/TENorm do) so finalize_model_grads
    all-reduces their grads over TP."""
    from megatron.core.transformer import torch_norm

    orig_new = torch_norm.WrappedTorchNorm.__new__

    def new(cls, config, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not config.sequence_parallel:
            return orig_new(cls, config, *args, **kwargs)
        cfg = copy.copy(config)
        object.__setattr__(cfg, "sequence_parallel", False)
        norm = orig_new(cls, cfg, *args, **kwargs)
        for p in norm.parameters():
            p.sequence_parallel = True
        return norm

    torch_norm.WrappedTorchNorm.__new__ = new
    with contextlib.suppress(ImportError):  # the spec module keeps its own reference to the class
        from megatron.core.models.gpt import gpt_layer_specs  # noqa: F401
    return "torch LayerNorm/RMSNorm built under sequence_parallel, params marked sequence_parallel"


class _Inert:
    def __init__(self, *a: Any, **k: Any) -> None: ...
    def __enter__(self) -> _Inert:
        return self

    def __exit__(self, *a: object) -> None: ...
    def wait_stream(self, *a: Any, **k: Any) -> None: ...
    def wait_event(self, *a: Any, **k: Any) -> None: ...
    def record_event(self, *a: Any, **k: Any) -> _Inert:
        return _Inert()

    def record(self, *a: Any, **k: Any) -> None: ...
    def synchronize(self) -> None: ...
    def wait(self, *a: Any, **k: Any) -> None: ...
    def query(self) -> bool:
        return True


def _streams() -> str:
    """MoEAlltoAllTokenDispatcher creates torch.cuda.Stream/Event for its D2H copies."""
    torch.cuda.Stream = _Inert  # type: ignore[assignment,misc]
    torch.cuda.Event = _Inert  # type: ignore[assignment,misc]
    torch.cuda.stream = lambda s=None: _Inert()  # type: ignore[assignment,misc]
    torch.cuda.current_stream = lambda device=None: _Inert()  # type: ignore[assignment,return-value]
    return "torch.cuda.Stream/Event/stream/current_stream are inert (CPU ops are synchronous)"


def _moe_te_gemm() -> str:
    """moe_utils references te_general_gemm without defining it when TE is absent (NameError in
    RouterGatingLinearFunction; an upstream bug in 0.16.1 that also hits GPU users without TE)."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    return "moe_utils.te_general_gemm = None (router uses torch.mm)"


def _moe_to_numpy() -> str:
    """maybe_move_tensor_to_cpu(as_numpy=True) converts only CUDA tensors, so the alltoall
    dispatcher passes a tensor where all_to_all_single needs a list of split sizes."""
    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    def move(tensor, as_numpy=False, record_stream=False):  # type: ignore[no-untyped-def]
        if torch.is_tensor(tensor):
            tensor = tensor.cpu()
            if as_numpy:
                tensor = tensor.numpy()
        return tensor

    moe_utils.maybe_move_tensor_to_cpu = move
    if hasattr(token_dispatcher, "maybe_move_tensor_to_cpu"):
        token_dispatcher.maybe_move_tensor_to_cpu = move
    return "maybe_move_tensor_to_cpu(as_numpy=True) converts CPU tensors too"


def _uneven_gather() -> str:
    """gloo's all_gather/reduce_scatter need equal sizes; the alltoall dispatcher with expert-TP
    gathers and reduce-scatters uneven token counts: pad/gather/unpad and all_reduce+slice."""
    import torch.distributed as dist
    from megatron.core.tensor_parallel import mappings

    orig_gather = mappings._gather_along_first_dim
    orig_rs = mappings._reduce_scatter_along_first_dim

    def gather(input_, group, output_split_sizes=None, use_global_buffer=False):  # type: ignore
        if output_split_sizes is None or len(set(output_split_sizes)) <= 1 or group.size() == 1:
            return orig_gather(input_, group, output_split_sizes, use_global_buffer)
        n = max(output_split_sizes)
        pad = torch.zeros((n, *input_.shape[1:]), dtype=input_.dtype)
        pad[: input_.shape[0]] = input_
        parts = [torch.empty_like(pad) for _ in output_split_sizes]
        dist.all_gather(parts, pad.contiguous(), group=group)
        return torch.cat([p[:k] for p, k in zip(parts, output_split_sizes, strict=True)])

    def reduce_scatter(input_, group, input_split_sizes=None, use_global_buffer=False):  # type: ignore
        if input_split_sizes is None or len(set(input_split_sizes)) <= 1 or group.size() == 1:
            return orig_rs(input_, group, input_split_sizes, use_global_buffer)
        total = input_.clone().contiguous()
        dist.all_reduce(total, group=group)
        return list(torch.split(total, input_split_sizes, dim=0))[group.rank()].contiguous()

    mappings._gather_along_first_dim = gather
    mappings._reduce_scatter_along_first_dim = reduce_scatter
    return "uneven first-dim all_gather/reduce_scatter done as pad+gather / all_reduce+slice"


def _causal_mask() -> str:
    """get_default_causal_mask builds its mask with device="cuda"; with selective recompute the
    attention is recomputed inside autograd's backward, where the device mode above (a
    thread-local TorchFunctionMode) is not active."""
    from megatron.core.fusions import fused_softmax
    from megatron.core.transformer import utils

    def mask(sq: int) -> torch.Tensor:
        return torch.triu(torch.ones(sq, sq), diagonal=1).bool()

    utils.get_default_causal_mask = mask
    fused_softmax.get_default_causal_mask = mask
    return "get_default_causal_mask builds its mask on the CPU (also in recompute)"


def _mla_without_te() -> str:
    """multi_latent_attention sets HAVE_TE from an import that succeeds without Transformer
    Engine (megatron-core's TE names are MagicMock stand-ins then), and MLASelfAttention's
    ``isinstance(self.linear_proj, TELinear)`` raises TypeError on them (an upstream bug in 0.16.1
    that also hits GPU users without TE)."""
    from megatron.core.transformer import multi_latent_attention

    multi_latent_attention.HAVE_TE = False
    return "multi_latent_attention.HAVE_TE = False (no Transformer Engine on CPU)"


class _AllReduceTailGrad(torch.autograd.Function):
    """Identity forward; backward all-reduces the last ``width`` channels of the gradient over
    ``group`` (the other channels pass through)."""

    @staticmethod
    def forward(ctx, x, width, group):  # type: ignore[no-untyped-def]
        ctx.width, ctx.group = width, group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        grad = grad.clone()
        tail = grad[..., -ctx.width :].contiguous()
        torch.distributed.all_reduce(tail, group=ctx.group)
        grad[..., -ctx.width :] = tail
        return grad, None, None


def _mla_local_grads() -> str:
    """Two gradient errors of MLASelfAttention built from the local spec (ColumnParallelLinear
    down projections) with TP > 1 in megatron-core 0.16.1; the Transformer Engine spec (GPU) has
    neither. (1) The KV down projection's output is gathered over TP with
    ``gather_from_tensor_model_parallel_region``, whose backward keeps each rank's slice only;
    that is right for the KV latent (its consumer already all-reduces) but not for the shared
    rotary key ``k_pos_emb``, which each rank uses for its own heads: its gradient misses the
    other ranks' heads. (2) Without sequence parallelism ``finalize_model_grads`` sums the grads
    of params named ``q_layernorm`` over TP (meant for per-head QK norms), but MLA's query-latent
    norm sees the same full latent on every rank, so its gradient comes out TP times too large."""
    from megatron.core.transformer import multi_latent_attention as mla

    orig_gather = mla.gather_from_tensor_model_parallel_region
    orig_qkv = mla.MLASelfAttention.get_query_key_value_tensors
    orig_init = mla.MLASelfAttention.__init__
    state: dict[str, Any] = {}

    def gather(x, *a, **k):  # type: ignore[no-untyped-def]
        out = orig_gather(x, *a, **k)
        att = state.get("att")
        if att is None:
            return out
        kv_call = 1 if att.config.q_lora_rank is not None else 0
        state["calls"] += 1
        if state["calls"] - 1 == kv_call:
            out = _AllReduceTailGrad.apply(out, att.config.qk_pos_emb_head_dim, att.tp_group)
        return out

    def qkv(self, *a, **k):  # type: ignore[no-untyped-def]
        state.update(att=self, calls=0)
        try:
            return orig_qkv(self, *a, **k)
        finally:
            state.clear()

    def init(self, config, *a, **k):  # type: ignore[no-untyped-def]
        orig_init(self, config, *a, **k)
        norm = getattr(self, "q_layernorm", None)
        if not config.sequence_parallel and norm is not None:
            for p in norm.parameters():
                p.average_gradients_across_tp_domain = True

    mla.gather_from_tensor_model_parallel_region = gather
    mla.MLASelfAttention.get_query_key_value_tensors = qkv
    mla.MLASelfAttention.__init__ = init
    return (
        "MLA on the local spec: the rotary key's gradient is all-reduced over TP before the "
        "gather's split, and the query-latent norm's gradient is averaged (not summed) over "
        "TP without sequence parallelism"
    )


PATCHES: tuple[tuple[str, Callable[[], str]], ...] = (
    ("rng", _rng),
    ("current_device", _current_device),
    ("synchronize", _synchronize),
    ("device_mode", _device_mode),
    ("tensor_type", _tensor_type),
    ("sp_norm", _sp_norm),
    ("streams", _streams),
    ("moe_te_gemm", _moe_te_gemm),
    ("moe_to_numpy", _moe_to_numpy),
    ("uneven_gather", _uneven_gather),
    ("causal_mask", _causal_mask),
    ("mla_without_te", _mla_without_te),
    ("mla_local_grads", _mla_local_grads),
)


def _jit_fuser() -> str:
    """Before Megatron-Core is imported: ``megatron.core.jit`` as a module whose ``jit_fuser`` is
    Megatron's own ``noop_decorator`` (what its ``disable_jit_fuser()`` sets, but that comes too
    late: the fusions bind ``jit_fuser`` while ``megatron.core`` imports)."""
    import importlib.metadata
    import types

    if "megatron.core" in sys.modules:
        return "not applied: megatron.core was imported first"
    version = importlib.metadata.version("megatron-core")
    if version != SUPPORTED["megatron-core"]:
        return f"not applied: megatron-core {version}"

    def noop_decorator(func: Callable) -> Callable:
        return func

    mod = types.ModuleType("megatron.core.jit")
    mod.noop_decorator = noop_decorator  # type: ignore[attr-defined]
    mod.jit_fuser = noop_decorator  # type: ignore[attr-defined]
    mod.enable_jit_fuser = mod.disable_jit_fuser = lambda: None  # type: ignore[attr-defined]
    sys.modules["megatron.core.jit"] = mod
    return (
        "megatron.core.jit.jit_fuser is a no-op instead of torch.compile: the fused "
        "functions run eagerly (the CPU run builds no fusions), and no rank spends ~3 s "
        "importing torch._dynamo/_inductor for decorators"
    )


def apply() -> list[str]:
    """Apply every patch once (idempotent); print one override line each; return their names."""
    if _applied:
        return list(_applied)
    skip = {s for s in os.environ.get("TRAINC_CPU_PATCH_SKIP", "").split(",") if s}
    if "jit_fuser" not in skip:  # must run before anything imports megatron.core
        _say("jit_fuser", _jit_fuser())
        _applied.append("jit_fuser")
    _check_versions()
    for name, fn in PATCHES:
        if name in skip:
            print(f"trainc-worker: cpu-patch {name} skipped (TRAINC_CPU_PATCH_SKIP)", flush=True)
            continue
        _say(name, fn())
        _applied.append(name)
    return list(_applied)
