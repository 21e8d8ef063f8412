"""Differential harness: trainc's verdict on a spec against the libraries' own checks.

Oracles (megatron-core 0.16.1 and deepspeed 0.19.8, CPU only, no process is started):

* ``TransformerConfig(**kwargs)`` with the ``TransformerConfig`` kwargs trainc emits into
  ``megatron_core.yaml`` (dtype strings -> torch dtypes, the activation from ``callables``), plus
  ``OptimizerConfig`` and ``DistributedDataParallelConfig`` with theirs;
* ``parallel_state.initialize_model_parallel(**emitted kwargs)`` run for real against a fake
  ``torch.distributed`` of the spec's world size (``new_group`` returns a stand-in), then
  ``destroy_model_parallel()``;
* ``ConstantNumMicroBatchesCalculator(gbs, mbs, dp)`` (Megatron's batch check);
* ``transformer_block.get_num_layers_to_build(config, vp_stage, pp_rank)`` for every pipeline rank
  and virtual stage (the layer split that is really built, summed against num_layers);
* ``schedules.forward_backward_pipelining_with_interleaving`` up to the end of its micro-batch
  checks (stand-in process groups; stopped right after the checks);
* one dense and one MoE ``TransformerLayer`` (local spec) and the ``VocabParallelEmbedding`` built
  on the ``meta`` device with stand-in process groups of the spec's tp/cp/ep/etp sizes, which runs
  every ``divide()`` and assertion in the layers' constructors;
* ``DeepSpeedConfig(ds_config)`` with ``deepspeed.runtime.config.dist.get_rank/get_world_size``
  patched to 0 and the real data-parallel size (deepspeed 0.19.8
  deepspeed/runtime/zero/stage_1_and_2.py; docs/references.md).

For an accepted spec the oracles see exactly the emitted artifacts. For a rejected spec trainc
emits nothing, so the harness renders the same emitters from a plan whose unsplittable derived
values (dp, micro-batches, layers per stage) are filled in the way the libraries would compute
them (floor divisions), and for DeepSpeed it gives the batch sizes and offload blocks as the user
wrote them. Every library failure is mapped to the trainc rules that explain it
(:data:`EXPLAINS`); an unmapped failure is a test failure, so that a new library check is never
silently ignored.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import re
import types
import warnings
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import trainc.compiler.targets as engines_mod
from trainc.compiler import derive as derive_mod
from trainc.compiler import plan as plan_mod
from trainc.compiler.derive import stage_chunk_sizes
from trainc.compiler.estimate import rankmap
from trainc.compiler.load.schema_check import to_spec
from trainc.compiler.normalize import normalize
from trainc.compiler.targets.deepspeed import deepspeed_config
from trainc.compiler.validate import validate

#: Rule families whose errors the oracles can judge (topology, divisibility, compatibility).
FAMILIES = ("TRC1", "TRC2", "TRC3")

#: (check, regex on "ExceptionType: message", trainc rules any one of which explains it).
EXPLAINS: tuple[tuple[str, str, frozenset[str]], ...] = tuple(
    (c, r, frozenset(ids))
    for c, r, ids in (
        (
            "TransformerConfig",
            r"num_attention_heads \(\d+\) must be a multiple of "
            r"tensor_model_parallel_size",
            {"TRC201"},
        ),
        (
            "TransformerConfig",
            r"num_query_groups \(\d+\) must be a multiple or divisor",
            {"TRC202"},
        ),
        (
            "TransformerConfig",
            r"Cannot use sequence parallelism without tensor parallelism",
            {"TRC301"},
        ),
        (
            "TransformerConfig",
            r"num_moe_experts must be non None to use expert-parallel",
            {"TRC312"},
        ),
        (
            "TransformerConfig",
            r"num_layers_in_(first|last)_pipeline_stage must be larger",
            {"TRC212"},
        ),
        # account_for_embedding/loss_in_pipeline_split (megatron/training/arguments.py,
        # core_v0.16.1)
        # (TRC212: account_for_* with first/last counts; Megatron checks L' % pp as well)
        ("TransformerConfig", r"cannot be ?set at the same time with account_for", {"TRC212"}),
        (
            "TransformerConfig",
            r"number of middle layers: \d+ must be divisible by middle "
            r"pipeline_model_parallel_size|num_layers: \d+ after enable ?account_for",
            {"TRC210", "TRC212"},
        ),
        (
            "TransformerConfig",
            r"\(after enable account_for.*virtual_pipeline_model_parallel_size",
            {"TRC211"},
        ),
        (
            "TransformerConfig",
            r"(first|last|middle) (pipeline )?stage|middle pipeline|Mismatch|"
            r"pipeline_model_parallel_layout|virtual pipeline parallel degree",
            {"TRC212", "TRC211"},
        ),
        ("TransformerConfig", r"recompute", {"TRC308", "TRC309"}),
        ("OptimizerConfig", r"min_lr|lr", {"TRC318"}),
        # A dense model with etp != tp still gets an expert grid; TRC312 asks to drop etp.
        (
            "initialize_model_parallel",
            r"world_size \(\d+\) is not divisible by "
            r"expert_tensor_model_pipeline_parallel",
            {"TRC104", "TRC312"},
        ),
        ("initialize_model_parallel", r"world_size \(\d+\) is not divisible by \d+", {"TRC101"}),
        (
            "initialize_model_parallel",
            r"pipeline-model-parallel size should be greater than 1 "
            r"with interleaved schedule",
            {"TRC213", "TRC211"},
        ),
        (
            "initialize_model_parallel(pp)",
            r"world_size \(\d+\) is not divisible by \d+",
            {"TRC101", "TRC104", "TRC312"},
        ),
        (
            "microbatches",
            r"global batch size \(\d+\) is not divisible by micro batch size",
            {"TRC214"},
        ),
        ("microbatches", r"number of microbatches should be at least 1", {"TRC214"}),
        (
            "layers_to_build",
            r"num_layers should be divisible by pipeline_model_parallel_size",
            {"TRC210"},
        ),
        ("layers_to_build", r"should be divisible by vp_size", {"TRC211", "TRC212"}),
        ("layers_to_build", r"left over layers must be divisible by left over stages", {"TRC212"}),
        (
            "layers_to_build",
            r"Does not support standalone embedding stage and standalone loss "
            r"stage with uneven pp",
            {"TRC212"},
        ),
        ("interleaved_schedule", r"should range in \[PP=\d+ , M=\d+\]", {"TRC215", "TRC216"}),
        ("interleaved_schedule", r"The remainder of M", {"TRC216"}),
        ("attention", r"is not divisible by \d+", {"TRC207", "TRC201", "TRC202", "TRC222"}),
        (
            "dense_mlp",
            r"is not divisible by \d+ when instantiating (Column|Row)ParallelLinear",
            {"TRC203"},
        ),
        ("moe_mlp", r"^AssertionError:\s*(when instantiating MoELayer)?$", {"TRC205"}),
        (
            "moe_mlp",
            r"is not divisible by \d+ when instantiating (Column|Row)ParallelLinear",
            {"TRC204"},
        ),
        ("embedding", r"is not divisible by", {"TRC209"}),
        ("DeepSpeedConfig", r"Check batch related parameters|has to be greater than 0", {"TRC214"}),
    )
)


@dataclass
class Failure:
    """One library check that raised."""

    check: str
    message: str
    explains: frozenset[str]


@dataclass
class Outcome:
    """trainc's verdict and the oracles' on one spec."""

    spec: dict[str, Any]
    trainc_errors: frozenset[str]
    trainc_warnings: frozenset[str]
    failures: list[Failure] = field(default_factory=list)
    hazards: list[str] = field(default_factory=list)
    library_warnings: list[str] = field(default_factory=list)
    emit_divergences: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)

    @property
    def trainc_ok(self) -> bool:
        """trainc accepts (no error in the judged families)."""
        return not self.trainc_errors

    @property
    def oracle_ok(self) -> bool:
        """Every library check passed."""
        return not self.failures

    def unexplained(self) -> set[str]:
        """trainc errors that no library failure accounts for: the divergences (rows of
        docs/divergences.md) when the oracles accept."""
        covered: set[str] = set()
        for f in self.failures:
            covered |= f.explains
        return set(self.trainc_errors) - covered


# ---------------------------------------------------------------------------------------------
# trainc side
# ---------------------------------------------------------------------------------------------


def trainc_verdict(cfg: dict[str, Any]) -> tuple[Any, list[Any]]:
    """(normalized spec, diagnostics) through trainc's schema check, normalize and validate."""
    spec, diags = to_spec(copy.deepcopy(cfg))
    assert spec is not None, [d.to_json() for d in diags]
    spec = normalize(spec)
    return spec, validate(spec)


def _tolerant_derive(spec: Any) -> Any:
    """derive() with the values that do not divide filled as the libraries floor them."""
    d = derive_mod.derive(spec)
    p, t, m, c = spec.parallel, spec.training, spec.model, spec.cluster
    world = c.num_nodes * c.gpus_per_node
    dp = d.dp or max(1, world // (p.tp * p.pp * p.cp))
    edp = d.expert_dp or max(1, world // (d.etp * p.ep * p.pp))
    nmb = d.num_microbatches or max(1, t.global_batch_size // (t.micro_batch_size * dp))
    lps = d.layers_per_stage
    if lps is None:
        per = m.num_layers // p.pp
        lps = (per,) * (p.pp - 1) + (m.num_layers - per * (p.pp - 1),)
    return dataclasses.replace(d, dp=dp, expert_dp=edp, num_microbatches=nmb, layers_per_stage=lps)


def plan_for_oracles(spec: Any, accepted: bool) -> dict[str, Any]:
    """plan.json of the spec (the tolerant variant when trainc rejects it)."""
    if accepted:
        return plan_mod.plan(spec).to_json()
    # the DeepSpeed config of a rejected spec is built by ds_oracle_config (its batch triangle
    # does not close, which deepspeed_config asserts)
    with (
        mock.patch.object(plan_mod, "derive", _tolerant_derive),
        mock.patch.object(engines_mod, "deepspeed_config", lambda spec, d: None),
    ):
        return plan_mod.plan(spec).to_json()


def megatron_core_kwargs(plan: dict[str, Any]) -> dict[str, Any]:
    """The Megatron-Core kwargs of plan.json (a deep copy the oracle may edit)."""
    return copy.deepcopy(plan["engines"]["megatron_core"])


# ---------------------------------------------------------------------------------------------
# stand-ins
# ---------------------------------------------------------------------------------------------


class FakeGroup:
    """A process group of a given size in which this process is rank 0."""

    def __init__(self, size: int, ranks: list[int] | None = None) -> None:
        self._size, self.ranks = size, ranks

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return 0


class _NoStream:
    """torch.cuda.Stream / Event stand-in (constructed, never used)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class _ChecksPassed(Exception):
    """Raised by the stand-in that stops the interleaved schedule after its checks."""


class _TorchNoCuda(types.ModuleType):
    """``torch`` for schedules.py, whose ``torch.zeros(..., device="cuda")`` precedes the checks."""

    def __init__(self, torch: Any) -> None:
        super().__init__("torch")
        self._torch = torch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._torch, name)

    def zeros(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.pop("device", None)
        return self._torch.zeros(*args, **kwargs)


def _fmt(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".strip()


def _explain(check: str, e: BaseException | str) -> Failure:
    msg = e if isinstance(e, str) else _fmt(e)
    for c, rx, ids in EXPLAINS:
        if c == check and re.search(rx, msg):
            return Failure(check, msg, ids)
    return Failure(check, msg, frozenset())


@functools.cache
def _libs() -> types.SimpleNamespace:
    """Import the libraries once (tens of seconds on a loaded machine)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
        from megatron.core import parallel_state
        from megatron.core.distributed import DistributedDataParallelConfig
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.num_microbatches_calculator import ConstantNumMicroBatchesCalculator
        from megatron.core.optimizer import OptimizerConfig
        from megatron.core.pipeline_parallel import schedules
        from megatron.core.process_groups_config import ProcessGroupCollection
        from megatron.core.tensor_parallel.layers import VocabParallelEmbedding
        from megatron.core.transformer import transformer_block
        from megatron.core.transformer.transformer_config import TransformerConfig
        from megatron.core.transformer.transformer_layer import TransformerLayer
    return types.SimpleNamespace(**locals())


def dtype_kwargs(kwargs: dict[str, Any], callables: dict[str, Any] | None = None) -> dict[str, Any]:
    """Emitted YAML kwargs as the library takes them: dtype names -> torch dtypes, dotted
    callables imported (what the worker does)."""
    import importlib

    torch = _libs().torch
    out = dict(kwargs)
    for k in ("params_dtype", "pipeline_dtype"):
        if isinstance(out.get(k), str):
            out[k] = getattr(torch, out[k])
    for k, dotted in (callables or {}).items():
        mod, _, name = dotted.rpartition(".")
        out[k] = getattr(importlib.import_module(mod), name)
    return out


# ---------------------------------------------------------------------------------------------
# Megatron-Core oracle
# ---------------------------------------------------------------------------------------------


def transformer_config(tc: dict[str, Any], callables: dict[str, Any]) -> Any:
    """``TransformerConfig(**tc)``; library warnings are returned through ``warnings``."""
    return _libs().TransformerConfig(**dtype_kwargs(tc, callables))


def raw_transformer_config(tc: dict[str, Any], callables: dict[str, Any]) -> Any:
    """A TransformerConfig with the given fields and the defaults, without ``__post_init__``
    (for the layer-split check when the constructor itself refused the spec)."""
    L = _libs()
    cfg = object.__new__(L.TransformerConfig)
    for f in dataclasses.fields(L.TransformerConfig):
        if f.default is not dataclasses.MISSING:
            setattr(cfg, f.name, f.default)
        elif f.default_factory is not dataclasses.MISSING:
            setattr(cfg, f.name, f.default_factory())
    for k, v in dtype_kwargs(tc, callables).items():
        setattr(cfg, k, v)
    return cfg


def _init_once(world: int, kwargs: dict[str, Any]) -> tuple[str | None, int | None]:
    """One real ``initialize_model_parallel`` against a fake world: (error, dp)."""
    L = _libs()
    torch, ps = L.torch, L.parallel_state

    def new_group(ranks: list[int] | None = None, **_: Any) -> FakeGroup:
        return FakeGroup(len(ranks or []), list(ranks or []))

    dist = torch.distributed
    with contextlib.ExitStack() as stack:
        # plain functions, not MagicMocks: new_group is called thousands of times
        stack.enter_context(mock.patch.object(dist, "is_initialized", lambda: True))
        stack.enter_context(mock.patch.object(dist, "get_world_size", lambda group=None: world))
        stack.enter_context(mock.patch.object(dist, "get_rank", lambda group=None: 0))
        stack.enter_context(mock.patch.object(dist, "new_group", new_group))
        stack.enter_context(mock.patch.object(dist, "barrier", lambda *a, **k: None))
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        try:
            ps.initialize_model_parallel(**kwargs, create_gloo_process_groups=False)
            ranks = ps._DATA_PARALLEL_GLOBAL_RANKS
            return None, len(ranks)
        except (RuntimeError, ValueError, AssertionError) as e:
            # the library derives dp = world // (tp*pp*cp) right after its first check
            mp = (
                kwargs["tensor_model_parallel_size"]
                * kwargs["pipeline_model_parallel_size"]
                * kwargs["context_parallel_size"]
            )
            return _fmt(e), (world // mp if world % mp == 0 else None)
        finally:
            ps.destroy_model_parallel()


@functools.lru_cache(maxsize=4096)
def init_model_parallel(
    world: int, frozen_kwargs: tuple[tuple[str, Any], ...]
) -> tuple[tuple[tuple[str, str], ...], dict[str, list[list[int]]] | None, int | None]:
    """``initialize_model_parallel`` with the emitted kwargs; returns (errors, groups, dp).

    The function stops at its first failed check (dense world, then vpp, then expert grid), so
    after a failure it is called again with the failed axis neutralised (tp=cp=1, or vpp=None)
    to reach the later checks: each error is returned as (check, message). ``groups`` are
    RankGenerator's lists per trainc group kind (for the rank-map comparison), ``dp`` the
    data-parallel size the library derived.
    """
    kwargs = dict(frozen_kwargs)
    errors: list[tuple[str, str]] = []
    err, dp = _init_once(world, kwargs)
    dp0 = dp
    for _ in range(3):
        if err is None:
            break
        if "with interleaved schedule" in err:
            errors.append(("initialize_model_parallel", err))
            kwargs["virtual_pipeline_model_parallel_size"] = None
        elif "expert_tensor_model_pipeline_parallel" in err:
            errors.append(("initialize_model_parallel", err))
            break
        elif kwargs["tensor_model_parallel_size"] * kwargs["context_parallel_size"] > 1:
            errors.append(("initialize_model_parallel", err))
            kwargs["tensor_model_parallel_size"] = kwargs["context_parallel_size"] = 1
        else:  # world % pp != 0: the expert grid (etp*ep*pp) cannot divide it either
            errors.append(("initialize_model_parallel(pp)", err))
            break
        err, _ = _init_once(world, kwargs)
    if errors:
        return tuple(errors), None, dp0
    kwargs = dict(frozen_kwargs)
    tp, pp, cp = (
        kwargs["tensor_model_parallel_size"],
        kwargs["pipeline_model_parallel_size"],
        kwargs["context_parallel_size"],
    )
    ep = kwargs["expert_model_parallel_size"]
    etp = kwargs["expert_tensor_parallel_size"] or tp
    assert dp == world // (tp * pp * cp)
    groups = megatron_groups(world, tp, pp, cp, ep, etp, kwargs["order"]) if world <= 256 else None
    return (), groups, dp


def megatron_groups(
    world: int, tp: int, pp: int, cp: int, ep: int, etp: int, order: str
) -> dict[str, list[list[int]]]:
    """RankGenerator's rank lists (dense and expert generators, as initialize_model_parallel
    builds them) for each of trainc's group kinds."""
    ps = _libs().parallel_state
    dense = ps.RankGenerator(tp=tp, ep=1, dp=world // (tp * pp * cp), pp=pp, cp=cp, order=order)
    expert = ps.RankGenerator(tp=etp, ep=ep, dp=world // (etp * ep * pp), pp=pp, cp=1, order=order)
    gens = {"dense": dense, "expert": expert}
    return {
        kind: gens[gen].get_ranks("-".join(axes))
        for kind, (gen, axes) in rankmap.GROUP_KINDS.items()
    }


@functools.lru_cache(maxsize=4096)
def rank_map_problems(
    derived: tuple[int, ...], frozen_kwargs: tuple[tuple[str, Any], ...]
) -> tuple[str, ...]:
    """trainc's rank groups (estimate/rankmap.py, what plan.json's rank map shows) against
    Megatron-Core's RankGenerator lists, group kind by group kind."""
    world = derived[0]
    _, groups, _ = init_model_parallel(world, frozen_kwargs)
    d = dict(
        zip(("world_size", "tp", "pp", "cp", "ep", "etp", "dp", "expert_dp"), derived, strict=True)
    )
    mine = rankmap.grids(d)
    out = []
    for kind, (gen, axes) in rankmap.GROUP_KINDS.items():
        if groups is not None and kind in groups and list(mine[gen].groups(axes)) != groups[kind]:
            out.append(
                f"rank map: trainc's {kind} groups differ from Megatron-Core's "
                f"RankGenerator for {d}"
            )
    return tuple(out)


def _layers_built(cfg: Any, pp: int, vpp: int) -> tuple[list[int] | None, str | None]:
    """Layers get_num_layers_to_build builds on each (pp rank, virtual stage)."""
    fn = _libs().transformer_block.get_num_layers_to_build
    out = []
    try:
        for r in range(pp):
            for v in range(vpp):
                out.append(fn(cfg, vp_stage=v if vpp > 1 else None, pp_rank=r))
    except (AssertionError, ValueError, RuntimeError, ZeroDivisionError) as e:
        return None, _fmt(e)
    return out, None


def interleaved_schedule(cfg: Any, pp: int, vpp: int, num_microbatches: int) -> str | None:
    """The micro-batch checks of ``forward_backward_pipelining_with_interleaving``; None if they
    pass. The schedule is stopped (before any communication) by the second ``get_model_type``
    call, which follows the checks."""
    L = _libs()
    torch, schedules = L.torch, L.schedules
    from megatron.core.enums import ModelType

    chunks = []
    for _ in range(vpp):
        m = torch.nn.Module()
        m.config = cfg
        chunks.append(m)
    p2p = types.SimpleNamespace(config=cfg, pp_group=FakeGroup(pp))
    pgc = types.SimpleNamespace(
        tp=FakeGroup(1),
        cp=FakeGroup(1),
        embd=None,
        pos_embd=None,
        pp=FakeGroup(pp),
        dp_cp=FakeGroup(1),
    )
    calls: list[int] = []

    def model_type(*_: Any, **__: Any) -> Any:
        calls.append(1)
        if len(calls) > 1:
            raise _ChecksPassed
        return ModelType.encoder_or_decoder

    saved = (cfg.finalize_model_grads_func, cfg.timers, cfg.no_sync_func)
    cfg.finalize_model_grads_func = cfg.timers = cfg.no_sync_func = None
    try:
        with (
            mock.patch.object(schedules, "torch", _TorchNoCuda(torch)),
            mock.patch.object(schedules, "get_model_type", model_type),
        ):
            schedules.forward_backward_pipelining_with_interleaving(
                forward_step_func=None,
                data_iterator=[None] * vpp,
                model=chunks,
                num_microbatches=num_microbatches,
                seq_length=8,
                micro_batch_size=1,
                forward_only=True,
                p2p_communicator=p2p,
                pg_collection=pgc,
            )
    except _ChecksPassed:
        return None
    except (ValueError, RuntimeError, AssertionError) as e:
        return _fmt(e)
    finally:
        cfg.finalize_model_grads_func, cfg.timers, cfg.no_sync_func = saved
    return "schedule ran past its checks without stopping"


#: (regex on a TransformerConfig failure, fields that switch the failing check off).
_TC_NEUTRALISE: tuple[tuple[str, dict[str, Any]], ...] = (
    (r"tensor_model_parallel_size", {"tensor_model_parallel_size": 1, "sequence_parallel": False}),
    (r"sequence parallelism", {"sequence_parallel": False}),
    (r"expert-parallel|num_moe_experts", {"expert_model_parallel_size": 1}),
    (
        r"recompute",
        {"recompute_granularity": None, "recompute_method": None, "recompute_num_layers": None},
    ),
    (
        r"pipeline|Mismatch|layers",
        {
            "num_layers_in_first_pipeline_stage": None,
            "num_layers_in_last_pipeline_stage": None,
            "account_for_embedding_in_pipeline_split": False,
            "account_for_loss_in_pipeline_split": False,
        },
    ),
)

_NEUTRAL = {
    "num_layers": 1,
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "virtual_pipeline_model_parallel_size": None,
    "context_parallel_size": 1,
    "expert_model_parallel_size": 1,
    "expert_tensor_parallel_size": 1,
    "sequence_parallel": False,
    "num_layers_in_first_pipeline_stage": None,
    "num_layers_in_last_pipeline_stage": None,
    "recompute_granularity": None,
    "account_for_embedding_in_pipeline_split": False,
    "account_for_loss_in_pipeline_split": False,
    "recompute_method": None,
    "recompute_num_layers": None,
    "moe_layer_freq": 1,
    "use_cpu_initialization": True,
    "perform_initialization": False,
    "add_bias_linear": False,
}


@functools.lru_cache(maxsize=8192)
def build_layers(
    frozen_tc: tuple[tuple[str, Any], ...],
    act: str,
    tp: int,
    cp: int,
    ep: int,
    etp: int,
    padded_vocab: int,
    dense: bool,
    moe: bool,
) -> tuple[tuple[str, str], ...]:
    """Construct the attention, the dense MLP, the MoE layer and the embedding of one transformer
    layer (local spec) on the meta device, with stand-in process groups of the spec's sizes;
    returns (check, error) pairs. Each part is built on its own, so one failure does not hide
    another."""
    L = _libs()
    torch = L.torch
    from megatron.core.transformer.spec_utils import build_module

    tc = dict(frozen_tc) | _NEUTRAL
    errors: list[tuple[str, str]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            cfg = transformer_config(tc, {"activation_func": act})
        except (ValueError, AssertionError) as e:
            return (("layer_config", _fmt(e)),)
    pgc = L.ProcessGroupCollection()
    sizes = {
        "tp": tp,
        "cp": cp,
        "ep": ep,
        "expt_tp": etp,
        "tp_ep": etp * ep,
        "tp_cp": tp * cp,
        "pp": 1,
        "mp": tp,
        "dp": 1,
        "dp_cp": 1,
        "expt_dp": 1,
        "tp_dp_cp": tp * cp,
        "tp_dp": tp,
        "tp_ep_pp": etp * ep,
        "embd": 1,
        "pos_embd": 1,
    }
    for name, n in sizes.items():
        setattr(pgc, name, FakeGroup(n))
    dense_spec = L.get_gpt_layer_local_spec(num_experts=None, moe_grouped_gemm=False)
    parts: list[tuple[str, Any, dict[str, Any]]] = [
        (
            "attention",
            dense_spec.submodules.self_attention,
            {"layer_number": 1, "pg_collection": pgc},
        )
    ]
    if dense:
        parts.append(("dense_mlp", dense_spec.submodules.mlp, {"tp_group": pgc.tp}))
    if moe and tc.get("num_moe_experts"):
        moe_spec = L.get_gpt_layer_local_spec(
            num_experts=tc["num_moe_experts"], moe_grouped_gemm=False
        )
        parts.append(("moe_mlp", moe_spec.submodules.mlp, {"pg_collection": pgc}))
    # The alltoall token dispatcher creates CUDA streams in its constructor (inert stand-ins).
    with (
        torch.device("meta"),
        warnings.catch_warnings(),
        mock.patch.object(torch.distributed, "is_initialized", lambda: True),
        mock.patch.object(torch.cuda, "Stream", _NoStream),
        mock.patch.object(torch.cuda, "Event", _NoStream),
    ):
        warnings.simplefilter("ignore")
        for check, submodule, kwargs in parts:
            try:
                build_module(submodule, config=cfg, **kwargs)
            except (AssertionError, ValueError, RuntimeError, ZeroDivisionError) as e:
                errors.append((check, _fmt(e)))
        try:
            L.VocabParallelEmbedding(
                padded_vocab,
                cfg.hidden_size,
                init_method=cfg.init_method,
                config=cfg,
                tp_group=FakeGroup(tp),
            )
        except (AssertionError, ValueError, RuntimeError) as e:
            errors.append(("embedding", _fmt(e)))
    return tuple(errors)


def _freeze(d: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in d.items()))


def megatron_oracle(out: Outcome, spec: Any, plan: dict[str, Any]) -> None:
    """Run every Megatron-Core check on the emitted kwargs; record failures on ``out``."""
    L = _libs()
    mk = megatron_core_kwargs(plan)
    tc, cal = mk["TransformerConfig"], mk["callables"]["TransformerConfig"]
    if not out.trainc_ok:
        # trainc emits the recompute details only with full recompute; show the library what
        # the user wrote, so that it judges the spec rather than trainc's cleaned-up version.
        t0 = spec.training
        tc["recompute_method"] = getattr(t0.recompute_method, "value", None)
        tc["recompute_num_layers"] = t0.recompute_num_layers
    c, t, m = spec.cluster, spec.training, spec.model
    world = c.num_nodes * c.gpus_per_node
    pp, vpp_kw = tc["pipeline_model_parallel_size"], tc["virtual_pipeline_model_parallel_size"]
    vpp = vpp_kw or 1

    # TransformerConfig (ModelParallelConfig + TransformerConfig __post_init__). The constructor
    # stops at its first failed check, so after a failure the failing group of fields is
    # neutralised and the constructor runs again, to reach the later checks.
    cfg = last_made = None
    tc_try = dict(tc)
    for _ in range(len(_TC_NEUTRALISE) + 1):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                made = transformer_config(tc_try, cal)
            except (ValueError, AssertionError, TypeError) as e:
                failure = _explain("TransformerConfig", e)
                out.failures.append(failure)
                fix = next((f for rx, f in _TC_NEUTRALISE if re.search(rx, failure.message)), None)
                if fix is None or all(tc_try.get(k) == v for k, v in fix.items()):
                    break
                tc_try |= fix
                continue
        last_made = made
        if tc_try == tc:
            cfg = made
            out.library_warnings += [
                str(w.message)
                for w in caught
                if "sequence parallelism must be used" in str(w.message)
            ]
        break
    for name in ("OptimizerConfig", "DistributedDataParallelConfig"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                getattr(L, name)(**dtype_kwargs(mk[name]))
        except (ValueError, AssertionError, TypeError) as e:
            out.failures.append(_explain(name, e))

    # parallel_state: world factorization, expert grid, vpp needs pp > 1; rank groups
    errs0, groups, dp = init_model_parallel(world, _freeze(mk["initialize_model_parallel"]))
    dense_model = not m.num_experts and spec.parallel.ep == 1
    for check, err in errs0:
        f = _explain(check, err)
        if dense_model and "expert_tensor_model_pipeline_parallel" in err:
            # etp = tp and ep = 1: world % (tp*pp) != 0, so world % (tp*pp*cp) != 0 (TRC101)
            f.explains = f.explains | {"TRC101"}
        out.failures.append(f)
    if out.trainc_ok and groups:
        d = plan["derived"]
        key = tuple(d[k] for k in ("world_size", "tp", "pp", "cp", "ep", "etp", "dp", "expert_dp"))
        out.problems += rank_map_problems(key, _freeze(mk["initialize_model_parallel"]))

    # micro-batches (Megatron's calculator at Megatron's dp)
    nmb = None
    if dp is not None:
        try:
            nmb = L.ConstantNumMicroBatchesCalculator(
                t.global_batch_size, t.micro_batch_size, dp, False, 1
            ).num_micro_batches
        except (AssertionError, ValueError) as e:
            out.failures.append(_explain("microbatches", e))

    # layers actually built per stage
    lcfg = cfg if cfg is not None else raw_transformer_config(tc, cal)
    built, err2 = _layers_built(lcfg, pp, vpp)
    if err2:
        out.failures.append(_explain("layers_to_build", err2))
    elif built is not None and sum(built) != m.num_layers:
        out.hazards.append(f"builds {sum(built)} of {m.num_layers} layers ({built})")
    elif built is not None and out.trainc_ok:
        # the split trainc estimates with is the split Megatron builds, chunk by chunk
        par = plan["spec"]["parallel"]
        chunks = stage_chunk_sizes(
            plan["derived"]["layers_per_stage"],
            vpp,
            par["account_for_embedding_in_pipeline_split"],
            par["account_for_loss_in_pipeline_split"],
        )
        ours = [chunks[r][j] for j in range(vpp) for r in range(pp)]
        theirs = [built[r * vpp + j] for j in range(vpp) for r in range(pp)]
        if ours != theirs:
            out.problems.append(f"layers per virtual stage: trainc {ours}, Megatron {theirs}")

    # interleaved schedule micro-batch checks
    # (on the constructor's config, or the one built with the failing fields neutralised:
    # those never touch pp, vpp or the p2p switches the schedule reads)
    sched_cfg = cfg if cfg is not None else last_made
    if vpp > 1 and pp > 1 and nmb is not None and sched_cfg is not None:
        err3 = interleaved_schedule(sched_cfg, pp, vpp, nmb)
        if err3:
            out.failures.append(_explain("interleaved_schedule", err3))

    # layer construction (divide() in attention, MLP, experts, embedding)
    d = plan["derived"]
    num_moe = d["num_moe_layers"]
    errs = build_layers(
        _freeze(tc),
        cal["activation_func"],
        tc["tensor_model_parallel_size"],
        tc["context_parallel_size"],
        tc["expert_model_parallel_size"],
        tc["expert_tensor_parallel_size"] or tc["tensor_model_parallel_size"],
        d["padded_vocab_size"],
        num_moe < m.num_layers,
        num_moe > 0,
    )
    for check, msg in errs:
        out.failures.append(_explain(check, msg))

    # emitted values that deliberately differ from the library defaults (docs/divergences.md)
    if out.trainc_ok and pp == 2 and vpp > 1:
        default = {f.name: f.default for f in dataclasses.fields(L.TransformerConfig)}
        if (
            tc["batch_p2p_comm"] is False
            and default["batch_p2p_comm"] is True
            and tc["overlap_p2p_comm"] is True
        ):
            out.emit_divergences.add("TRC303")
        else:
            out.problems.append("pp=2 with interleaving emitted with batched p2p")


# ---------------------------------------------------------------------------------------------
# DeepSpeed oracle
# ---------------------------------------------------------------------------------------------


@functools.cache
def _ds() -> types.SimpleNamespace:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import deepspeed.runtime.config as ds_runtime_config
        import pydantic
        from deepspeed.runtime.config import DeepSpeedConfig, DeepSpeedConfigError
    return types.SimpleNamespace(**locals())


def ds_oracle_config(spec: Any, plan: dict[str, Any], accepted: bool) -> dict[str, Any]:
    """The ds_config the oracle judges: the emitted one for an accepted spec; for a rejected one
    the emitter's output with the batch sizes and offload blocks the user asked for."""
    if accepted:
        return copy.deepcopy(plan["engines"]["deepspeed"])
    d = _tolerant_derive(spec)
    s2 = copy.deepcopy(spec)
    s2.training.global_batch_size = s2.training.micro_batch_size * d.num_microbatches * d.dp
    cfg = deepspeed_config(s2, d)
    tr = spec.training
    cfg["train_batch_size"] = tr.global_batch_size
    cfg.pop("gradient_accumulation_steps")  # DeepSpeed derives it from T, M and D (floors)
    z = cfg["zero_optimization"]
    for key, buffers in (("offload_param", 5), ("offload_optimizer", 4)):
        dev = getattr(tr, key).value
        if dev != "none" and key not in z:
            z[key] = {"device": dev, "pin_memory": True, "buffer_count": buffers}
            if dev == "nvme":
                z[key]["nvme_path"] = tr.nvme_path
    return cfg


def deepspeed_oracle(out: Outcome, spec: Any, plan: dict[str, Any]) -> None:
    """``DeepSpeedConfig`` at the real data-parallel size (world / (tp*pp*cp))."""
    p, c = spec.parallel, spec.cluster
    world = c.num_nodes * c.gpus_per_node
    if world % (p.tp * p.pp * p.cp):
        return  # no data-parallel size exists; Megatron's initialize_model_parallel refuses
    dp = world // (p.tp * p.pp * p.cp)
    D = _ds()
    cfg = ds_oracle_config(spec, plan, out.trainc_ok)
    dist = D.ds_runtime_config.dist
    with (
        mock.patch.object(dist, "get_rank", return_value=0),
        mock.patch.object(dist, "get_world_size", return_value=dp),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        try:
            ds = D.DeepSpeedConfig(copy.deepcopy(cfg))
        except (
            AssertionError,
            ValueError,
            TypeError,
            KeyError,
            D.pydantic.ValidationError,
            D.DeepSpeedConfigError,
        ) as e:
            out.failures.append(_explain("DeepSpeedConfig", e))
            return
    if out.trainc_ok:
        triangle = (
            ds.train_batch_size,
            ds.train_micro_batch_size_per_gpu,
            ds.gradient_accumulation_steps,
        )
        want = (
            cfg["train_batch_size"],
            cfg["train_micro_batch_size_per_gpu"],
            cfg["gradient_accumulation_steps"],
        )
        if triangle != want or ds.zero_optimization_stage != cfg["zero_optimization"]["stage"]:
            out.problems.append(f"DeepSpeed read back {triangle}, trainc emitted {want}")


# ---------------------------------------------------------------------------------------------
# one spec
# ---------------------------------------------------------------------------------------------


def check_spec(cfg: dict[str, Any]) -> Outcome:
    """trainc's verdict and every oracle's on one spec dict."""
    spec, diags = trainc_verdict(cfg)
    errors = frozenset(d.rule.id for d in diags if d.is_error)
    others = {e for e in errors if not e.startswith(FAMILIES)}
    out = Outcome(
        cfg,
        frozenset(e for e in errors if e.startswith(FAMILIES)),
        frozenset(d.rule.id for d in diags if d.severity.value == "warning"),
    )
    if others:
        out.problems.append(f"errors outside the judged families: {sorted(others)}")
        return out
    plan = plan_for_oracles(spec, out.trainc_ok)
    megatron_oracle(out, spec, plan)
    if spec.engine.name == "deepspeed":
        deepspeed_oracle(out, spec, plan)
    return out


def judge(out: Outcome, divergent: set[str]) -> list[str]:
    """Disagreements of one outcome; ``divergent`` holds the rules of docs/divergences.md whose
    kind is ``stricter``. Empty = trainc and the oracles agree (up to documented divergences)."""
    bad = list(out.problems)
    for f in out.failures:
        if not f.explains:
            bad.append(f"unmapped {f.check} failure: {f.message[:300]}")
        elif not (f.explains & out.trainc_errors):
            bad.append(
                f"trainc misses what {f.check} rejects ({f.message[:200]}); trainc "
                f"reported {sorted(out.trainc_errors) or 'no error'}"
            )
    if out.trainc_ok and out.hazards:
        bad.append(f"trainc accepts a spec Megatron-Core builds wrongly: {out.hazards}")
    undocumented = out.unexplained() - divergent
    if undocumented:
        bad.append(
            f"trainc rejects with {sorted(undocumented)} what the libraries accept, and "
            "docs/divergences.md does not list it"
        )
    if out.library_warnings and "TRC302" not in out.trainc_warnings and out.trainc_ok:
        bad.append(f"Megatron-Core warns ({out.library_warnings[0]}) but trainc does not (TRC302)")
    return bad


# ---------------------------------------------------------------------------------------------
# many specs (the CI test and scripts/soak.py)
# ---------------------------------------------------------------------------------------------


@dataclass
class Report:
    """Counts and findings over many generated specs."""

    examples: int = 0
    trainc_accepts: int = 0
    oracle_accepts: int = 0
    both_reject: int = 0
    divergences: dict[str, int] = field(default_factory=dict)
    emit_divergences: dict[str, int] = field(default_factory=dict)
    disagreements: list[tuple[dict[str, Any], list[str]]] = field(default_factory=list)

    def add(self, out: Outcome, bad: list[str]) -> None:
        self.examples += 1
        self.trainc_accepts += out.trainc_ok
        self.oracle_accepts += out.oracle_ok
        self.both_reject += (not out.trainc_ok) and (not out.oracle_ok)
        if not bad:
            for r in out.unexplained():
                self.divergences[r] = self.divergences.get(r, 0) + 1
        for r in out.emit_divergences:
            self.emit_divergences[r] = self.emit_divergences.get(r, 0) + 1
        if bad:
            self.disagreements.append((out.spec, bad))

    def summary(self) -> str:
        return (
            f"{self.examples} specs: trainc accepts {self.trainc_accepts}, the oracles "
            f"accept {self.oracle_accepts}, both reject {self.both_reject}; "
            f"{len(self.disagreements)} disagreements; documented divergences exercised: "
            f"{dict(sorted(self.divergences.items()))}, emitted: "
            f"{dict(sorted(self.emit_divergences.items()))}"
        )


def run_generated(
    n: int,
    divergent: set[str],
    *,
    derandomize: bool = True,
    seed: int | None = None,
    extra: list[dict[str, Any]] = (),
) -> Report:
    """Check ``n`` hypothesis-generated specs (plus ``extra``) and return the report."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hyp_seed

    from tests.support.spec_dicts import spec_dicts

    report = Report()

    def one(cfg: dict[str, Any]) -> None:
        out = check_spec(cfg)
        report.add(out, judge(out, divergent))

    for cfg in extra:
        one(cfg)

    @settings(
        max_examples=n,
        derandomize=derandomize,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(spec_dicts())
    def gen(cfg: dict[str, Any]) -> None:
        one(cfg)

    if seed is not None and not derandomize:
        gen = hyp_seed(seed)(gen)
    gen()
    return report
