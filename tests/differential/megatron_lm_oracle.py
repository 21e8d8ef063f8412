"""Megatron-LM's own argument handling as an oracle for ``megatron_args.txt`` (run in a subprocess).

Run with the unpacked megatron-core wheel of Megatron-LM's target version (``core_v0.19.0``, which
ships ``megatron.training``) first on ``PYTHONPATH``, beside the worker's megatron-core 0.16.1,
which this process then never imports::

    PYTHONPATH=<unpacked wheel> python megatron_lm_oracle.py JOBS.json [--out RESULTS.json]
    PYTHONPATH=<unpacked wheel> python megatron_lm_oracle.py --world-size 8 \
        --env CUDA_DEVICE_MAX_CONNECTIONS=1 megatron_args.txt ...

``JOBS.json`` is a list of ``{"id", "args_file", "world_size", "env", "device"}``
(``device: "cpu"`` for a job meant to run on nodes without CUDA); one process runs them
all (importing Megatron costs seconds, a job tens of milliseconds). For each job, what
``pretrain_gpt.py`` would do up to the first forward pass, on CPU:

1. ``megatron.training.arguments.parse_args`` with ``sys.argv`` = the file's flags (one per line,
   ``--flag`` or ``--flag value``, ``#`` comments; how ``torchrun.sh`` reads it) and ``WORLD_SIZE``;
2. ``validate_args(args, {"tokenizer_type": "GPT2BPETokenizer"})`` (pretrain_gpt.py's defaults);
   the CUDA queries in it answer as a Hopper GPU (``get_device_arch_version() == 9``,
   ``get_device_capability() == (9, 0)``), the target of trainc's presets;
3. ``megatron.training.global_vars.set_global_variables`` (the micro-batch calculator, then
   ``build_tokenizer``, which pads the vocabulary); for a ``cpu`` job on a machine without
   CUDA, also ``initialize_megatron()`` as ``pretrain()`` calls it (it requires CUDA);
4. ``parallel_state.initialize_model_parallel`` with the arguments
   ``megatron/training/initialize.py::_initialize_distributed`` passes, on torch's fake process
   group (what Megatron's own ``--fake-process-group`` uses) of ``world_size`` ranks;
5. ``core_transformer_config_from_args`` (every ``TransformerConfig.__post_init__`` check), and
   ``get_num_layers_to_build`` / ``get_transformer_layer_offset`` for every pipeline rank and
   virtual stage;
6. ``get_megatron_ddp_config`` / ``get_megatron_optimizer_config`` (the configs Megatron-LM builds
   from the arguments);
7. a ``GPTModel`` of pipeline rank 0 (virtual stage 0) built on the ``meta`` device with the
   local layer spec (Transformer Engine is not installed here), which runs the layers' ``divide()``
   checks for the rank's tp/cp/ep/etp sizes.

The result of each job is one JSON object: ``accepted``, ``stage`` and ``error`` (the step that
raised and its message, argparse's message for a refused flag), ``dp``, ``padded_vocab_size``,
``tokenizer_vocab_size``, ``num_microbatches``, ``layers_per_chunk`` (per pipeline rank, per
virtual stage), ``layer_offsets``, ``kv_channels``, ``args`` (the parsed value of every flag in the
file, by ``dest``), ``transformer_config``, ``ddp_config``, ``optimizer_config`` (their plain
fields), ``initialize_model_parallel``, ``forward_backward_func`` and ``gpt_model`` (the keyword
arguments Megatron-LM passes: ``initialize.py``, ``training.py::train_step`` and pretrain_gpt's
GPT builder) and ``model_params`` (parameter count of the meta model; ``model_error`` if it failed).
Megatron's own printing goes to stderr; stdout (or ``--out``) carries only the JSON list.
``TRAINC_ORACLE_DEBUG=1`` prints the traceback of a failed meta-device build.

Shims for Python 3.11 and a CPU-only torch (the wheel targets 3.12 and CUDA): ``typing.override``
(3.12) is an identity decorator; ``import triton`` sees a stand-in while Megatron imports (its
kernels are defined, never launched; the stand-in is removed afterwards so torch never sees it);
``torch.compile`` and ``megatron.core.jit.jit_fuser`` are no-ops while Megatron imports (the
fusions are never run, and torch._dynamo would import the stand-in).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import enum
import io
import json
import os
import sys
import time
import traceback
import types
import typing
import warnings
from collections.abc import Callable, Iterator
from typing import Any

#: What pretrain_gpt.py passes to pretrain() as args_defaults.
ARGS_DEFAULTS = {"tokenizer_type": "GPT2BPETokenizer"}
#: The GPU generation the CUDA queries of validate_args answer with (Hopper).
DEVICE_ARCH = 9


# ---------------------------------------------------------------------------------------------
# shims (before anything imports megatron)
# ---------------------------------------------------------------------------------------------


def _identity(func: Callable[..., Any]) -> Callable[..., Any]:
    return func


class _Anything:
    """Stand-in for any triton attribute: a decorator returns the function unchanged."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _Anything()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()

    def __getitem__(self, key: Any) -> Any:
        return _Anything()


class _AnyModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


@contextlib.contextmanager
def _import_shims() -> Iterator[None]:
    """The shims described in the module docstring, for the duration of Megatron's import."""
    import importlib.util

    import torch

    if not hasattr(typing, "override"):
        typing.override = _identity  # type: ignore[attr-defined]
    stubbed: list[str] = []
    if importlib.util.find_spec("triton") is None:
        for name in ("triton", "triton.language"):
            mod = _AnyModule(name)
            mod.__path__ = []  # type: ignore[attr-defined]
            mod.__version__ = "0.0.0"  # type: ignore[attr-defined]  # < 3.4: HAVE_TRITON False
            sys.modules[name] = mod
            stubbed.append(name)
        sys.modules["triton"].language = sys.modules["triton.language"]  # type: ignore[attr-defined]
    jit = types.ModuleType("megatron.core.jit")
    jit.noop_decorator = jit.jit_fuser = _identity  # type: ignore[attr-defined]
    jit.enable_jit_fuser = jit.disable_jit_fuser = lambda: None  # type: ignore[attr-defined]
    sys.modules["megatron.core.jit"] = jit
    real_compile = torch.compile

    def no_compile(fn: Any = None, **kwargs: Any) -> Any:
        return fn if fn is not None else _identity

    torch.compile = no_compile  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.compile = real_compile
        for name in stubbed:
            sys.modules.pop(name, None)


def _import_megatron() -> types.SimpleNamespace:
    """Import what the jobs use, under :func:`_import_shims` (seconds: torch, then Megatron)."""
    with _import_shims(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import megatron.core
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state
        from megatron.core.models.common.embeddings import rope_utils
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.models.gpt.gpt_model import GPTModel
        from megatron.core.num_microbatches_calculator import (
            destroy_num_microbatches_calculator,
            get_num_microbatches,
        )
        from megatron.core.transformer import transformer_config
        from megatron.core.transformer.transformer_block import get_num_layers_to_build
        from megatron.core.transformer.transformer_layer import get_transformer_layer_offset
        from megatron.training import arguments, global_vars, initialize, training
        from megatron.training.argument_utils import core_transformer_config_from_args
        from torch.testing._internal.distributed.fake_pg import FakeStore
    return types.SimpleNamespace(
        torch=torch,
        dist=dist,
        FakeStore=FakeStore,
        megatron=megatron,
        parallel_state=parallel_state,
        get_gpt_layer_local_spec=get_gpt_layer_local_spec,
        GPTModel=GPTModel,
        destroy_num_microbatches_calculator=destroy_num_microbatches_calculator,
        get_num_microbatches=get_num_microbatches,
        rope_utils=rope_utils,
        transformer_config=transformer_config,
        get_num_layers_to_build=get_num_layers_to_build,
        get_transformer_layer_offset=get_transformer_layer_offset,
        arguments=arguments,
        global_vars=global_vars,
        initialize=initialize,
        training=training,
        core_transformer_config_from_args=core_transformer_config_from_args,
    )


# ---------------------------------------------------------------------------------------------
# one job
# ---------------------------------------------------------------------------------------------


def read_args_file(path: str) -> list[str]:
    """``megatron_args.txt`` as argv: ``--flag`` or ``--flag value`` per line (the value is the
    rest of the line, as torchrun.sh reads it); blank lines and ``#`` comments skipped."""
    argv: list[str] = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            flag, sep, value = line.partition(" ")
            argv.append(flag)
            if sep:
                argv.append(value)
    return argv


def _plain(value: Any) -> Any:
    """A JSON-able form of an argument or config value (dtypes and enums by name)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return (
            value if value == value and value not in (float("inf"), float("-inf")) else repr(value)
        )
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    text = str(value)
    return text[len("torch.") :] if text.startswith("torch.") else text


def _fields(obj: Any) -> dict[str, Any]:
    """The plain (JSON-able scalar or list) fields of a dataclass instance."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name, None)
        if callable(v) and not isinstance(v, enum.Enum):
            continue
        out[f.name] = _plain(v)
    return out


def _cache_parser(M: types.SimpleNamespace) -> dict[str, str]:
    """Build Megatron-LM's parser once (about a second each time) and let ``parse_args`` reuse
    it; return option string -> dest. ``parse_args`` is otherwise unchanged; :func:`run_job`
    copies the mutable defaults it hands out, so one job's ``validate_args`` cannot change the
    next job's defaults."""
    parser = M.arguments.add_megatron_arguments(
        argparse.ArgumentParser(
            prog="pretrain_gpt.py", description="Megatron-LM Arguments", allow_abbrev=False
        )
    )
    M.arguments.add_megatron_arguments = lambda _fresh: parser
    return {opt: a.dest for a in parser._actions for opt in a.option_strings}


def _reset(M: types.SimpleNamespace) -> None:
    """Undo one job's global state (Megatron's globals, the process groups)."""
    with contextlib.suppress(Exception):
        M.parallel_state.destroy_model_parallel()
    with contextlib.suppress(Exception):
        M.global_vars.unset_global_variables()
    with contextlib.suppress(Exception):
        M.destroy_num_microbatches_calculator()
    if M.dist.is_initialized():
        M.dist.destroy_process_group()


def _error(e: BaseException) -> str:
    msg = str(e).strip()
    if not msg and isinstance(e, AssertionError):  # bare assert: say where
        tb = traceback.extract_tb(e.__traceback__)[-1]
        msg = f"{os.path.basename(tb.filename)}:{tb.lineno}: {tb.line}"
    return f"{type(e).__name__}: {msg}"


def run_job(M: types.SimpleNamespace, dests: dict[str, str], job: dict[str, Any]) -> dict[str, Any]:
    """Steps 1-7 of the module docstring on one job; never raises."""
    start = time.perf_counter()
    out: dict[str, Any] = {
        "id": job.get("id", job["args_file"]),
        "accepted": False,
        "stage": None,
        "error": None,
    }
    argv = read_args_file(job["args_file"])
    world = int(job["world_size"])
    saved_env = dict(os.environ)
    os.environ.update({"WORLD_SIZE": str(world), "RANK": "0", "LOCAL_RANK": "0"})
    os.environ.update({k: str(v) for k, v in (job.get("env") or {}).items()})
    stage = "parse_args"
    try:
        sys.argv = ["pretrain_gpt.py", *argv]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = M.arguments.parse_args()
        except SystemExit as e:
            lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
            raise ValueError(lines[-1] if lines else f"argparse exit {e.code}") from None
        for name, value in vars(args).items():  # the cached parser's defaults stay pristine
            if isinstance(value, (list, dict, set)):
                setattr(args, name, copy.deepcopy(value))
        out["args"] = {
            dests[a]: _plain(getattr(args, dests[a], None))  # as parsed
            for a in argv
            if a.startswith("--") and a in dests
        }
        stage = "validate_args"
        with (
            _patched(M.arguments, "get_device_arch_version", lambda: DEVICE_ARCH),
            _patched(M.torch.cuda, "get_device_capability", lambda *a, **k: (DEVICE_ARCH, 0)),
        ):
            M.arguments.validate_args(args, dict(ARGS_DEFAULTS))
        out["args"] = {
            dests[a]: _plain(getattr(args, dests[a], None))  # as validated
            for a in argv
            if a.startswith("--") and a in dests
        }
        out["dp"] = args.data_parallel_size
        out["kv_channels"] = args.kv_channels
        out["split"] = args.split
        out["virtual_pipeline_model_parallel_size"] = args.virtual_pipeline_model_parallel_size
        stage = "set_global_variables"
        M.global_vars.set_global_variables(args)
        out["num_microbatches"] = M.get_num_microbatches()
        out["padded_vocab_size"] = args.padded_vocab_size
        out["tokenizer_vocab_size"] = M.global_vars.get_tokenizer().vocab_size
        if job.get("device") == "cpu" and not M.torch.cuda.is_available():
            stage = "initialize_megatron"  # pretrain()'s first step, on a node without CUDA
            M.initialize.initialize_megatron()
        stage = "initialize_model_parallel"
        M.dist.init_process_group("fake", store=M.FakeStore(), rank=0, world_size=world)
        with _patched(M.dist, "new_group", _member_groups_only(M.dist.new_group, M.dist)):
            out["initialize_model_parallel"] = _plain(_initialize_model_parallel(M, args))
        out["forward_backward_func"] = {  # megatron/training/training.py::train_step
            "num_microbatches": M.get_num_microbatches(),
            "seq_length": args.seq_length,
            "micro_batch_size": args.micro_batch_size,
            "decoder_seq_length": args.decoder_seq_length,
        }
        ps = M.parallel_state
        out["groups"] = {
            "dp": ps.get_data_parallel_world_size(),
            "dp_cp": ps.get_data_parallel_world_size(with_context_parallel=True),
            "expert_dp": ps.get_expert_data_parallel_world_size(),
        }
        stage = "transformer_config"
        with _as_if_te(M):
            config = M.core_transformer_config_from_args(args)
        out["transformer_config"] = _fields(config)
        stage = "layers_to_build"
        vpp = args.virtual_pipeline_model_parallel_size  # None without interleaving
        stages = list(range(vpp)) if vpp else [None]
        chunks, offsets = [], []
        for r in range(args.pipeline_model_parallel_size):
            chunks.append(
                [M.get_num_layers_to_build(config, vp_stage=v, pp_rank=r) for v in stages]
            )
            offsets.append(
                [M.get_transformer_layer_offset(config, vp_stage=v, pp_rank=r) for v in stages]
            )
        out["layers_per_chunk"], out["layer_offsets"] = chunks, offsets
        stage = "ddp_config"
        out["ddp_config"] = _fields(M.training.get_megatron_ddp_config(args))
        stage = "optimizer_config"
        opt, _overrides = M.training.get_megatron_optimizer_config(args)
        out["optimizer_config"] = _fields(opt)
        # what pretrain_gpt.py's GPT builder passes to GPTModel (Megatron-LM gpt_builders.py)
        out["gpt_model"] = {
            "vocab_size": args.padded_vocab_size,
            "max_sequence_length": args.max_position_embeddings,
            "position_embedding_type": args.position_embedding_type,
            "rotary_base": args.rotary_base,
            "rotary_percent": args.rotary_percent,
            "rope_scaling": args.use_rope_scaling,
            "rope_scaling_factor": args.rope_scaling_factor,
            "share_embeddings_and_output_weights": not args.untie_embeddings_and_output_weights,
        }
        out["accepted"] = True
        stage = "model_build"
        try:
            out["model_params"] = _meta_model_params(M, args, config)
        except Exception as e:  # reported, not a verdict: the CPU build is a stand-in
            out["model_error"] = _error(e)
            if os.environ.get("TRAINC_ORACLE_DEBUG"):
                traceback.print_exc()
        stage = None
    except BaseException as e:
        if isinstance(e, KeyboardInterrupt):
            raise
        out["stage"], out["error"] = stage, _error(e)
        out["accepted"] = False
    finally:
        if out["stage"] is None and not out["accepted"]:
            out["stage"] = stage
        _reset(M)
        out["seconds"] = round(time.perf_counter() - start, 3)
        os.environ.clear()
        os.environ.update(saved_env)
    return out


class _NoStream:
    """torch.cuda.Stream / Event stand-in (constructed by the MoE layers, never used)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


def _member_groups_only(new_group: Callable[..., Any], dist: Any) -> Callable[..., Any]:
    """``torch.distributed.new_group`` that builds only the groups this process (rank 0) is in
    and returns ``NON_GROUP_MEMBER`` for the others at once, as torch does for a non-member
    (a 16,384-rank layout asks for ~78,000 groups; building each costs ~0.1 ms)."""

    def wrapped(ranks: Any = None, *args: Any, **kwargs: Any) -> Any:
        if ranks is not None and 0 not in ranks:
            return dist.GroupMember.NON_GROUP_MEMBER
        return new_group(ranks, *args, **kwargs)

    return wrapped


def _initialize_model_parallel(M: types.SimpleNamespace, args: Any) -> dict[str, Any]:
    """``initialize_model_parallel`` with the arguments of Megatron-LM's
    ``megatron/training/initialize.py::_initialize_distributed`` (no gloo groups: gloo cannot
    run on the fake world; ``get_embedding_ranks`` etc. left at their defaults, as
    pretrain_gpt.py does); returns those keyword arguments."""
    kwargs = dict(
        tensor_model_parallel_size=args.tensor_model_parallel_size,
        pipeline_model_parallel_size=args.pipeline_model_parallel_size,
        virtual_pipeline_model_parallel_size=args.virtual_pipeline_model_parallel_size,
        pipeline_model_parallel_comm_backend=args.pipeline_model_parallel_comm_backend,
        use_sharp=args.use_sharp,
        gtp_remat_size=args.gtp_weight_remat_size,
        expert_gtp_remat_size=args.expert_gtp_weight_remat_size,
        context_parallel_size=args.context_parallel_size,
        hierarchical_context_parallel_sizes=args.hierarchical_context_parallel_sizes,
        hybrid_context_parallel=args.hybrid_context_parallel,
        expert_model_parallel_size=args.expert_model_parallel_size,
        num_distributed_optimizer_instances=args.num_distributed_optimizer_instances,
        expert_tensor_parallel_size=args.expert_tensor_parallel_size,
        distributed_timeout_minutes=args.distributed_timeout_minutes,
        nccl_communicator_config_path=args.nccl_communicator_config_path,
        order="tp-cp-ep-dp-pp" if not args.use_tp_pp_dp_mapping else "tp-cp-ep-pp-dp",
        create_gloo_process_groups=False,
        high_priority_stream_groups=args.high_priority_stream_groups,
        sharp_enabled_group=args.sharp_enabled_group,
    )
    M.parallel_state.initialize_model_parallel(**kwargs)
    return kwargs


@contextlib.contextmanager
def _as_if_te(M: types.SimpleNamespace) -> Iterator[None]:
    """TransformerConfig's checks as on a GPU node with a recent Transformer Engine: TE version
    checks pass and the fused RoPE kernels exist (nothing is run)."""
    with (
        _patched(M.transformer_config, "is_te_min_version", lambda *a, **k: True),
        _patched(
            M.rope_utils,
            "fused_apply_rotary_pos_emb",
            M.rope_utils.fused_apply_rotary_pos_emb or _identity,
        ),
    ):
        yield


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def _meta_model_params(M: types.SimpleNamespace, args: Any, config: Any) -> int:
    """Parameters of pipeline rank 0 / virtual stage 0 built on the meta device (local spec)."""
    torch = M.torch
    config = copy.copy(config)  # CPU-side allocation (under the meta device), no init kernels
    config.use_cpu_initialization, config.perform_initialization = True, False
    config.init_model_with_meta_device = True  # no all-reduce of tied embeddings
    # Transformer Engine / apex fused kernels the local spec has no counterpart for
    # (and torch's norms refuse sequence parallelism, which changes no parameter shape)
    config.persist_layer_norm = config.gradient_accumulation_fusion = False
    config.sequence_parallel = False
    config.context_parallel_size = 1  # local attention has no CP; CP shards no parameter
    vp = 0 if args.virtual_pipeline_model_parallel_size else None
    spec = M.get_gpt_layer_local_spec(
        num_experts=args.num_experts,
        moe_grouped_gemm=args.moe_grouped_gemm,
        qk_layernorm=args.qk_layernorm,
        normalization=args.normalization,
    )
    pp = args.pipeline_model_parallel_size
    with (
        torch.device("meta"),
        _patched(torch.cuda, "Stream", _NoStream),
        _patched(torch.cuda, "Event", _NoStream),
    ):
        model = M.GPTModel(
            config=config,
            transformer_layer_spec=spec,
            vocab_size=args.padded_vocab_size,
            max_sequence_length=args.max_position_embeddings,
            pre_process=True,
            post_process=pp == 1 and not args.virtual_pipeline_model_parallel_size,
            share_embeddings_and_output_weights=not args.untie_embeddings_and_output_weights,
            position_embedding_type=args.position_embedding_type,
            rotary_percent=args.rotary_percent,
            rotary_base=args.rotary_base,
            vp_stage=vp,
        )
    return sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> int:
    """Run the jobs; print (or write ``--out``) the JSON list of results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "inputs", nargs="+", help="JOBS.json, or megatron_args.txt files with --world-size"
    )
    ap.add_argument("--world-size", type=int)
    ap.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment of every file's job (e.g. CUDA_DEVICE_MAX_CONNECTIONS=1)",
    )
    ap.add_argument("--out")
    opts = ap.parse_args(argv)
    if opts.world_size is not None:
        env = dict(kv.split("=", 1) for kv in opts.env)
        jobs = [
            {"id": p, "args_file": p, "world_size": opts.world_size, "env": env}
            for p in opts.inputs
        ]
    else:
        jobs = []
        for p in opts.inputs:
            with open(p, encoding="utf-8") as f:
                jobs += json.load(f)
    real_stdout = sys.stdout
    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        M = _import_megatron()
        dests = _cache_parser(M)
        results = [run_job(M, dests, job) for job in jobs]
    from megatron.core import package_info  # (__version__ appends the git hash of the cwd)

    version = package_info.__shortversion__
    for r in results:
        r["megatron_core_version"] = version
    text = json.dumps(results, indent=1, sort_keys=True)
    if opts.out:
        with open(opts.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        real_stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
