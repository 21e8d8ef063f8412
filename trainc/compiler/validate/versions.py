"""TRC530-TRC532: ``launch.versions`` against the known-bad table and trainc's target releases.

The table is data (``trainc/conf/known_bad_versions.yaml``, read by :mod:`trainc.known_versions`,
which ``trainc run`` uses for the installed packages too); each entry names its public report.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc import known_versions as KV
from trainc.compiler import rules as R
from trainc.compiler.derive import Derived
from trainc.compiler.diagnostics import Diagnostic, Severity, diag
from trainc.compiler.plan import DEEPSPEED_VERSION, MEGATRON_CORE_VERSION
from trainc.schemas import Engine, Fp8Format, TrainSpec


def spec_features(spec: TrainSpec) -> frozenset[str]:
    """The job features of a spec that the table's ``when`` names."""
    m, p, t, lc = spec.model, spec.parallel, spec.training, spec.launch
    return KV.job_features(
        engine=spec.engine.value, entrypoint=lc.entrypoint.value, device=lc.device.value,
        ep=p.ep, num_experts=m.num_experts, dispatcher=m.moe_token_dispatcher_type.value,
        cp=p.cp, fp8=t.fp8_format is not Fp8Format.none, zero_stage=p.zero_stage,
        tp_comm_overlap=bool(t.tp_comm_overlap), gpu=spec.cluster.gpu.value)


def release(spec: TrainSpec, component: str) -> tuple[int, ...] | None:
    """The release of ``component`` (a :data:`trainc.known_versions.COMPONENTS` name) the job
    runs: ``launch.versions[component]`` when given and readable, else the release trainc writes
    the artifacts for (``megatron_core`` 0.16.1, ``deepspeed`` 0.19.8:
    :data:`trainc.compiler.plan.MEGATRON_CORE_VERSION`, ``DEEPSPEED_VERSION``), else None (the
    version-dependent rules then keep their default verdict). An unreadable version is TRC531's
    finding, not a reason to guess."""
    given = (spec.launch.versions or {}).get(component)
    if given is not None:
        return KV.parse_version(given)
    target = {"megatron_core": MEGATRON_CORE_VERSION, "deepspeed": DEEPSPEED_VERSION}
    return KV.parse_version(target[component]) if component in target else None


def before(spec: TrainSpec, component: str, version: str) -> bool:
    """Whether the job's ``component`` (:func:`release`) is known and older than ``version``."""
    have = release(spec, component)
    want = KV.parse_version(version)
    return have is not None and want is not None and not KV.in_range(have, f">={version}")


def versions(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC530-TRC532."""
    given = spec.launch.versions
    if not given:
        return
    ok: dict[str, str] = {}
    for comp, text in given.items():
        key = f"launch.versions.{comp}"
        if comp not in KV.COMPONENTS:
            yield diag(R.VERSION_FORMAT, f"launch.versions has an unknown component {comp!r}",
                       key, fix=f"use one of {', '.join(KV.COMPONENTS)}", component=comp)
        elif KV.parse_version(text) is None:
            yield diag(R.VERSION_FORMAT, f"{key} ({text!r}) is not a release number", key,
                       fix=f"write the release, e.g. {key}=\"2.4.0\"", version=text)
        else:
            ok[comp] = text
    for e in KV.matches(ok, spec_features(spec), spec.launch.env):
        comp = next(iter(e.versions))
        fix = "; ".join(f"upgrade {c} to {v} or later" for c, v in e.fixed_in.items())
        edits: dict[str, str] = {f"launch.versions.{c}": v for c, v in e.fixed_in.items()}
        if e.unless_env:
            env = ", ".join(f"launch.env.{k}={v}" for k, v in e.unless_env.items())
            fix += f" (or work around it: set {env})"
        yield diag(R.KNOWN_BAD_VERSIONS,
                   f"{KV.describe(e, ok)} is a known-bad combination ({e.id}) for this job: "
                   f"{e.symptom}; see {e.link}", f"launch.versions.{comp}",
                   related=tuple(f"launch.versions.{c}" for c in e.versions if c != comp),
                   fix=fix, edits=edits,
                   severity=Severity.warning if e.severity == "warning" else None,
                   entry=e.id, link=e.link, fixed_in=dict(e.fixed_in))
    targets = {Engine.megatron: ("megatron_core", MEGATRON_CORE_VERSION),
               Engine.deepspeed: ("deepspeed", DEEPSPEED_VERSION)}
    if spec.engine not in targets:  # engine=fsdp: no engine package trainc targets a release of
        return
    comp, target = targets[spec.engine]
    have = KV.parse_version(ok[comp]) if comp in ok else None
    want = KV.parse_version(target)
    if have is not None and want is not None and not KV.in_range(have, f">={target}"):
        yield diag(R.VERSION_TARGET,
                   f"launch.versions.{comp} is {ok[comp]}, older than {target}, the release "
                   f"trainc writes {spec.engine.value} artifacts for", f"launch.versions.{comp}",
                   fix=f"use {comp} {target} or later", edits={f"launch.versions.{comp}": target},
                   version=ok[comp], target=target)
