"""TRC530-TRC532, TRC539, TRC540: the job's versions against the known-bad table and trainc's
targets.

The job's versions are ``launch.versions`` and, for the components it leaves out, the releases
``launch.container_image`` ships when it is a tag of ``trainc/conf/container_versions.yaml``
(:func:`job_versions`); an explicit ``launch.versions`` entry wins over the image and a different
release is TRC539. The known-bad table is data (``trainc/conf/known_bad_versions.yaml``, read by
:mod:`trainc.known_versions`, which ``trainc run`` uses for the installed packages too); each
entry names its public report.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainc import known_versions as KV
from trainc.compiler import rules as R
from trainc.compiler.derive import Derived
from trainc.compiler.diagnostics import Diagnostic, Severity, diag
from trainc.compiler.plan import DEEPSPEED_VERSION, MEGATRON_CORE_VERSION
from trainc.schemas import Engine, Fp4Format, Fp8Format, Offload, TrainSpec


def spec_features(spec: TrainSpec, d: Derived | None = None) -> frozenset[str]:
    """The job features of a spec that the table's ``when`` names (``d``: its derived layout,
    for the layers of each pipeline stage; without it an even split is assumed)."""
    m, p, t, lc, c = spec.model, spec.parallel, spec.training, spec.launch, spec.cluster
    stages = d.layers_per_stage if d is not None else None
    return KV.job_features(
        engine=spec.engine.value,
        entrypoint=lc.entrypoint.value,
        device=lc.device.value,
        ep=p.ep,
        num_experts=m.num_experts,
        dispatcher=m.moe_token_dispatcher_type.value,
        cp=p.cp,
        fp8=t.fp8_format is not Fp8Format.none,
        zero_stage=p.zero_stage,
        tp_comm_overlap=bool(t.tp_comm_overlap),
        gpu=c.gpu.value,
        num_nodes=c.num_nodes,
        gpus_per_node=c.gpus_per_node,
        precision=t.precision.value,
        tp=p.tp,
        pp=p.pp,
        moe_dense_stage=bool(m.num_experts)
        and KV.moe_stage_without_experts(
            m.num_layers, p.pp, p.vpp, m.moe_layer_freq, m.moe_first_k_dense_layers, stages
        ),
        moe_aux_bias=KV.moe_aux_bias_used(
            num_experts=m.num_experts,
            aux_loss_coeff=m.moe_aux_loss_coeff,
            load_balancing=m.moe_router_load_balancing_type.value,
            expert_bias=m.moe_router_enable_expert_bias,
            num_groups=m.moe_router_num_groups,
        ),
        mtp=bool(m.mtp_num_layers),
        fp8_recipe=t.fp8_recipe.value,
        fp4=t.fp4_format is not Fp4Format.none,
        cp_comm_type=p.cp_comm_type.value,
        offload_optimizer=t.offload_optimizer is not Offload.none,
        num_microbatches=(d.num_microbatches or 1) if d is not None else 1,
        recompute=t.recompute.value,
        sequence_parallel=bool(p.sequence_parallel),
        etp=d.etp if d is not None else p.etp,
    )


def job_versions(spec: TrainSpec) -> dict[str, str]:
    """component -> version of the software the job runs: ``launch.versions``, plus, for the
    components it does not give, the releases ``launch.container_image`` ships when the image is
    a known tag (:func:`trainc.known_versions.image_versions`). Unchecked text (TRC531 reports
    what is unreadable)."""
    out = dict(spec.launch.versions or {})
    image = KV.image_versions(spec.launch.container_image)
    if image is not None:
        for comp, text in image.versions.items():
            out.setdefault(comp, text)
    return out


def release(spec: TrainSpec, component: str) -> tuple[int, ...] | None:
    """The release of ``component`` (a :data:`trainc.known_versions.COMPONENTS` name) the job
    runs: :func:`job_versions` (``launch.versions``, else the container image's) when given and
    readable, else the release trainc writes the artifacts for (``megatron_core`` 0.16.1,
    ``deepspeed`` 0.19.8: :data:`trainc.compiler.plan.MEGATRON_CORE_VERSION`,
    ``DEEPSPEED_VERSION``), else None (the version-dependent rules then keep their default
    verdict). An unreadable version is TRC531's finding, not a reason to guess."""
    given = job_versions(spec).get(component)
    if given is not None:
        return KV.parse_version(given)
    target = {"megatron_core": MEGATRON_CORE_VERSION, "deepspeed": DEEPSPEED_VERSION}
    return KV.parse_version(target[component]) if component in target else None


def before(spec: TrainSpec, component: str, version: str) -> bool:
    """Whether the job's ``component`` (:func:`release`) is known and older than ``version``."""
    have = release(spec, component)
    want = KV.parse_version(version)
    return have is not None and want is not None and not KV.in_range(have, f">={version}")


#: engine -> the engine library whose release trainc writes the artifacts for, and that release
#: (:data:`trainc.compiler.plan.MEGATRON_CORE_VERSION`, ``DEEPSPEED_VERSION``: the worker's pins).
ENGINE_TARGETS = {
    Engine.megatron: ("megatron_core", MEGATRON_CORE_VERSION),
    Engine.deepspeed: ("deepspeed", DEEPSPEED_VERSION),
}


def _target_faults(
    spec: TrainSpec, d: Derived, given: dict[str, str], ok: dict[str, str]
) -> Iterator[Diagnostic]:
    """TRC540: the engine library's release is not stated (neither ``launch.versions`` nor a
    known ``launch.container_image`` gives it: ``given``), so the job is assumed to run the
    release trainc targets (:data:`ENGINE_TARGETS`); each known-bad entry that names that
    library and matches with it (the other components from ``ok``, the readable stated
    versions) is a warning, not TRC530's verdict: the job may run another release. Entries
    with a component neither stated nor targeted stay unknown (skipped)."""
    if spec.engine not in ENGINE_TARGETS:  # engine=fsdp: no engine package trainc pins
        return
    comp, target = ENGINE_TARGETS[spec.engine]
    if comp in given:  # stated (an unreadable release is TRC531's finding)
        return
    assumed = {**ok, comp: target}
    for e in KV.matches(assumed, spec_features(spec, d), spec.launch.env):
        if comp not in e.versions:  # matched without the assumption: TRC530 reported it
            continue
        fixed = e.fixed_in.get(comp)
        on = f"on {target}" + (f" (or any release before {fixed})" if fixed else "")
        ways = [e.avoid] if e.avoid else []
        if fixed:
            ways.append(f"run {comp} {fixed} or later")
        fix = f"set launch.versions.{comp} to the release the job runs; {on}: " + (
            ", or ".join(ways) if ways else "avoid the features this entry names"
        )
        if e.unless_env:
            env = ", ".join(f"launch.env.{k}={v}" for k, v in e.unless_env.items())
            fix += f" (or work around it: set {env})"
        yield diag(
            R.KNOWN_BAD_TARGET,
            f"launch.versions does not name {comp}, and {comp} {target}, the release trainc "
            f"targets, is in a known-bad range ({e.id}, {comp} {e.versions[comp]}) for this "
            f"job: {e.symptom}; see {e.link}",
            f"launch.versions.{comp}",
            fix=fix,
            entry=e.id,
            link=e.link,
            target=target,
            fixed_in=dict(e.fixed_in),
        )


def versions(spec: TrainSpec, d: Derived) -> Iterator[Diagnostic]:
    """TRC530-TRC532, TRC539, TRC540 (:func:`_target_faults`)."""
    given = dict(spec.launch.versions or {})
    image = KV.image_versions(spec.launch.container_image)
    if image is not None:
        for comp, text in image.versions.items():
            mine = given.get(comp)
            have, ships = KV.parse_version(mine or ""), KV.parse_version(text)
            if (
                mine is not None
                and have is not None
                and ships is not None
                and KV.in_range(have, "!=" + ".".join(map(str, ships)))
            ):
                yield diag(
                    R.VERSION_CONTAINER,
                    f"launch.versions.{comp} is {mine} but launch.container_image "
                    f"{image.image} ships {comp} {text} ({image.source}); the checks use "
                    f"launch.versions.{comp} = {mine}",
                    f"launch.versions.{comp}",
                    related=("launch.container_image",),
                    fix=f"drop launch.versions.{comp} to check the image's {text}, or "
                    "keep it if the job installs that release over the image",
                    image=image.image,
                    shipped=text,
                    given=mine,
                )
            given.setdefault(comp, text)
    if not given:
        yield from _target_faults(spec, d, given, {})
        return
    ok: dict[str, str] = {}
    for comp, text in given.items():
        key = f"launch.versions.{comp}"
        if comp not in KV.COMPONENTS:
            yield diag(
                R.VERSION_FORMAT,
                f"launch.versions has an unknown component {comp!r}",
                key,
                fix=f"use one of {', '.join(KV.COMPONENTS)}",
                component=comp,
            )
        elif KV.parse_version(text) is None:
            yield diag(
                R.VERSION_FORMAT,
                f"{key} ({text!r}) is not a release number",
                key,
                fix=f'write the release, e.g. {key}="2.4.0"',
                version=text,
            )
        else:
            ok[comp] = text
    explicit = set(spec.launch.versions or {})

    def where(c: str) -> str:
        """The spec key a component's version comes from."""
        return f"launch.versions.{c}" if c in explicit else "launch.container_image"

    def named(c: str) -> str:
        return where(c) if c in explicit else f"{c} of launch.container_image"

    for e in KV.matches(ok, spec_features(spec, d), spec.launch.env):
        comp = next(iter(e.versions))
        fix = "; ".join(
            f"upgrade {c} to {v} or later"
            if c in explicit
            else f"use a container image with {c} {v} or later (or set "
            f"launch.versions.{c} to the release installed over the image)"
            for c, v in e.fixed_in.items()
        )
        edits: dict[str, str] = {
            f"launch.versions.{c}": v for c, v in e.fixed_in.items() if c in explicit
        }
        if e.avoid:
            fix += f" (or avoid it: {e.avoid})"
        if e.unless_env:
            env = ", ".join(f"launch.env.{k}={v}" for k, v in e.unless_env.items())
            fix += f" (or work around it: set {env})"
        source = (
            ""
            if all(c in explicit for c in e.versions)
            else f" (versions from {', '.join(named(c) for c in e.versions if c not in explicit)})"
        )
        yield diag(
            R.KNOWN_BAD_VERSIONS,
            f"{KV.describe(e, ok)}{source} is a known-bad combination ({e.id}) for this "
            f"job: {e.symptom}; see {e.link}",
            where(comp),
            related=tuple(dict.fromkeys(where(c) for c in e.versions if where(c) != where(comp))),
            fix=fix,
            edits=edits,
            severity=Severity.warning if e.severity == "warning" else None,
            entry=e.id,
            link=e.link,
            fixed_in=dict(e.fixed_in),
        )
    yield from _target_faults(spec, d, given, ok)
    targets = {
        Engine.megatron: ("megatron_core", MEGATRON_CORE_VERSION),
        Engine.deepspeed: ("deepspeed", DEEPSPEED_VERSION),
    }
    if spec.engine not in targets:  # engine=fsdp: no engine package trainc targets a release of
        return
    comp, target = targets[spec.engine]
    have = KV.parse_version(ok[comp]) if comp in ok else None
    want = KV.parse_version(target)
    if have is not None and want is not None and not KV.in_range(have, f">={target}"):
        yield diag(
            R.VERSION_TARGET,
            f"{named(comp)} is {ok[comp]}, older than {target}, the release "
            f"trainc writes {spec.engine.value} artifacts for",
            where(comp),
            fix=f"use {comp} {target} or later",
            edits={f"launch.versions.{comp}": target} if comp in explicit else {},
            version=ok[comp],
            target=target,
        )
