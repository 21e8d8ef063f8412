"""TRC401 memory-fits-gpu and TRC402 pipeline-bubble-high: rejects / allows pairs, facts as data."""

from __future__ import annotations

import pytest

from tests.support.estimate import make_spec
from trainc.compiler.fit import (
    GiB,
    check_fit,
    fitting_changes,
    host_offload_bytes_per_node,
)
from trainc.compiler.fit.whatif import _rebalance_edits
from trainc.compiler.pipeline import plan_and_estimate
from trainc.compiler.validate import validate
from trainc.schemas import Device, Engine, Offload, Recompute


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
    spec = make_spec(
        parallel__tp=1, parallel__pp=1, parallel__zero_stage=0, training__recompute=Recompute.none
    )
    nspec, _plan, diags = fit_diags(spec)
    [d] = [d for d in diags if d.rule.id == "TRC401"]
    assert d.is_error and d.key == "cluster.gpu_memory_gib"
    assert d.facts["memory_bytes"] > d.facts["budget_bytes"] == (76 * 2**30)
    assert d.fix.startswith("cheapest changes that fit") and d.edits
    cands, fit = fitting_changes(nspec, evaluate)
    assert fit and all(c["total"] <= c["budget"] for c in cands)
    # the first suggestion, applied, passes validation and fits
    applied = make_spec(
        parallel__tp=1, parallel__pp=1, parallel__zero_stage=0, training__recompute=Recompute.none
    )
    for k, v in cands[0]["edits"].items():
        sect, key = k.split(".")
        setattr(getattr(applied, sect), key, v)
    n2, _diags2, plan2 = plan_and_estimate(applied)
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
    spec = make_spec(
        parallel__tp=1, parallel__pp=1, parallel__zero_stage=0, training__recompute=Recompute.none
    )
    _nspec, _, plan = plan_and_estimate(spec)
    [d] = [d for d in check_fit(plan) if d.rule.id == "TRC401"]
    assert d.is_error and d.edits == {}


def test_memory_fit_does_not_apply_to_shrunk_or_cpu_runs():
    # the same layout that does not fit 80 GiB: a shrink or CPU run builds it small / on the host
    for field, value in (("shrink", True), ("device", Device.cpu)):
        spec = make_spec(
            parallel__tp=1,
            parallel__pp=1,
            parallel__zero_stage=0,
            training__recompute=Recompute.none,
        )
        setattr(spec.launch, field, value)
        _, _, diags = fit_diags(spec)
        assert [d for d in diags if d.rule.id == "TRC401"] == [], field


def test_when_nothing_fits_only_real_reductions_are_listed():
    # 70B-like on one 8-GPU node, tp 8, no recompute: nothing fits. With fused attention
    # selective recompute saves only the softmax statistics, so it is no "reduction".
    spec = make_spec(
        nodes=1,
        model__num_layers=80,
        model__hidden_size=8192,
        model__num_attention_heads=64,
        model__ffn_hidden_size=28672,
        parallel__tp=8,
        parallel__pp=1,
        training__recompute=Recompute.none,
        training__global_batch_size=8,
    )
    nspec, plan, _ = fit_diags(spec)
    cands, fit = fitting_changes(nspec, evaluate)
    assert not fit and cands
    current = plan.estimates.memory_bytes.total
    assert all(r["total"] < 0.99 * current for r in cands)
    assert all(r["edits"].get("training.recompute") is not Recompute.selective for r in cands)
    # a reduction that still does not fit says how far over it stays (it said "tight: -2098.3 %
    # under" for Llama 3.1 405B on 16 GPUs)
    from trainc.compiler.fit.check import _listed

    for r in cands:
        over = 100 * (r["total"] - r["budget"]) / r["budget"]
        assert f"(still {over:.1f} % over)" in _listed(r) and "tight" not in _listed(r)


def test_fit_fix_rebalances_an_uneven_pipeline_split():
    # pp 4 x 8 layers, 256K vocabulary: the last stage (LM head + fp32 logits) is the heaviest,
    # 30.2 GiB against 27 GiB (11.7 % over). Moving two layers off it (8, 9, 9, 6) fits on the
    # same GPUs and is the cheapest change; adding nodes is listed after it with the GPUs added.
    spec = make_spec(
        mem=31.0,
        model__vocab_size=256000,
        parallel__pp=4,
        parallel__tp=2,
        training__recompute=Recompute.full,
        training__global_batch_size=32,
    )
    nspec, plan, diags = fit_diags(spec)
    assert plan.derived.layers_per_stage == (8, 8, 8, 8) and plan.estimates.memory_stage == 3
    assert _rebalance_edits(nspec, plan) == [
        (
            {
                "parallel.pipeline_first_stage_layers": f,
                "parallel.pipeline_last_stage_layers": last,
            },
            {},
        )
        for f, last in ((7, 7), (8, 6), (9, 7))
    ]
    [d] = [d for d in diags if d.rule.id == "TRC401"]
    assert d.edits == {
        "parallel.pipeline_first_stage_layers": 8,
        "parallel.pipeline_last_stage_layers": 6,
    }
    assert d.fix.endswith(
        "cheapest: parallel.pipeline_first_stage_layers=8, "
        "parallel.pipeline_last_stage_layers=6 (on the same GPUs, the fastest)"
    )
    # it fits 2.1 % under the budget: inside TRC403's band, which the listing says
    assert (
        "parallel.pipeline_last_stage_layers=6 -> 26.4 GiB (tight: 2.1 % under), 14.4 s/step;"
        in d.fix
    )
    assert "cluster.num_nodes=2 -> 22.3 GiB, 9.5 s/step, +8 GPUs" in d.fix
    cands, fit = fitting_changes(nspec, evaluate)
    assert fit
    assert [(c["edits"], c["gpus_added"]) for c in cands] == [
        ({"parallel.pipeline_first_stage_layers": 8, "parallel.pipeline_last_stage_layers": 6}, 0),
        ({"cluster.num_nodes": 2}, 8),
        ({"cluster.num_nodes": 2, "parallel.pp": 8}, 8),
        ({"cluster.num_nodes": 4}, 24),
    ]
    # the rebalanced split, applied, validates and its heaviest stage fits
    applied = make_spec(
        mem=31.0,
        model__vocab_size=256000,
        parallel__pp=4,
        parallel__tp=2,
        training__recompute=Recompute.full,
        training__global_batch_size=32,
        parallel__pipeline_first_stage_layers=8,
        parallel__pipeline_last_stage_layers=6,
    )
    _, plan2, diags2 = fit_diags(applied)
    assert plan2.derived.layers_per_stage == (8, 9, 9, 6)
    # within the budget (2.1 % under): no TRC401, TRC403 says how tight
    assert [
        (d.rule.id, d.facts["margin"]) for d in diags2 if d.rule.id in ("TRC401", "TRC403")
    ] == [("TRC403", 0.0211)]


def test_fit_fix_adds_nodes_when_nothing_fits_on_the_same_gpus():
    # tp 8 fills the NVLink domain, dp 1, full recompute, micro batch 1: no change on the 8 GPUs
    # fits (61.6 GiB against 50). More nodes do: 2 nodes with pp 2 (dp kept) is the cheapest
    # (fewest GPUs added, then step time); 2 or 4 nodes with more dp raise the global batch to a
    # multiple of micro_batch_size x dp (9 -> 10, 12).
    spec = make_spec(
        mem=54.0,
        model__num_layers=48,
        model__hidden_size=7168,
        model__num_attention_heads=56,
        model__ffn_hidden_size=20480,
        parallel__tp=8,
        parallel__pp=1,
        training__recompute=Recompute.full,
        training__global_batch_size=9,
    )
    nspec, _plan, diags = fit_diags(spec)
    [d] = [d for d in diags if d.rule.id == "TRC401"]
    assert d.edits == {"cluster.num_nodes": 2, "parallel.pp": 2}
    assert d.fix.endswith("cheapest: cluster.num_nodes=2, parallel.pp=2 (adds 8 GPUs)")
    cands, fit = fitting_changes(nspec, evaluate)
    assert fit
    assert [(c["edits"], c["gpus_added"]) for c in cands] == [
        ({"cluster.num_nodes": 2, "parallel.pp": 2}, 8),
        ({"cluster.num_nodes": 2, "training.global_batch_size": 10}, 8),
        ({"cluster.num_nodes": 4, "training.global_batch_size": 12}, 24),
    ]
    assert all(c["total"] <= c["budget"] for c in cands)
    assert cands[0]["step"] < cands[1]["step"]  # same GPUs added: the faster first


def _ds_offload(**kw):
    base = dict(
        engine=Engine.deepspeed,
        nodes=1,
        parallel__tp=1,
        parallel__pp=1,
        parallel__zero_stage=3,
        training__recompute=Recompute.full,
        training__global_batch_size=8,
        training__offload_optimizer=Offload.cpu,
    )
    base.update(kw)
    return make_spec(**base)


def test_host_offload_bytes_follow_deepspeeds_estimator():
    # dp = world = 8 on one node: the node holds all 8 shards, 16 B/param with optimizer offload
    # (fp32 master + Adam m, v + fp32 gradient), 18 B/param with the parameters too (DeepSpeed
    # 0.19.8 estimate_zero3_model_states_mem_needs, zero_init: 16P / nodes, 18P / nodes)
    plan = evaluate(_ds_offload())
    n = plan.estimates.params_total
    assert host_offload_bytes_per_node(plan) == 16 * n
    assert (
        host_offload_bytes_per_node(evaluate(_ds_offload(training__offload_param=Offload.cpu)))
        == 18 * n
    )
    # two nodes: each holds half of the shards
    two = _ds_offload(nodes=2, training__global_batch_size=16)
    assert host_offload_bytes_per_node(evaluate(two)) == 8 * n
    # nvme keeps the states on disk; no offload or Megatron-Core: nothing on the host
    for other in (
        _ds_offload(training__offload_optimizer=Offload.nvme, training__nvme_path="/nvme"),
        _ds_offload(training__offload_optimizer=Offload.none),
    ):
        assert host_offload_bytes_per_node(evaluate(other)) == 0.0


def test_host_memory_verdicts_sure_oom_tight_and_fit():
    plan = evaluate(_ds_offload())
    need = host_offload_bytes_per_node(plan)  # 16 B/param of an 8B-class model, ~119 GiB

    def host(gib):
        spec = _ds_offload()
        spec.cluster.host_memory_gib = gib
        _, _, diags = fit_diags(spec)
        return [d for d in diags if d.rule.id in ("TRC420", "TRC421")]

    [oom] = host(need / GiB * 0.99)
    assert oom.rule.id == "TRC420" and oom.is_error and oom.key == "cluster.host_memory_gib"
    assert oom.facts["host_bytes"] == round(need) and oom.facts["nodes_fit"] == 2
    # 2 nodes: dp 16, so the global batch 8 becomes 16 (a multiple of micro batch x dp)
    assert oom.edits == {"cluster.num_nodes": 2, "training.global_batch_size": 16}
    assert "cluster.num_nodes=2 with training.global_batch_size=16" in oom.fix
    [tight] = host(need / GiB * 1.2)
    assert tight.rule.id == "TRC421" and tight.severity.value == "warning"
    assert tight.facts["margin"] == round(1 - 1 / 1.2, 4)
    assert host(need / GiB * 1.5 + 1) == []
    assert host(None) == []


def test_trc404_step_against_the_time_limit():
    """A step longer than launch.time_limit never completes; a job without any checkpoint inside
    it (save_interval x step beyond the limit, the step longer than the SIGUSR1 lead) restarts
    from the same checkpoint at every requeue; a roomy limit or a short interval is silent."""

    def trc404(**launch):
        s = make_spec(nodes=1, training__global_batch_size=1024)  # p90 386 s per step
        for k, v in launch.items():
            setattr(s.launch, k, v)
        _, plan, diags = fit_diags(s)
        assert plan.estimates.step_time_p90_seconds == 385.883
        return [d for d in diags if d.rule.id == "TRC404"]

    assert trc404(time_limit="1-00:00:00", save_interval=100) == []  # 10.8 h per interval
    [d] = trc404(time_limit="5")  # 300 s
    assert d.message == (
        "one step (386 s (p90)) is longer than launch.time_limit (5 = 300 s): "
        "the job ends before its first step"
    )
    assert d.key == "launch.time_limit"
    [d] = trc404(time_limit="04:00:00")  # 1000 x 386 s = 107 h; the 300 s lead < one step
    assert d.key == "launch.save_interval" and d.edits == {"launch.save_interval": 36}
    assert "every requeue starts again from the same checkpoint" in d.message
    assert trc404(time_limit="04:00:00", save_interval=36) == []
    assert trc404(time_limit="UNLIMITED") == []
    assert trc404(time_limit="0") == trc404(time_limit="0:0:0") == []  # Slurm: zero = no limit


def test_trc404_fix_stays_within_the_partition_max_time():
    """With cluster.max_time_limit (TRC514) the advice to raise launch.time_limit is bounded by
    it, and dropped where the partition's MaxTime is itself shorter than one step (386 s p90)."""

    def trc404(most, **launch):
        s = make_spec(nodes=1, training__global_batch_size=1024)
        s.cluster.max_time_limit = most
        for k, v in launch.items():
            setattr(s.launch, k, v)
        _, _, diags = fit_diags(s)
        return [d for d in diags if d.rule.id == "TRC404"]

    shorten = "shorten the step (a smaller training.global_batch_size or more GPUs)"
    [d] = trc404(None, time_limit="5")
    assert d.fix == f"raise launch.time_limit above 386 s, or {shorten}"
    [d] = trc404("04:00:00", time_limit="5")
    assert d.fix == (
        "raise launch.time_limit above 386 s (at most cluster.max_time_limit 04:00:00), "
        f"or {shorten}"
    )
    [d] = trc404("5", time_limit="5")
    assert d.fix == (
        f"{shorten}: the partition's MaxTime (cluster.max_time_limit 5 = 300 s) is shorter than "
        "one step"
    )
    [d] = trc404("04:00:00", time_limit="04:00:00")
    assert d.fix == f"set launch.save_interval to at most 36, or {shorten}"
    [d] = trc404("1-00:00:00", time_limit="04:00:00")
    assert d.fix == f"set launch.save_interval to at most 36, raise launch.time_limit, or {shorten}"


def test_trc401_fix_puts_context_parallelism_after_a_near_change_without_it():
    """At 8K tokens cp=2 fit 1 % faster than micro batch 1 and was TRC401's machine edit, against
    the planner's own rule (no CP within the error band); a CP change more than 10 % faster
    stays first, and one that adds GPUs keeps its place."""
    from trainc.compiler.fit.whatif import _last_resorts_last

    def r(edits, step, added=0):
        return {"edits": edits, "step": step, "gpus_added": added, "total": 1}

    cp, mbs, tp = (
        r({"parallel.cp": 2}, 5.34),
        r({"training.micro_batch_size": 1}, 5.39),
        r({"parallel.tp": 4}, 5.92),
    )
    # 5.39 s is within 10 % of 5.34, 5.92 not
    assert _last_resorts_last([cp, mbs, tp]) == [mbs, cp, tp]
    far = r({"training.recompute": "full"}, 6.74)
    assert _last_resorts_last([cp, far]) == [cp, far]
    grow = r({"parallel.cp": 2, "cluster.num_nodes": 4}, 3.0, added=16)
    assert _last_resorts_last([mbs, grow]) == [mbs, grow]


def test_trc401_fix_puts_cpu_offload_after_a_near_change_without_it():
    """A fresh-user trial: ``offload_optimizer=cpu`` was "the fastest" fix at 55.4 s against
    ZeRO-2 at 55.5 s. Offload's CPU step is priced as a floor, so a change without it within
    10 % ranks first; offload far ahead keeps its place."""
    from trainc.compiler.fit.whatif import _last_resorts_last
    from trainc.schemas import Offload

    def r(edits, step):
        return {"edits": edits, "step": step, "gpus_added": 0, "total": 1}

    off, z2 = (
        r({"training.offload_optimizer": Offload.cpu}, 55.4),
        r({"parallel.zero_stage": 2}, 55.5),
    )
    assert _last_resorts_last([off, z2]) == [z2, off]
    far = r({"training.offload_param": "cpu"}, 40.0)
    assert _last_resorts_last([far, z2])[0]["step"] == 40.0
    no = r({"training.offload_optimizer": "none"}, 55.4)
    assert _last_resorts_last([no, z2])[0]["step"] == 55.4


def test_deepspeed_cpu_offload_costs_its_cpu_step_and_pcie_copies():
    """DeepSpeed optimizer offload adds the CPU Adam step over the rank's partition (30 B per
    parameter through the node's host memory bandwidth shared by its GPUs) and the 16-bit
    partition's copy back over PCIe; parameter offload adds two PCIe copies per micro-batch.
    Other engines and no offload: nothing."""
    from trainc.compiler.estimate.time import (
        CPU_ADAM_BYTES_PER_PARAM,
        HOST_MEMORY_BYTES_PER_S,
        PCIE_BYTES_PER_S,
        offload_seconds,
    )
    from trainc.schemas import Engine

    spec = make_spec()
    spec.engine = Engine.deepspeed
    part = 1.6e9 / 8
    gpn = spec.cluster.gpus_per_node
    adam = part * CPU_ADAM_BYTES_PER_PARAM / (HOST_MEMORY_BYTES_PER_S / gpn)
    copy_back = part * 2 / PCIE_BYTES_PER_S
    assert offload_seconds(spec, 1, True, False, 1.6e9, 8, 4) == pytest.approx(adam + copy_back)
    assert offload_seconds(spec, 3, True, True, 1.6e9, 8, 4) == pytest.approx(
        adam + copy_back + 2 * 4 * part * 2 / PCIE_BYTES_PER_S
    )
    assert offload_seconds(spec, 1, False, False, 1.6e9, 8, 4) == 0.0
    assert offload_seconds(spec, 1, False, True, 1.6e9, 8, 4) == 0.0  # param offload: ZeRO-3
    spec.engine = Engine.megatron
    assert offload_seconds(spec, 1, True, False, 1.6e9, 8, 4) == 0.0
