"""TRC401 memory-fits-gpu and TRC402 pipeline-bubble-high: rejects / allows pairs, facts as data."""

from __future__ import annotations

from trainc.compiler.fit import check_fit, fitting_changes
from trainc.compiler.pipeline import plan_and_estimate
from trainc.compiler.validate import validate
from trainc.schemas import Device, Recompute

from test_estimate_memory import make_spec  # noqa: E402


def evaluate(spec):
    """The what-if the driver gives check_fit (normalize .. estimate)."""
    return plan_and_estimate(spec)[2]


def fit_diags(spec):
    nspec, _, plan = plan_and_estimate(spec)
    assert plan is not None
    return nspec, plan, list(check_fit(plan, evaluate=evaluate))


def test_memory_fit_allows_small_model():
    _, _, diags = fit_diags(make_spec(nodes=1))
    assert [d for d in diags if d.rule.id == "TRC401"] == []


def test_memory_fit_rejects_and_suggests_valid_fitting_changes():
    # Llama-3-8B-like, tp 1 pp 1 dp 8, plain DDP (18 B/param = 135 GiB): does not fit 80 GiB
    spec = make_spec(parallel__tp=1, parallel__pp=1, parallel__zero_stage=0,
                     training__recompute=Recompute.none)
    nspec, plan, diags = fit_diags(spec)
    [d] = [d for d in diags if d.rule.id == "TRC401"]
    assert d.is_error and d.key == "cluster.gpu_memory_gib"
    assert d.facts["memory_bytes"] > d.facts["budget_bytes"] == int(76 * 2**30)
    assert d.fix.startswith("cheapest changes that fit") and d.edits
    cands, fit = fitting_changes(nspec, evaluate)
    assert fit and all(c["total"] <= c["budget"] for c in cands)
    # the first suggestion, applied, passes validation and fits
    applied = make_spec(parallel__tp=1, parallel__pp=1, parallel__zero_stage=0,
                        training__recompute=Recompute.none)
    for k, v in cands[0]["edits"].items():
        sect, key = k.split(".")
        setattr(getattr(applied, sect), key, v)
    n2, diags2, plan2 = plan_and_estimate(applied)
    assert plan2 is not None and not any(x.is_error for x in validate(n2))
    assert plan2.estimates.memory_bytes.total <= plan2.estimates.memory_budget_bytes


def test_bubble_warning_rejects_and_allows():
    # pp 2, gbs 2 -> 1 micro-batch: bubble 1/2
    _, _, diags = fit_diags(make_spec(training__global_batch_size=1, nodes=1, parallel__tp=4))
    [d] = [d for d in diags if d.rule.id == "TRC402"]
    assert d.severity.value == "warning"
    assert d.facts["bubble"] == 0.5 and d.facts["pp"] == 2
    assert d.edits == {"training.global_batch_size": 3}  # 3 micro-batches -> bubble 1/4
    _, _, ok = fit_diags(make_spec(training__global_batch_size=12, nodes=1, parallel__tp=4))
    assert [d for d in ok if d.rule.id == "TRC402"] == []


def test_memory_fit_verdict_without_suggestions():
    spec = make_spec(parallel__tp=1, parallel__pp=1, parallel__zero_stage=0,
                     training__recompute=Recompute.none)
    nspec, _, plan = plan_and_estimate(spec)
    [d] = [d for d in check_fit(plan) if d.rule.id == "TRC401"]
    assert d.is_error and d.edits == {}


def test_memory_fit_does_not_apply_to_shrunk_or_cpu_runs():
    # the same layout that does not fit 80 GiB: a shrink or CPU run builds it small / on the host
    for field, value in (("shrink", True), ("device", Device.cpu)):
        spec = make_spec(parallel__tp=1, parallel__pp=1, parallel__zero_stage=0,
                         training__recompute=Recompute.none)
        setattr(spec.launch, field, value)
        _, _, diags = fit_diags(spec)
        assert [d for d in diags if d.rule.id == "TRC401"] == [], field


def test_when_nothing_fits_only_real_reductions_are_listed():
    # 70B-like on one 8-GPU node, tp 8, no recompute: nothing fits. With fused attention
    # selective recompute saves only the softmax statistics, so it is no "reduction".
    spec = make_spec(nodes=1, model__num_layers=80, model__hidden_size=8192,
                     model__num_attention_heads=64, model__ffn_hidden_size=28672,
                     parallel__tp=8, parallel__pp=1, training__recompute=Recompute.none,
                     training__global_batch_size=8)
    nspec, plan, _ = fit_diags(spec)
    cands, fit = fitting_changes(nspec, evaluate)
    assert not fit and cands
    current = plan.estimates.memory_bytes.total
    assert all(r["total"] < 0.99 * current for r in cands)
    assert all(r["edits"].get("training.recompute") is not Recompute.selective for r in cands)
