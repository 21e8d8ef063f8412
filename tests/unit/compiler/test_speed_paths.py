"""The fast paths of compile and lint give what the slow ones gave, and stay light.

* :func:`~trainc.compiler.support.treecopy.copy_tree` equals ``copy.deepcopy`` and shares no mutable
  object with the original (specs, composed preset containers);
* the per-process caches (composed presets, the fit check's what-ifs) cannot leak one spec into
  another: lint of spec A then spec B gives B's diagnostics exactly, and a spec (or a caller)
  that changes its composed values never changes the cached preset;
* ``trainc lint`` and ``compile_spec(emit_files=False)`` import no emitter, no Jinja2 or
  Kubernetes client, and no torch / DeepSpeed / Megatron (a subprocess reads ``sys.modules``).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainc.compiler import load as L
from trainc.compiler import pipeline
from trainc.compiler.load.presets import _compose_presets
from trainc.compiler.pipeline import compile_spec
from trainc.compiler.support.treecopy import copy_tree
from trainc.schemas import Recompute

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "llama2-70b-dgx-a100.yaml"

SMALL = """\
defaults: [{{model: llama3-8b}}, {{cluster: dgx-h100}}, _self_]
name: {name}
cluster: {{num_nodes: {nodes}}}
parallel: {{tp: {tp}, pp: 1}}
training: {{micro_batch_size: 1, global_batch_size: {gbs}}}
"""


def _spec(tmp: Path, name: str, tp: int, nodes: int = 1, extra: str = "") -> Path:
    p = tmp / f"{name}.yaml"
    p.write_text(SMALL.format(name=name, tp=tp, nodes=nodes, gbs=64 * nodes) + extra)
    return p


def _mutables(obj: object, out: dict[int, object] | None = None) -> dict[int, object]:
    """id -> object of every dict, list and dataclass instance reachable from ``obj``."""
    out = {} if out is None else out
    if isinstance(obj, dict):
        out[id(obj)] = obj
        for v in obj.values():
            _mutables(v, out)
    elif isinstance(obj, list):
        out[id(obj)] = obj
        for v in obj:
            _mutables(v, out)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out[id(obj)] = obj
        for f in dataclasses.fields(obj):
            _mutables(getattr(obj, f.name), out)
    return out


# --- copy_tree ---------------------------------------------------------------------------------


def test_copy_tree_of_a_spec_equals_deepcopy_and_shares_nothing_mutable():
    spec = L.load_spec(EXAMPLE).spec
    assert spec is not None
    spec.launch.env["NCCL_DEBUG"] = "INFO"
    spec.launch.container_mounts = ["/data:/data"]
    fast, slow = copy_tree(spec), copy.deepcopy(spec)
    assert fast == slow == spec
    assert repr(fast) == repr(spec)
    assert not set(_mutables(fast)) & set(_mutables(spec))
    fast.launch.env["NCCL_DEBUG"] = "WARN"
    fast.launch.container_mounts.append("/x:/x")
    fast.model.num_layers = 1
    assert spec.launch.env["NCCL_DEBUG"] == "INFO"
    assert spec.launch.container_mounts == ["/data:/data"]
    assert spec.model.num_layers != 1


def test_copy_tree_of_containers_and_foreign_objects():
    tree = {
        "a": [1, 2.5, {"b": None, "c": "x"}],
        "d": (1, 2),
        "e": Recompute.full,
        "f": {3, 4},
        "g": ([1],),
    }
    out = copy_tree(tree)
    assert out == copy.deepcopy(tree) == tree
    assert out["a"] is not tree["a"] and out["a"][2] is not tree["a"][2]
    assert out["e"] is Recompute.full and out["d"] is tree["d"]  # immutable: shared
    assert out["f"] is not tree["f"]  # a set: deep-copied
    assert out["g"][0] is not tree["g"][0]  # a tuple holding a list: deep-copied


# --- the per-process caches --------------------------------------------------------------------


def _diags(path: Path) -> list[dict[str, object]]:
    return [d.to_json() for d in compile_spec(path, emit_files=False).diagnostics]


def _cold() -> None:
    L._PRESET_CACHE.clear()
    pipeline._WHAT_IF.clear()


@pytest.mark.parametrize(
    "a_extra",
    [
        "",  # the same presets, another layout: TRC401 with its what-if suggestions for A
        # A changes the model
        "model: {num_layers: 8, hidden_size: 1024, num_attention_heads: 8}\n",
        "launch: {env: {NCCL_DEBUG: INFO}}\n",  # A adds a mapping entry
    ],
)
def test_lint_a_then_b_gives_b_alone(tmp_path, a_extra):
    a = _spec(tmp_path, "spec-a", tp=1, extra=a_extra)
    b = _spec(tmp_path, "spec-b", tp=1, nodes=1)
    b2 = _spec(tmp_path, "spec-b2", tp=2, nodes=2)
    _cold()
    alone = [_diags(b), _diags(b2)]
    _cold()
    _diags(a)
    after_a = [_diags(b), _diags(b2)]
    assert after_a == alone
    assert any(d["rule"] == "TRC401" for d in alone[0])  # the what-if memo was exercised


def test_a_spec_cannot_change_a_cached_preset(tmp_path):
    spec_dir = str(tmp_path)
    entries = (("model", "llama3-8b"), ("cluster", "dgx-h100"))
    _cold()
    first, _ = _compose_presets(spec_dir, entries)
    pristine = copy.deepcopy(first)
    first["model"]["num_layers"] = 1  # a caller changes what it was given
    first["cluster"].clear()
    first["new"] = {"x": [1]}
    again, _ = _compose_presets(spec_dir, entries)
    assert again == pristine
    # the loader's own edits (overrides, the spec's body) do not reach the cache either
    a = _spec(tmp_path, "spec-a", tp=1, extra="model: {num_layers: 2}\n")
    loaded = L.load_spec(a, ["model.hidden_size=1024", "launch.env={A: b}"])
    assert loaded.spec is not None and loaded.spec.model.num_layers == 2
    assert _compose_presets(spec_dir, entries)[0] == pristine


def test_a_plan_from_the_what_if_memo_is_not_changed_by_the_fit_check(tmp_path):
    a = _spec(tmp_path, "spec-a", tp=1)
    _cold()
    compile_spec(a, emit_files=False)
    memo = {k: repr(v) for k, v in pipeline._WHAT_IF.items()}
    assert memo
    compile_spec(_spec(tmp_path, "spec-c", tp=1), emit_files=False)
    assert {k: repr(pipeline._WHAT_IF[k]) for k in memo} == memo


# --- what the light commands import ----------------------------------------------------------

_HEAVY = (
    "torch",
    "deepspeed",
    "megatron",
    "jinja2",
    "kubernetes",
    "transformer_engine",
    "trainc.compiler.emit",
    "trainc.templates",
    "trainc.launch",
)

_PROBE = """
import json, sys
from trainc.cli import main
from trainc.compiler.pipeline import compile_spec
code = main(["lint", *sys.argv[1:]])
for p in sys.argv[1:]:
    compile_spec(p, emit_files=False)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in %r or m.startswith(%r))
print(json.dumps({"code": code, "heavy": heavy}))
"""


def test_lint_and_compile_without_emit_import_nothing_heavy(tmp_path):
    roots = sorted({m.split(".")[0] for m in _HEAVY if "." not in m})
    prefixes = tuple(m for m in _HEAVY if "." in m)
    specs = [
        str(EXAMPLE),
        str(_spec(tmp_path, "spec-a", tp=1)),
        str(_spec(tmp_path, "spec-b", tp=4)),
    ]
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE % (tuple(roots), prefixes), *specs],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rec["code"] == 2  # spec-a does not fit: the fit check and its what-ifs ran
    assert rec["heavy"] == []


def test_what_if_edits_copy_only_the_edited_path():
    from trainc.compiler.fit.whatif import _edited

    spec = L.load_spec(EXAMPLE).spec
    assert spec is not None
    before = repr(spec)
    cand = _edited(
        spec, {"parallel.tp": 2, "parallel.dp": None, "training.recompute": Recompute.full}
    )
    assert repr(spec) == before  # the original is unchanged
    assert (cand.parallel.tp, cand.parallel.dp, cand.training.recompute) == (
        2,
        None,
        Recompute.full,
    )
    assert cand.parallel is not spec.parallel and cand.training is not spec.training
    assert cand.model is spec.model  # untouched sections are shared (never mutated)
    assert cand == dataclasses.replace(
        spec,
        parallel=dataclasses.replace(spec.parallel, tp=2, dp=None),
        training=dataclasses.replace(spec.training, recompute=Recompute.full),
    )


def test_members_per_domain_memo_returns_a_dict_the_caller_may_change():
    from trainc.compiler.estimate.rankmap import members_per_domain

    d = {"tp": 1, "cp": 1, "dp": 16, "pp": 1, "etp": 1, "ep": 1, "expert_dp": 16}
    first = members_per_domain(d, 8)
    assert first["dp_cp"] == 8
    first["dp_cp"] = 99  # the fit check adds FSDP's groups to its dict
    first["extra"] = 1
    again = members_per_domain(d, 8)
    assert again["dp_cp"] == 8 and "extra" not in again
    assert members_per_domain(d, 16)["dp_cp"] == 16  # another domain: another entry


def _compiled(tmp: Path, name: str, env: dict[str, str]) -> dict[str, bytes]:
    import os

    out = tmp / name
    proc = subprocess.run(
        [sys.executable, "-m", "trainc", "compile", str(EXAMPLE), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **env},
    )
    assert proc.returncode == 0, proc.stderr
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def test_template_bytecode_cache_renders_the_same_bytes(tmp_path):
    cache = tmp_path / "cache"
    env = {"XDG_CACHE_HOME": str(cache)}
    plain = _compiled(tmp_path, "nocache", {"TRAINC_NO_CACHE": "1"})
    cold = _compiled(tmp_path, "cold", env)
    entries = sorted((cache / "trainc" / "jinja").glob("*.cache"))
    assert entries  # the templates' compiled code was stored
    warm = _compiled(tmp_path, "warm", env)
    for e in entries:  # a truncated entry is compiled afresh, not an error
        e.write_bytes(e.read_bytes()[:20])
    broken = _compiled(tmp_path, "broken", env)
    assert plain == cold == warm == broken
    assert "torchrun.sh" in plain
