"""One truth, worker side (issue 11, Deliver 4): the objects the trainc worker builds - the
Megatron-Core TransformerConfig, DistributedDataParallelConfig, OptimizerConfig and
OptimizerParamScheduler, the initialize_model_parallel / GPTModel / forward_backward_func
arguments, and the DeepSpeed config - hold exactly what ``megatron_core.yaml`` and
``ds_config.json`` say, except the CPU substitutions the worker announces. In process, without a
distributed launch (megatron-core and deepspeed from the ``worker`` extra).
"""

from __future__ import annotations

import copy
import json
import types
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings

from tests.support.emit import CASE_NAMES, compile_case
from tests.support.one_truth_specs import compile_cfg, one_truth_specs

pytestmark = pytest.mark.worker
pytest.importorskip("megatron.core")
pytest.importorskip("deepspeed")

import torch  # noqa: E402

from trainc.launch.shrink import full_dims  # noqa: E402
from trainc.launch.worker import model as mb  # noqa: E402
from trainc.launch.worker import runtime as _runtime  # noqa: E402
from trainc.launch.worker.engines import megatron as train  # noqa: E402
from trainc.launch.worker.runtime import Settings, read_settings  # noqa: E402
from trainc.launch.worker_args import parse_args  # noqa: E402

#: What the worker changes on CPU, each announced (an ``override:`` line): Transformer Engine ->
#: local layers with CPU initialisation, fp16 -> bf16 (no fp16 CPU kernels), and the TP / EP
#: communication overlaps off (CUDA-only schedules of the same math), and the experts' grouped
#: GEMM off (Transformer Engine's GroupedLinear; the same math expert by expert).
CPU_TC_SUBSTITUTIONS = {
    "transformer_impl",
    "use_cpu_initialization",
    "bf16",
    "fp16",
    "params_dtype",
    "pipeline_dtype",
    "tp_comm_overlap",
    "overlap_moe_expert_parallel_comm",
    "moe_grouped_gemm",
}


def settings_of(files: dict[str, str], tmp: Path, *argv: str) -> Settings:
    """The worker's Settings for the emitted plan.json (as ``trainc.launch.worker.main``)."""
    path = tmp / "plan.json"
    path.write_text(files["plan.json"], encoding="utf-8")
    plan = json.loads(files["plan.json"])
    return read_settings(plan, parse_args(["--plan", str(path), *argv]), str(path))


def plain(v: Any) -> Any:
    """A torch dtype by plan.json's name; anything else unchanged."""
    return str(v).removeprefix("torch.") if isinstance(v, torch.dtype) else v


def same(a: Any, b: Any) -> bool:
    """Equal, and the same kind of value (a bool is not an int here)."""
    return (type(a) is bool) == (type(b) is bool) and a == b


def build_megatron(s: Settings) -> dict[str, tuple[Any, dict[str, Any], set[str]]]:
    """What ``trainc.launch.train.run`` builds before training (no process group): the
    TransformerConfig from ``model.transformer_config``, and the DDP / optimizer / scheduler
    settings from ``plan.json``'s engines.megatron_core with the worker's own changes (none
    unless --lr, --reference or the CPU precision substitution). The optimizer the scheduler
    drives is a stand-in with one parameter group."""
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    dims = full_dims(s.plan)
    precision = _runtime.resolve_precision(s)
    cpu = s.device == "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config, tc_kwargs, changes = mb.transformer_config(
            s.plan, dims, s.layout, cpu=cpu, precision=precision
        )
    core = s.plan["engines"]["megatron_core"]
    ddp_kw = dict(core["DistributedDataParallelConfig"])
    opt_kw, opt_changed = dict(core["OptimizerConfig"]), set()
    if precision != s.precision:
        opt_kw, opt_changed = train._changed(
            opt_kw,
            "OptimizerConfig",
            {"bf16": precision == "bf16", "fp16": precision == "fp16"},
            "precision",
        )
    opt_kw["params_dtype"] = config.params_dtype
    sched_kw = dict(core["OptimizerParamScheduler"])
    stand_in = types.SimpleNamespace(param_groups=[{"params": [], "lr": 0.0, "weight_decay": 0.0}])
    return {
        "TransformerConfig": (config, tc_kwargs, {c.split(":")[0] for c in changes}),
        "DistributedDataParallelConfig": (DistributedDataParallelConfig(**ddp_kw), ddp_kw, set()),
        "OptimizerConfig": (OptimizerConfig(**opt_kw), opt_kw, opt_changed | {"params_dtype"}),
        "OptimizerParamScheduler": (OptimizerParamScheduler(stand_in, **sched_kw), sched_kw, set()),
    }


def check_megatron(files: dict[str, str], tmp: Path, device: str | None = None) -> None:
    """Every megatron_core.yaml key of the four groups is an attribute of the built object with
    the YAML's value (dtypes by name), apart from the announced CPU substitutions; the worker's
    own cross_check agrees; the other groups are what the worker passes."""
    core_yaml = yaml.safe_load(files["megatron_core.yaml"])
    s = settings_of(files, tmp, *(["--device", device] if device else []))
    cpu = s.device == "cpu"
    built = build_megatron(s)
    bad = {}
    for group, (obj, _, announced) in built.items():
        for key, want in core_yaml[group].items():
            assert hasattr(obj, key), (
                f"{group} has no attribute {key}: the worker's cross_check would not see it"
            )
            got = plain(getattr(obj, key))
            if not same(got, want) and not (
                cpu and key in announced and key in CPU_TC_SUBSTITUTIONS | {"bf16", "fp16"}
            ):
                bad[f"{group}.{key}"] = (want, got)
        if not cpu:
            assert announced <= {"params_dtype"}, (group, announced)
    assert bad == {}
    train.cross_check(s, built)  # the worker's own check: raises SystemExit on a difference
    # initialize_model_parallel: what init_parallel_state passes
    got = _init_parallel_kwargs(s)
    assert got == core_yaml["initialize_model_parallel"]
    # GPTModel: build_chunks passes the group with the full dims' vocabulary and positions
    dims = full_dims(s.plan)
    assert dims.vocab_size == core_yaml["GPTModel"]["vocab_size"]
    assert dims.max_position_embeddings == core_yaml["GPTModel"]["max_sequence_length"]
    # forward_backward_func: the training loop's call
    fb = core_yaml["forward_backward_func"]
    assert (s.num_microbatches, dims.seq_length, s.micro_batch_size, dims.seq_length) == (
        fb["num_microbatches"],
        fb["seq_length"],
        fb["micro_batch_size"],
        fb["decoder_seq_length"],
    )
    # the activation callable
    act = core_yaml["callables"]["TransformerConfig"]["activation_func"]
    assert built["TransformerConfig"][0].activation_func is mb._dotted(act)


class _Stop(Exception):
    pass


def _init_parallel_kwargs(s: Settings) -> dict[str, Any]:
    """The keyword arguments ``worker.init_parallel_state`` passes to
    ``initialize_model_parallel`` (captured; no process group is created)."""
    from megatron.core import parallel_state as ps

    from trainc.launch.worker.runtime import init_parallel_state

    seen: dict[str, Any] = {}

    def capture(**kw: Any) -> None:
        seen.update(kw)
        raise _Stop

    with mock.patch.object(ps, "initialize_model_parallel", capture), pytest.raises(_Stop):
        init_parallel_state(s)
    seen.pop("distributed_timeout_minutes")
    return seen


@pytest.mark.parametrize("device", [None, "cpu"])
@pytest.mark.parametrize("case", CASE_NAMES)
def test_golden_case_megatron_objects(case: str, device: str | None, tmp_path: Path) -> None:
    _, files = compile_case(case)
    check_megatron(files, tmp_path, device)


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(one_truth_specs(low_precision=False))  # FP8/FP4 objects need Transformer Engine (CUDA)
def test_generated_megatron_objects(cfg: dict[str, Any]) -> None:
    import tempfile

    result = compile_cfg(cfg)
    assume(result.ok)
    for device in (None, "cpu"):  # as planned, and with the CPU substitutions (--device cpu)
        with tempfile.TemporaryDirectory() as tmp:
            check_megatron(result.files, Path(tmp), device)


# --- DeepSpeed -------------------------------------------------------------------------------


def _cpu_changes(emitted: dict[str, Any], loaded: dict[str, Any]) -> dict[str, Any]:
    """``emitted`` with the worker's announced CPU substitutions applied (ds_engine.load_config's
    docstring): fp16 -> bf16, torch's AdamW, no DeepSpeedCPUAdam, no pinned host memory."""
    want = copy.deepcopy(emitted)
    if want.get("fp16", {}).get("enabled"):
        want.pop("fp16")
        want["bf16"] = {"enabled": True}
    if want["optimizer"]["type"] == "AdamW":
        want["optimizer"]["params"] |= {"torch_adam": True, "adam_w_mode": True}
    if want["zero_optimization"].get("offload_optimizer"):
        want["zero_force_ds_cpu_optimizer"] = False
        for k in ("offload_optimizer", "offload_param"):
            if k in want["zero_optimization"]:
                want["zero_optimization"][k]["pin_memory"] = False
    return want


def check_deepspeed(files: dict[str, str], tmp: Path, device: str | None = None) -> None:
    from deepspeed.runtime.config import DeepSpeedConfig

    from trainc.launch.worker.engines.deepspeed import load_config

    emitted = json.loads(files["ds_config.json"])
    s = settings_of(files, tmp, *(["--device", device] if device else []))
    loaded = load_config(s)
    want = _cpu_changes(emitted, loaded) if s.device == "cpu" else copy.deepcopy(emitted)
    # the worker prints its own step lines: DeepSpeed's logger is silenced (not a setting)
    want["steps_per_print"] = 10**9
    assert loaded == want
    import deepspeed.comm as dist

    with (
        mock.patch.object(dist, "get_rank", return_value=0),
        mock.patch.object(dist, "get_world_size", return_value=s.layout["dp"]),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        c = DeepSpeedConfig(copy.deepcopy(loaded))
    assert (
        c.train_batch_size,
        c.train_micro_batch_size_per_gpu,
        c.gradient_accumulation_steps,
    ) == (
        emitted["train_batch_size"],
        emitted["train_micro_batch_size_per_gpu"],
        emitted["gradient_accumulation_steps"],
    )
    assert c.zero_optimization_stage == emitted["zero_optimization"]["stage"]
    assert c.gradient_clipping == emitted["gradient_clipping"]
    assert c.bfloat16_config.enabled == ("bf16" in loaded)
    assert c.float16_config.enabled == ("fp16" in loaded)
    # DeepSpeed's own optimizers by lower-case name, the others from torch.optim by class name
    # (engine.py _configure_basic_optimizer): AdamW -> "adamw", SGD -> torch.optim.SGD
    from deepspeed.runtime.config import DEEPSPEED_OPTIMIZERS

    assert c.optimizer_name.lower() == loaded["optimizer"]["type"].lower()
    assert c.optimizer_name in DEEPSPEED_OPTIMIZERS or hasattr(torch.optim, c.optimizer_name)
    assert c.optimizer_params == loaded["optimizer"]["params"]
    assert c.scheduler_name == emitted["scheduler"]["type"]
    assert c.scheduler_params == emitted["scheduler"]["params"]
    # the model of engine=deepspeed is the same Megatron-Core TransformerConfig
    check_megatron(files, tmp, device)


def test_golden_case_deepspeed_config() -> None:
    import tempfile

    _, files = compile_case("llama2-7b-deepspeed-zero3-offload")
    for device in (None, "cpu"):  # as planned, and with the CPU substitutions (--device cpu)
        with tempfile.TemporaryDirectory() as tmp:
            check_deepspeed(files, Path(tmp), device)


@settings(
    max_examples=20,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(one_truth_specs(engine="deepspeed"))
def test_generated_deepspeed_config(cfg: dict[str, Any]) -> None:
    import tempfile

    result = compile_cfg(cfg)
    assume(result.ok)
    with tempfile.TemporaryDirectory() as tmp:
        check_deepspeed(result.files, Path(tmp))
    with tempfile.TemporaryDirectory() as tmp:
        check_deepspeed(result.files, Path(tmp), "cpu")


def test_worker_refuses_fp8_plans_on_cpu() -> None:
    """A CUDA plan with FP8 or the precision-aware optimizer cannot run with --device cpu: the
    worker stops naming the keys instead of training another model (one truth)."""
    from trainc.compiler.pipeline import plan_and_estimate
    from trainc.compiler.targets.megatron import megatron_core_kwargs
    from trainc.schemas import Fp8Format, StateDtype

    spec = make_spec_for_worker()
    spec.training.fp8_format = Fp8Format.hybrid
    spec.training.exp_avg_dtype = StateDtype.bf16
    spec.parallel.zero_stage = 1
    nspec, diags, plan = plan_and_estimate(spec)
    assert plan is not None, [d.message for d in diags if d.is_error]
    core = megatron_core_kwargs(nspec, plan.derived)
    with pytest.raises(SystemExit, match=r"fp8=hybrid.*use_precision_aware_optimizer"):
        train.refuse_low_precision_on_cpu(core)
    spec.training.fp8_format = Fp8Format.none
    spec.training.exp_avg_dtype = StateDtype.fp32
    nspec, _, plan = plan_and_estimate(spec)
    assert plan is not None
    train.refuse_low_precision_on_cpu(megatron_core_kwargs(nspec, plan.derived))  # no error


def make_spec_for_worker() -> Any:
    from tests.support.kit import make

    return make(**{"launch.device": "cuda", "cluster.gpu": "h100-80g"})  # FP8: Hopper or later


@pytest.mark.parametrize("device", [None, "cpu"])
def test_dense_first_layers_and_router_keys_reach_the_worker_config(
    device: str | None, tmp_path: Path
) -> None:
    """moe_first_k_dense_layers (the list form of moe_layer_freq), group-limited routing and
    the expert bias are TransformerConfig fields the worker builds with the plan's values."""
    _, files = compile_case(
        "mixtral-8x7b-ep8",
        (
            "model.moe_first_k_dense_layers=3",
            "model.moe_router_num_groups=4",
            "model.moe_router_group_topk=2",
            "model.moe_router_score_function=sigmoid",
            "model.moe_router_enable_expert_bias=true",
        ),
    )
    check_megatron(files, tmp_path, device)
    config = build_megatron(settings_of(files, tmp_path))["TransformerConfig"][0]
    assert config.moe_layer_freq == [0, 0, 0] + [1] * 29
    assert (config.moe_router_num_groups, config.moe_router_group_topk) == (4, 2)
    assert config.moe_router_enable_expert_bias is True
