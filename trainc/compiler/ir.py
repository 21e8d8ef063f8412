"""The compiler's typed intermediate representation: frozen classes that the passes hand on
(:mod:`trainc.compiler.pipeline`), and whose ``to_json()`` is ``plan.json``.

* :class:`Layout` (``plan.json`` ``derived``): the validated grid, batch and schedule values;
  every field is concrete (the validators guarantee it; :class:`trainc.compiler.derive.Derived`
  is the total, ``None``-where-it-does-not-divide variant the validators use).
* :class:`Engines` (``engines``): every engine's settings, built once
  (:func:`trainc.compiler.targets.engine_configs`: ``megatron_core`` and the section of the
  spec's :data:`~trainc.compiler.targets.TARGETS` row).
* :class:`Estimates` (``estimates``): memory, communication, bubble and time per GPU.
* :class:`Plan`: the normalized spec with all of the above.

Units are in the field names (``_bytes``, ``_seconds``, ``_gbps``); per GPU unless named otherwise.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from trainc.schemas import TrainSpec

T = TypeVar("T")


def filled(value: T | None, key: str) -> T:
    """A value normalization fills (``normalize`` guarantees it for a spec past validation);
    AssertionError names ``key`` if a pass is handed an unnormalized spec (a bug, never a
    silent fallback)."""
    assert value is not None, f"{key} is not filled: the spec was not normalized"
    return value


#: The JSON scalars :func:`_json` returns as they are (checked by exact type first: the common
#: case, and no dataclass, mapping or sequence is one of them).
_SCALARS = (str, int, float, bool, type(None))


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    """The field names of dataclass ``cls`` in declaration order (computed once per class)."""
    return tuple(f.name for f in dataclasses.fields(cls))


def _json(obj: Any) -> Any:
    """Plain JSON values of a frozen IR class (tuples become lists, mappings dicts)."""
    if type(obj) in _SCALARS:
        return obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {name: _json(getattr(obj, name)) for name in _field_names(type(obj))}
    if isinstance(obj, Mapping):
        return {str(k): _json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json(x) for x in obj]
    return obj


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """``derived``: counts unless named otherwise (a validated spec: nothing is ``None`` but
    ``layers_per_virtual_stage`` and the epoch counts without data sizes)."""

    world_size: int
    """GPUs in the job (num_nodes x gpus_per_node)."""
    tp: int
    pp: int
    vpp: int
    cp: int
    ep: int
    etp: int
    dp: int
    """world / (tp*pp*cp) (Megatron's data_parallel_size; excludes cp)."""
    expert_dp: int
    """world / (etp*ep*pp)."""
    model_parallel_size: int
    """tp x pp x cp."""
    num_microbatches: int
    """global_batch_size / (micro_batch_size x dp)."""
    layers_per_stage: tuple[int, ...]
    """Transformer layers on each PP stage (sums to num_layers)."""
    layers_per_virtual_stage: int | None
    """Megatron-LM --num-layers-per-virtual-pipeline-stage (even interleaved split only)."""
    uneven_pipeline: bool
    padded_vocab_size: int
    num_moe_layers: int
    sequence_parallel: bool
    distributed_optimizer: bool
    megatron_fsdp: bool
    """engine=megatron with zero_stage 3: Megatron-FSDP (optim_grads_params)."""
    overlap_p2p_comm: bool
    batch_p2p_comm: bool
    tokens_per_step: int
    """global_batch_size x seq_length (tokens per optimizer step, whole job; the same for any
    cp: derive.py, the one place batch and epoch counts are computed)."""
    samples_per_step: int
    """Sequences per optimizer step (= global_batch_size)."""
    dataset_samples: int | None
    """Sequences in the training data (data.num_samples, or data.num_tokens / seq_length);
    None when the spec gives neither."""
    steps_per_epoch: int | None
    """ceil(dataset_samples / samples_per_step); None without dataset_samples."""
    epochs: float | None
    """train_iters x samples_per_step / dataset_samples; None without dataset_samples."""
    checkpoint_format: str
    """The checkpoint format the job writes: torch_dist, torch (Megatron-LM --ckpt-format),
    trainc (the worker's per-rank files) or deepspeed (ZeRO shards)."""
    params_dtype: str
    cuda_device_max_connections_1: bool
    gradient_accumulation_steps: int
    distributed_backend: str
    transformer_impl: str
    add_bias_linear: bool
    secret_env: tuple[str, ...] = ()
    """launch.env names whose values the scripts read from the environment (plan.json: ***)."""

    def to_json(self) -> dict[str, Any]:
        """The ``derived`` object of plan.json (``secret_env`` only when there is one)."""
        out = _json(self)
        if not self.secret_env:
            del out["secret_env"]
        return out  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True, kw_only=True)
class Engines:
    """``engines``: the settings each engine receives (library spellings); its fields are
    :data:`trainc.compiler.targets.SECTIONS`, in that order."""

    megatron_core: Mapping[str, Mapping[str, Any]]
    """Megatron-Core 0.16.1 keyword arguments by class (megatron_core.yaml)."""
    megatron_lm: tuple[tuple[str, ...], ...] | None
    """Megatron-LM pretrain_gpt.py arguments, ``(flag,)`` or ``(flag, value)``
    (megatron_args.txt); None when nothing runs Megatron-LM's CLI."""
    deepspeed: Mapping[str, Any] | None
    """DeepSpeed config (ds_config.json); None unless engine=deepspeed."""
    fsdp: Mapping[str, Any] | None = None
    """FSDP2 settings (mesh, fully_shard, policies; torchtitan_args.txt); None unless
    engine=fsdp."""

    def to_json(self) -> dict[str, Any]:
        """The ``engines`` object of plan.json."""
        return _json(self)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryBytes:
    """Bytes on one GPU."""

    params: int
    grads: int
    optimizer: int
    activations: int
    total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StageMemory:
    """Bytes per GPU of one pipeline stage."""

    stage: int
    layers: int
    params: int
    grads: int
    optimizer: int
    activations: int
    total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveEstimate:
    """One collective of the critical stage, per GPU per optimizer step."""

    axis: str
    name: str
    group_size: int
    count: int
    sent_bytes: int
    received_bytes: int
    crosses_nodes: bool
    bandwidth_gbps: float
    seconds: float
    exposed_seconds: float = 0.0
    """Seconds of it on the critical path (not hidden behind compute by the engine's overlap:
    bucketed DP overlap, CP ring overlap, ZeRO-3 prefetch; docs/performance.md)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimates:
    """``estimates`` (see :func:`trainc.compiler.estimate.estimate` for each quantity)."""

    memory_bytes: MemoryBytes
    """Most loaded stage (``memory_stage``)."""
    memory_stage: int
    memory_per_stage: tuple[StageMemory, ...]
    memory_budget_bytes: int
    params_total: int
    params_per_gpu: int
    comm_bytes_per_step: Mapping[str, int]
    comm_seconds_per_step: Mapping[str, float]
    comm_collectives: tuple[CollectiveEstimate, ...]
    pipeline_bubble_fraction: float
    flops_per_step: float
    hardware_flops_per_step: float
    step_time_seconds: float
    compute_seconds: float
    exposed_comm_seconds: float
    bubble_seconds: float
    offload_seconds: float = 0.0
    """DeepSpeed CPU / NVMe offload's exposed seconds per step on the critical stage (the CPU
    Adam step and the PCIe copies; :func:`trainc.compiler.estimate.time.offload_seconds`)."""
    compute_seconds_by_kind: Mapping[str, float] = field(default_factory=dict)
    """Compute seconds of the critical stage per step by kernel kind (time_model=kernels: gemm,
    attention, elementwise, fixed, recompute; empty with time_model=seed)."""
    memory_margin: float = 0.0
    """(budget - estimate) / budget of the most loaded stage: negative = over the budget."""
    critical_stage: int
    tokens_per_second: float
    mfu: float
    """Model FLOPs per second / (world size x ``cluster.peak_tflops``, the BF16 dense peak),
    with FP8 / FP4 GEMMs too: NVIDIA's and Megatron's convention, so FP8 and BF16 runs compare."""
    assumptions: Mapping[str, float | str]
    rank_map: Mapping[str, Any]
    """Rank generator sizes, strides, groups leaving a node / NVLink domain, first node's rows."""
    step_time_p10_seconds: float | None = None
    """step_time_seconds x the 10th percentile of measured / estimated step time: the cluster's
    calibrated step_time_p10_ratio, else the kernel model's on published runs
    (:mod:`trainc.compiler.estimate.band`); None with the seed time model uncalibrated."""
    step_time_p90_seconds: float | None = None
    """The same at the 90th percentile."""
    step_time_band: str | None = None
    """Where the p10-p90 band comes from: ``calibrated`` or ``published runs (dense)`` /
    ``published runs (moe)``; None without a band."""

    def to_json(self) -> dict[str, Any]:
        """The ``estimates`` object of plan.json."""
        return _json(self)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """A planned spec: what ``plan.json`` serializes (:meth:`to_json`)."""

    spec: TrainSpec
    """The normalized spec (passes read it; they never change it)."""
    derived: Layout
    engines: Engines
    trainc_version: str
    target_versions: Mapping[str, str]
    presets: Mapping[str, str] | None = None
    """Group -> preset file the spec was composed with (None: not loaded from a file)."""
    estimates: Estimates | None = None
    diagnostics: tuple[Mapping[str, Any], ...] = ()
    """Diagnostics as their JSON records (the same as ``lint --format json``)."""
    written: TrainSpec | None = None
    """The composed spec before normalization (None: not known, a plan built from an already
    normalized spec); :attr:`spec_as_written` is its JSON view."""
    _views: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    """The JSON views of :attr:`spec` and :attr:`written`, built on first read (``lint`` and the
    fit check's what-ifs never read them); not copied by ``dataclasses.replace``."""

    def _view(self, name: str) -> Any:
        if name not in self._views:
            from trainc.compiler.spec_json import spec_hash, spec_to_dict
            from trainc.compiler.support.secrets import mask_secrets

            if name == "spec_json":
                value: Any = mask_secrets(spec_to_dict(self.spec))[0]
            elif name == "spec_hash":
                value = spec_hash(self.spec_json)  # type: ignore[arg-type]
            else:
                value = (
                    None if self.written is None else mask_secrets(spec_to_dict(self.written))[0]
                )
            self._views[name] = value
        return self._views[name]

    @property
    def spec_json(self) -> Mapping[str, Any]:
        """The resolved spec as JSON values (enum spellings; secret env values masked)."""
        return self._view("spec_json")  # type: ignore[no-any-return]

    @property
    def spec_hash(self) -> str:
        """sha256 (hex) of :attr:`spec_json`'s canonical JSON."""
        return self._view("spec_hash")  # type: ignore[no-any-return]

    @property
    def spec_as_written(self) -> Mapping[str, Any] | None:
        """The composed spec before normalization, as JSON values (presets and overrides applied;
        a key the user left unset keeps its schema default, null where trainc derives it: etp,
        sequence_parallel, tp_comm_overlap, ...; secret env values masked). ``trainc diff`` and
        ``trainc calibrate`` recompile a compiled output from it, so an override of tp re-derives
        what depends on tp instead of keeping the old layout's derived values. None: not recorded
        (a plan built from an already normalized spec)."""
        return self._view("spec_as_written")  # type: ignore[no-any-return]

    def to_json(self) -> dict[str, Any]:
        """``plan.json`` as a dict (keys sorted when written by ``canonical_json``)."""
        out: dict[str, Any] = {
            "trainc_version": self.trainc_version,
            "target_versions": dict(self.target_versions),
            "spec_hash": self.spec_hash,
            "spec": _json(self.spec_json),
            "derived": self.derived.to_json(),
            "engines": self.engines.to_json(),
            "estimates": self.estimates.to_json() if self.estimates else {},
            "diagnostics": [dict(d) for d in self.diagnostics],
        }
        if self.presets is not None:
            out["presets"] = dict(self.presets)
        if self.spec_as_written is not None:
            out["spec_as_written"] = _json(self.spec_as_written)
        return out
