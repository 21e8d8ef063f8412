"""Known-bad software combinations (``trainc/conf/known_bad_versions.yaml``) and how a job's
versions and features are matched against them. Standard library and PyYAML only: the compiler
checks ``launch.versions`` with it (TRC530) and ``trainc run`` the installed packages, without
importing torch (``importlib.metadata``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

#: The components ``launch.versions`` may name, and the Python distributions that provide them
#: (the first one installed wins; NCCL comes with torch's wheels as nvidia-nccl-cuXX).
COMPONENTS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "cuda": ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime"),
    "nccl": ("nvidia-nccl-cu12", "nvidia-nccl-cu13", "nvidia-nccl"),
    "transformer_engine": ("transformer-engine", "transformer_engine", "transformer-engine-cu12"),
    "megatron_core": ("megatron-core", "megatron_core"),
    "deepspeed": ("deepspeed",),
    "flash_attn": ("flash-attn", "flash_attn"),
    "torchtitan": ("torchtitan",),
}
#: Features an entry's ``when`` may name (:func:`job_features`).
FEATURES = frozenset(
    {
        "cuda",
        "megatron_lm",
        "megatron",
        "deepspeed",
        "fsdp",
        "moe_alltoall",
        "cp",
        "fp8",
        "zero2",
        "zero3",
        "tp_comm_overlap",
        "grace",
        "nvls",
        "multinode",
        "blackwell",
        "fp16",
        "bf16",
        "zero1_2",
        "pp",
        "moe_dense_pp",
        "moe_aux_bias",
        "mtp_tp",
        "moe",
        "fp4",
        "fp8_tensorwise",
        "fp8_blockwise",
        "fp8_mxfp8",
        "cp_not_p2p",
        "offload_optimizer",
        "grad_accum",
        "recompute_full",
        "sequence_parallel",
        "moe_ep1_etp",
    }
)
#: GPU profiles (``cluster.gpu``) whose hosts are Grace (aarch64) CPUs: GB200 / GB300 superchips.
GRACE_GPUS = frozenset({"gb200", "gb300"})
#: GPU profiles of Blackwell GPUs (compute capability 10.x: sm_100 kernels, CUDA 12.8 or later).
BLACKWELL_GPUS = frozenset({"b200", "gb200", "gb300"})
#: GPU profiles whose NVSwitch fabric does NVLink SHARP, NCCL's NVLS algorithm (Hopper and
#: Blackwell HGX / NVL systems; NCCL 2.17 added NVLS). H800 is left out: whether NCCL enables
#: NVLS there is not settled in public (NVIDIA/nccl#892).
NVLS_GPUS = frozenset({"h100-80g", "h200", "b200", "gb200", "gb300"})
_VERSION = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")
_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)\s*$")
TABLE = Path(__file__).parent / "conf" / "known_bad_versions.yaml"
CONTAINERS = Path(__file__).parent / "conf" / "container_versions.yaml"


def parse_version(text: str) -> tuple[int, ...] | None:
    """The release numbers of a version string (local and pre-release tags dropped), or None.

    >>> parse_version("2.4.0a0+07cecf41"), parse_version("12.4"), parse_version("abc")
    ((2, 4, 0), (12, 4), None)
    """
    m = _VERSION.match(str(text))
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def _cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = max(len(a), len(b))
    pa, pb = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (pa > pb) - (pa < pb)


def in_range(version: tuple[int, ...], spec: str) -> bool:
    """Whether ``version`` satisfies every comma-separated clause of ``spec`` (``>=2.19,<2.20``).

    >>> in_range((2, 19, 3), ">=2.19,<2.20"), in_range((2, 20), ">=2.19,<2.20")
    (True, False)
    """
    for clause in spec.split(","):
        m = _CLAUSE.match(clause)
        if not m:
            raise ValueError(f"bad version range clause {clause!r} in {spec!r}")
        op, ref = m.group(1), tuple(int(x) for x in m.group(2).split("."))
        c = _cmp(version, ref)
        ok = {">=": c >= 0, "<=": c <= 0, "==": c == 0, "!=": c != 0, ">": c > 0, "<": c < 0}[op]
        if not ok:
            return False
    return True


@dataclass(frozen=True)
class BadCombination:
    """One entry of the table (see the YAML file's header for the fields)."""

    id: str
    versions: Mapping[str, str]
    when: tuple[str, ...]
    unless_env: Mapping[str, str]
    severity: str
    symptom: str
    fixed_in: Mapping[str, str]
    link: str
    avoid: str = ""
    """A spec change that avoids the fault on an affected release (optional; '' = none known
    besides the fixed release and ``unless_env``)."""


@cache
def table(path: Path = TABLE) -> tuple[BadCombination, ...]:
    """The entries of the known-bad table, checked (unknown components or features raise
    ValueError: the table is trainc's data, a mistake there is a bug)."""
    import yaml

    out = []
    for e in yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        entry = BadCombination(
            id=e["id"],
            versions=dict(e["versions"]),
            when=tuple(e.get("when", ())),
            unless_env={k: str(v) for k, v in (e.get("unless_env") or {}).items()},
            severity=e["severity"],
            symptom=" ".join(str(e["symptom"]).split()),
            fixed_in={k: str(v) for k, v in e["fixed_in"].items()},
            link=e["link"],
            avoid=" ".join(str(e.get("avoid") or "").split()),
        )
        bad = (set(entry.versions) | set(entry.fixed_in)) - set(COMPONENTS)
        if bad or set(entry.when) - FEATURES or entry.severity not in ("error", "warning"):
            raise ValueError(
                f"known_bad_versions.yaml entry {entry.id}: unknown "
                f"{sorted(bad) or sorted(set(entry.when) - FEATURES)}"
            )
        for spec in entry.versions.values():
            in_range((0,), spec)  # raises on a malformed range
        out.append(entry)
    return tuple(out)


def moe_stage_without_experts(
    num_layers: int,
    pp: int,
    vpp: int,
    moe_layer_freq: int,
    first_k_dense: int,
    stage_layers: Sequence[int] | None = None,
) -> bool:
    """Whether some pipeline rank of an MoE model holds no MoE layer (only dense layers).

    Layer ``i`` (0-based) is MoE iff ``i >= first_k_dense`` and ``i % moe_layer_freq == 0``
    (:class:`trainc.schemas.model.ModelSpec`). ``stage_layers``: the transformer layers of each
    rank (derived.layers_per_stage), else ``num_layers / pp`` each. With ``vpp > 1`` and an
    even split a rank holds chunks ``r, r + pp, ...`` of ``num_layers / (pp * vpp)`` layers
    (Megatron-Core's interleaved schedule); an uneven split is taken as contiguous per rank.

    >>> moe_stage_without_experts(8, 2, 1, 1, 4)      # layers 0-3 dense: rank 0 has no experts
    True
    >>> moe_stage_without_experts(8, 2, 2, 1, 3)      # rank 0 holds layers 0-1 and 4-5
    False
    """
    if pp <= 1 or num_layers < 1:
        return False
    freq = max(moe_layer_freq, 1)
    is_moe = [i >= first_k_dense and i % freq == 0 for i in range(num_layers)]
    owner: list[int] = []
    if stage_layers is None and vpp > 1 and num_layers % (pp * vpp) == 0:
        chunk = num_layers // (pp * vpp)
        owner = [(i // chunk) % pp for i in range(num_layers)]
    else:
        sizes = list(stage_layers) if stage_layers else [num_layers // pp] * pp
        if sum(sizes) != num_layers or len(sizes) != pp:
            return False
        for r, n in enumerate(sizes):
            owner += [r] * n
    has = [False] * pp
    for i, moe in enumerate(is_moe):
        has[owner[i]] = has[owner[i]] or moe
    return not all(has)


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineFacts:
    """The job facts whose feature depends on the engine (:data:`ENGINE_FEATURES`)."""

    zero_stage: int
    tp_comm_overlap: bool
    num_experts: int | None
    moe_dense_stage: bool
    moe_aux_bias: bool
    mtp: bool
    tp: int
    pp: int
    cp: int
    cp_comm_type: str
    fp8: bool
    fp8_recipe: str
    offload_optimizer: bool
    sequence_parallel: bool
    ep: int
    etp: int


def _megatron_features(j: EngineFacts) -> set[str]:
    """engine=megatron: ``tp_comm_overlap``, ``moe_dense_pp``, ``moe_aux_bias``, ``mtp_tp``,
    ``fp8_<recipe>``, ``cp_not_p2p``, ``sequence_parallel``, ``moe_ep1_etp``
    (:func:`job_features`)."""
    f: set[str] = set()
    if j.tp_comm_overlap:
        f.add("tp_comm_overlap")
    if j.sequence_parallel and j.tp > 1:
        f.add("sequence_parallel")
    if j.num_experts:
        if j.moe_dense_stage and j.pp > 1:
            f.add("moe_dense_pp")
        if j.moe_aux_bias:
            f.add("moe_aux_bias")
        if j.ep == 1 and j.etp != j.tp:
            f.add("moe_ep1_etp")
    if j.mtp and j.tp > 1:
        f.add("mtp_tp")
    if j.fp8 and j.fp8_recipe in ("tensorwise", "blockwise", "mxfp8"):
        f.add(f"fp8_{j.fp8_recipe}")
    if j.cp > 1 and j.cp_comm_type != "p2p":
        f.add("cp_not_p2p")
    return f


def _deepspeed_features(j: EngineFacts) -> set[str]:
    """engine=deepspeed: ``zero2``, ``zero3``, ``zero1_2``, ``offload_optimizer``
    (:func:`job_features`)."""
    f: set[str] = set()
    if j.zero_stage == 2:
        f.add("zero2")
    if j.zero_stage >= 3:
        f.add("zero3")
    if j.zero_stage in (1, 2):
        f.add("zero1_2")
    if j.offload_optimizer:
        f.add("offload_optimizer")
    return f


#: The engine-dependent features of :func:`job_features`, by engine (the spec's spelling); an
#: engine without a row has none.
ENGINE_FEATURES: Mapping[str, Callable[[EngineFacts], set[str]]] = {
    "megatron": _megatron_features,
    "deepspeed": _deepspeed_features,
}


def job_features(
    *,
    engine: str,
    entrypoint: str,
    device: str,
    ep: int,
    num_experts: int | None,
    dispatcher: str,
    cp: int,
    fp8: bool,
    zero_stage: int,
    tp_comm_overlap: bool,
    gpu: str,
    num_nodes: int = 1,
    gpus_per_node: int = 1,
    precision: str = "",
    tp: int = 1,
    pp: int = 1,
    moe_dense_stage: bool = False,
    moe_aux_bias: bool = False,
    mtp: bool = False,
    fp8_recipe: str = "",
    fp4: bool = False,
    cp_comm_type: str = "p2p",
    offload_optimizer: bool = False,
    num_microbatches: int = 1,
    recompute: str = "",
    sequence_parallel: bool = False,
    etp: int | None = None,
) -> frozenset[str]:
    """The features of a job the table's ``when`` names (one definition for compile time and
    ``trainc run``): the engine (``megatron``, ``deepspeed``, ``fsdp``), ``cuda``,
    ``megatron_lm`` (entrypoint), ``moe_alltoall`` (experts with ep > 1 and the alltoall
    dispatcher), ``cp`` (cp > 1), ``fp8``, ``zero2`` / ``zero3`` (engine=deepspeed at exactly
    that ZeRO stage / stage 3), ``tp_comm_overlap`` (engine=megatron with the resolved
    ``training.tp_comm_overlap``: Transformer Engine's userbuffers GEMM overlap), ``grace``
    (CUDA on a :data:`GRACE_GPUS` profile: the processes run on aarch64 hosts), ``nvls`` (CUDA
    on an :data:`NVLS_GPUS` profile with more than one GPU per node), ``multinode`` (CUDA on
    more than one node), ``blackwell`` (CUDA on a :data:`BLACKWELL_GPUS` profile), ``fp16`` /
    ``bf16`` (``training.precision``), ``zero1_2`` (engine=deepspeed at ZeRO stage 1 or 2: its
    ``stage_1_and_2.py`` optimizer), ``pp`` (pp > 1), and for engine=megatron with experts:
    ``moe_dense_pp`` (``moe_dense_stage``: a pipeline rank holds no MoE layer,
    :func:`moe_stage_without_experts`), ``moe_aux_bias`` (``moe_aux_bias``: an auxiliary
    load-balancing loss together with expert bias or group-limited routing), and ``mtp_tp``
    (``mtp``: multi-token prediction, with tp > 1); ``moe`` (experts), ``fp4``
    (``training.fp4_format`` set) and ``fp8_<recipe>`` (engine=megatron with FP8 and
    ``training.fp8_recipe`` tensorwise, blockwise or mxfp8: Megatron-Core's get_fp8_recipe picks
    a Transformer Engine recipe class per value), ``cp_not_p2p`` (engine=megatron, cp > 1 with
    ``parallel.cp_comm_type`` other than p2p), ``offload_optimizer`` (engine=deepspeed with
    ``training.offload_optimizer``), ``grad_accum`` (more than one microbatch per step) and
    ``recompute_full`` (``training.recompute`` full: every layer's forward runs again, under
    no_grad first, in the backward pass) and ``sequence_parallel`` (engine=megatron with the
    resolved ``parallel.sequence_parallel`` and tp > 1: Megatron-Core all-reduces the gradients
    of the parameters tagged ``sequence_parallel``, the norm weights, over the TP group)
    and ``moe_ep1_etp`` (engine=megatron, experts with ep 1 and an expert tensor-parallel degree
    ``etp`` other than tp, MoE parallel folding: Megatron-Core before 0.19 reduces expert
    gradients over the expert data-parallel group only when ep > 1; ``etp`` None is tp)."""
    f = {engine}
    if device == "cuda":
        f.add("cuda")
        if gpu in GRACE_GPUS:
            f.add("grace")
    if entrypoint == "megatron-lm":
        f.add("megatron_lm")
    if num_experts and ep > 1 and dispatcher == "alltoall":
        f.add("moe_alltoall")
    if cp > 1:
        f.add("cp")
    if fp8:
        f.add("fp8")
    if device == "cuda":
        if gpu in NVLS_GPUS and gpus_per_node > 1:
            f.add("nvls")
        if num_nodes > 1:
            f.add("multinode")
        if gpu in BLACKWELL_GPUS:
            f.add("blackwell")
    if precision in ("fp16", "bf16"):
        f.add(precision)
    if pp > 1:
        f.add("pp")
    if num_experts:
        f.add("moe")
    if fp4:
        f.add("fp4")
    if num_microbatches > 1:
        f.add("grad_accum")
    if recompute == "full":
        f.add("recompute_full")
    facts = EngineFacts(
        zero_stage=zero_stage,
        tp_comm_overlap=tp_comm_overlap,
        num_experts=num_experts,
        moe_dense_stage=moe_dense_stage,
        moe_aux_bias=moe_aux_bias,
        mtp=mtp,
        tp=tp,
        pp=pp,
        cp=cp,
        cp_comm_type=cp_comm_type,
        fp8=fp8,
        fp8_recipe=fp8_recipe,
        offload_optimizer=offload_optimizer,
        sequence_parallel=sequence_parallel,
        ep=ep,
        etp=tp if etp is None else etp,
    )
    engine_features = ENGINE_FEATURES.get(engine)
    if engine_features is not None:
        f |= engine_features(facts)
    return frozenset(f)


def moe_aux_bias_used(
    *,
    num_experts: int | None,
    aux_loss_coeff: float,
    load_balancing: str,
    expert_bias: bool,
    num_groups: int | None,
) -> bool:
    """Whether an MoE router computes an auxiliary load-balancing loss (``aux_loss``,
    ``seq_aux_loss`` or ``global_aux_loss`` with a coefficient above 0) while it also uses the
    expert bias (aux-loss-free balancing) or group-limited routing: the case whose loss
    Megatron-Core before 0.13.0 computed wrongly (CHANGELOG 0.13.0, MoE bug fixes)."""
    return (
        bool(num_experts)
        and aux_loss_coeff > 0
        and load_balancing in ("aux_loss", "seq_aux_loss", "global_aux_loss")
        and (expert_bias or bool(num_groups))
    )


def matches(
    versions: Mapping[str, str],
    features: Iterable[str],
    env: Mapping[str, str],
    entries: Iterable[BadCombination] | None = None,
) -> list[BadCombination]:
    """The entries whose every version range matches ``versions`` (a component not given
    leaves the entry unknown: not reported), whose features the job uses, and whose workaround
    environment is not set."""
    feats = set(features)
    out = []
    for e in table() if entries is None else entries:
        if not set(e.when) <= feats:
            continue
        if e.unless_env and all(str(env.get(k)) == v for k, v in e.unless_env.items()):
            continue
        parsed = {c: parse_version(versions[c]) for c in e.versions if c in versions}
        if len(parsed) != len(e.versions) or any(v is None for v in parsed.values()):
            continue
        if all(in_range(v, e.versions[c]) for c, v in parsed.items() if v is not None):
            out.append(e)
    return out


def installed_versions() -> dict[str, str]:
    """The versions of :data:`COMPONENTS` installed in this Python environment
    (``importlib.metadata``; nothing is imported)."""
    from importlib import metadata

    out: dict[str, str] = {}
    for comp, dists in COMPONENTS.items():
        for dist in dists:
            try:
                out[comp] = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                continue
    return out


def describe(e: BadCombination, versions: Mapping[str, Any]) -> str:
    """``nccl 2.19.3``-style list of the versions an entry matched."""
    return ", ".join(f"{c} {versions[c]}" for c in e.versions)


@dataclass(frozen=True)
class ContainerImage:
    """One image of ``trainc/conf/container_versions.yaml``: the releases of
    :data:`COMPONENTS` it ships (only those its public release notes name) and that source."""

    repository: str
    tag: str
    versions: Mapping[str, str]
    source: str

    @property
    def image(self) -> str:
        """``repository:tag``."""
        return f"{self.repository}:{self.tag}"


@cache
def container_table(path: Path = CONTAINERS) -> tuple[ContainerImage, ...]:
    """The images of the container table, checked (an unknown component, a version that is not a
    release number or a repeated image raises ValueError: the table is trainc's data)."""
    import yaml

    out: list[ContainerImage] = []
    seen: set[str] = set()
    for e in yaml.safe_load(path.read_text()):
        entry = ContainerImage(
            repository=str(e["repository"]),
            tag=str(e["tag"]),
            versions={k: str(v) for k, v in e["versions"].items()},
            source=str(e["source"]),
        )
        bad = set(entry.versions) - set(COMPONENTS)
        if (
            bad
            or any(parse_version(v) is None for v in entry.versions.values())
            or entry.image in seen
            or not entry.source.startswith("https://")
        ):
            raise ValueError(
                f"container_versions.yaml entry {entry.image}: bad component, "
                f"version, source or a repeat ({sorted(bad)})"
            )
        seen.add(entry.image)
        out.append(entry)
    return tuple(out)


def normalize_image(image: str) -> str:
    """``registry/repository:tag`` of an image reference as pyxis/enroot, Docker or Kubernetes
    take it: a ``docker://`` prefix and an ``@sha256:...`` digest are dropped, and enroot's
    ``registry#repository`` separator becomes ``/``.

    >>> normalize_image("docker://nvcr.io#nvidia/pytorch:24.05-py3")
    'nvcr.io/nvidia/pytorch:24.05-py3'
    """
    ref = image.strip()
    for prefix in ("docker://", "dockerd://"):
        if ref.startswith(prefix):
            ref = ref[len(prefix) :]
    ref = ref.split("@", 1)[0]
    return ref.replace("#", "/", 1)


def image_versions(
    image: str | None, images: Iterable[ContainerImage] | None = None
) -> ContainerImage | None:
    """The table entry of ``image`` (``launch.container_image``), or None when it is not a known
    tag (a tag the table does not list is never guessed from its neighbours)."""
    if not image:
        return None
    ref = normalize_image(image)
    for e in container_table() if images is None else images:
        if ref == e.image:
            return e
    return None
