"""Property tests: validate guards plan, world factorization, single-field mutations hit the
expected rule, diagnostics are well-formed. Profiles: HYPOTHESIS_PROFILE=dev|ci (default ci)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.support.kit import apply, errors, ids, lint
from tests.support.kit_strategies import any_cfg, spec_of, valid_cfg
from trainc.compiler.derive import derive
from trainc.compiler.load.schema_check import schema_keys
from trainc.compiler.plan import plan
from trainc.compiler.rules import RULES_BY_ID
from trainc.compiler.validate.ranges import ranges

KEYS = set(schema_keys()) | {"name", "engine"}


def _check_plan(spec) -> None:
    p = plan(spec).to_json()
    dv = p["derived"]
    par, t, m = spec.parallel, spec.training, spec.model
    assert dv["world_size"] == spec.cluster.num_nodes * spec.cluster.gpus_per_node
    assert par.tp * par.pp * par.cp * dv["dp"] == dv["world_size"]
    assert dv["etp"] * par.ep * par.pp * dv["expert_dp"] == dv["world_size"]
    assert dv["dp"] * t.micro_batch_size * dv["num_microbatches"] == t.global_batch_size
    assert sum(dv["layers_per_stage"]) == m.num_layers
    assert len(dv["layers_per_stage"]) == par.pp and min(dv["layers_per_stage"]) >= 1
    assert dv["padded_vocab_size"] >= m.vocab_size
    assert dv["padded_vocab_size"] % (m.make_vocab_size_divisible_by * par.tp) == 0


@given(valid_cfg())
def test_valid_specs_pass_and_plan(cfg):
    spec = spec_of(cfg)
    diags = lint(spec)
    assert errors(diags) == [], [(d.rule.id, d.message) for d in errors(diags)]
    _check_plan(spec)


@given(any_cfg())
def test_validate_is_total_and_guards_plan(cfg):
    spec = spec_of(cfg)
    diags = lint(spec)  # never raises
    if not errors(diags):
        _check_plan(spec)


@given(any_cfg())
def test_world_factorization(cfg):
    spec = spec_of(cfg)
    if any(d.is_error for d in ranges(spec)):
        return
    d = derive(spec)
    p = spec.parallel
    assert d.world_size == spec.cluster.num_nodes * spec.cluster.gpus_per_node
    assert (d.dp is not None) == (d.world_size % (p.tp * p.pp * p.cp) == 0)
    if d.dp is not None:
        assert p.tp * p.pp * p.cp * d.dp == d.world_size
    if d.expert_dp is not None:
        assert d.etp * p.ep * p.pp * d.expert_dp == d.world_size
    if d.layers_per_stage is not None:
        assert sum(d.layers_per_stage) == spec.model.num_layers


@given(any_cfg())
def test_diagnostics_are_well_formed(cfg):
    for d in lint(spec_of(cfg)):
        assert d.rule.id in RULES_BY_ID and RULES_BY_ID[d.rule.id] is d.rule
        for key in (d.key, *d.related):
            # launch.env and launch.versions are mappings: their entries are keys too
            assert key in KEYS or key.startswith(("launch.env.", "launch.versions.")), key
        assert d.message and d.message[0].islower(), d.message
        if d.is_error:
            assert d.fix, (d.rule.id, d.message)
        for k in d.edits:
            assert k in KEYS, k
        for name, value in d.facts.items():  # the values a rule looked at are shown to the user
            if isinstance(value, (int, str)) and not isinstance(value, bool):
                assert str(value) in d.message, (d.rule.id, name, value, d.message)
        rec = d.to_json()
        assert {"rule", "severity", "message", "key", "fix"} <= set(rec)


def _dp(c: dict) -> int:
    """The data-parallel size of a generated config (world / (tp x pp x cp))."""
    world = c["cluster"]["num_nodes"] * c["cluster"]["gpus_per_node"]
    return world // (c["parallel"]["tp"] * c["parallel"]["pp"] * c["parallel"]["cp"])


MUTATIONS = {
    "heads+1": (
        lambda c: c["parallel"]["tp"] > 1,
        lambda c: {
            "model.num_attention_heads": c["model"]["num_attention_heads"] + 1,
            "model.num_query_groups": c["model"]["num_attention_heads"] + 1,
        },
        {"TRC201"},
    ),
    "layers+1": (
        lambda c: c["parallel"]["pp"] > 1,
        lambda c: {"model.num_layers": c["model"]["num_layers"] + 1},
        {"TRC210"},
    ),
    # with micro_batch_size x dp = 1 every global batch divides: nothing to break
    "gbs+1": (
        lambda c: c["training"]["micro_batch_size"] * _dp(c) > 1,
        lambda c: {"training.global_batch_size": c["training"]["global_batch_size"] + 1},
        {"TRC214"},
    ),
    "seq+1": (
        lambda c: c["parallel"]["cp"] > 1 or c["parallel"]["tp"] > 1,
        lambda c: {
            "model.seq_length": c["model"]["seq_length"] + 1,
            "model.max_position_embeddings": c["model"]["seq_length"] + 1,
        },
        {"TRC217", "TRC218"},
    ),
    "max_pos-1": (
        lambda c: True,
        lambda c: {"model.max_position_embeddings": c["model"]["seq_length"] - 1},
        {"TRC219", "TRC006"},
    ),
    "ffn+1": (
        lambda c: c["parallel"]["tp"] > 1,
        lambda c: {"model.ffn_hidden_size": c["model"]["ffn_hidden_size"] + 1},
        {"TRC203"},
    ),
    "dp+1": (
        lambda c: True,
        lambda c: {
            "parallel.dp": c["cluster"]["num_nodes"]
            * c["cluster"]["gpus_per_node"]
            // (c["parallel"]["tp"] * c["parallel"]["pp"] * c["parallel"]["cp"])
            + 1
        },
        {"TRC102", "TRC103", "TRC108"},
    ),
    "nodes*3": (
        lambda c: (
            c["parallel"]["tp"] * c["parallel"]["pp"] * c["parallel"]["cp"] % 3 == 0
            and c["cluster"]["num_nodes"] * c["cluster"]["gpus_per_node"] % 3 != 0
        ),
        lambda c: {"cluster.num_nodes": c["cluster"]["num_nodes"] * 3 + 1},
        {"TRC101"},
    ),
    "experts+1": (
        lambda c: c["parallel"].get("ep", 1) > 1,
        lambda c: {"model.num_experts": c["model"]["num_experts"] + 1},
        {"TRC205"},
    ),
    "topk": (
        lambda c: bool(c["model"].get("num_experts")),
        lambda c: {"model.moe_router_topk": c["model"]["num_experts"] + 1},
        {"TRC206"},
    ),
    "zero2": (lambda c: True, lambda c: {"parallel.zero_stage": 2}, {"TRC307"}),
    "vpp-no-pp": (lambda c: c["parallel"]["pp"] == 1, lambda c: {"parallel.vpp": 2}, {"TRC213"}),
}


@given(valid_cfg(), st.sampled_from(sorted(MUTATIONS)))
def test_mutating_one_field_hits_the_expected_rule(cfg, name):
    applies, change, expected = MUTATIONS[name]
    if not applies(cfg):
        return
    diags = lint(spec_of(apply(cfg, change(cfg))))
    assert ids(errors(diags)) & expected, (name, [(d.rule.id, d.message) for d in diags])
