"""Known-bad software combinations (``trainc/conf/known_bad_versions.yaml``) and how a job's
versions and features are matched against them. Standard library and PyYAML only: the compiler
checks ``launch.versions`` with it (TRC530) and ``trainc run`` the installed packages, without
importing torch (``importlib.metadata``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
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
}
#: Features an entry's ``when`` may name (:func:`job_features`).
FEATURES = frozenset({"cuda", "megatron_lm", "megatron", "deepspeed", "fsdp", "moe_alltoall",
                      "cp", "fp8", "zero2", "zero3", "tp_comm_overlap", "grace"})
#: GPU profiles (``cluster.gpu``) whose hosts are Grace (aarch64) CPUs: GB200 / GB300 superchips.
GRACE_GPUS = frozenset({"gb200", "gb300"})
_VERSION = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")
_CLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(\d+(?:\.\d+)*)\s*$")
TABLE = Path(__file__).parent / "conf" / "known_bad_versions.yaml"


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


@cache
def table(path: Path = TABLE) -> tuple[BadCombination, ...]:
    """The entries of the known-bad table, checked (unknown components or features raise
    ValueError: the table is trainc's data, a mistake there is a bug)."""
    import yaml

    out = []
    for e in yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        entry = BadCombination(
            id=e["id"], versions=dict(e["versions"]), when=tuple(e.get("when", ())),
            unless_env={k: str(v) for k, v in (e.get("unless_env") or {}).items()},
            severity=e["severity"], symptom=" ".join(str(e["symptom"]).split()),
            fixed_in={k: str(v) for k, v in e["fixed_in"].items()}, link=e["link"])
        bad = (set(entry.versions) | set(entry.fixed_in)) - set(COMPONENTS)
        if bad or set(entry.when) - FEATURES or entry.severity not in ("error", "warning"):
            raise ValueError(f"known_bad_versions.yaml entry {entry.id}: unknown "
                             f"{sorted(bad) or sorted(set(entry.when) - FEATURES)}")
        for spec in entry.versions.values():
            in_range((0,), spec)  # raises on a malformed range
        out.append(entry)
    return tuple(out)


def job_features(*, engine: str, entrypoint: str, device: str, ep: int, num_experts: int | None,
                 dispatcher: str, cp: int, fp8: bool, zero_stage: int,
                 tp_comm_overlap: bool, gpu: str) -> frozenset[str]:
    """The features of a job the table's ``when`` names (one definition for compile time and
    ``trainc run``): the engine (``megatron``, ``deepspeed``, ``fsdp``), ``cuda``,
    ``megatron_lm`` (entrypoint), ``moe_alltoall`` (experts with ep > 1 and the alltoall
    dispatcher), ``cp`` (cp > 1), ``fp8``, ``zero2`` / ``zero3`` (engine=deepspeed at exactly
    that ZeRO stage / stage 3), ``tp_comm_overlap`` (engine=megatron with the resolved
    ``training.tp_comm_overlap``: Transformer Engine's userbuffers GEMM overlap), ``grace``
    (CUDA on a :data:`GRACE_GPUS` profile: the processes run on aarch64 hosts)."""
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
    if engine == "deepspeed" and zero_stage == 2:
        f.add("zero2")
    if engine == "deepspeed" and zero_stage >= 3:
        f.add("zero3")
    if engine == "megatron" and tp_comm_overlap:
        f.add("tp_comm_overlap")
    return frozenset(f)


def matches(versions: Mapping[str, str], features: Iterable[str], env: Mapping[str, str],
            entries: Iterable[BadCombination] | None = None) -> list[BadCombination]:
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
