"""trainc's verdicts against megatron-core 0.16.1 and deepspeed 0.19.8 (CPU, no process group).

* generated specs (derandomized; ``TRAINC_DIFF_EXAMPLES``, default 2,000): every library failure
  is explained by a trainc error, trainc never accepts what a library rejects, and every spec
  trainc rejects while the libraries accept is a documented divergence (docs/divergences.md);
  every row of that table is exercised;
* the golden cases, compiled through the real loader: the oracles accept the emitted artifacts,
  and plan.json's rank map equals Megatron-Core's RankGenerator groups.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.differential

pytest.importorskip("megatron.core")
pytest.importorskip("deepspeed")

from tests.support import differential as H  # noqa: E402
from tests.support.divergences import table  # noqa: E402
from trainc.compiler import rules as R  # noqa: E402
from trainc.compiler.pipeline import compile_spec  # noqa: E402

EXAMPLES = int(os.environ.get("TRAINC_DIFF_EXAMPLES", "2000"))
CASES = Path(__file__).resolve().parents[1] / "golden" / "cases"


def _spec(**changes: object) -> dict:
    """A small valid spec with dotted-key changes (explicit examples for rare rows)."""
    cfg: dict = {
        "name": "diff",
        "engine": "megatron",
        "model": {
            "num_layers": 4,
            "hidden_size": 256,
            "num_attention_heads": 4,
            "vocab_size": 1000,
            "seq_length": 256,
        },
        "cluster": {"num_nodes": 1, "gpus_per_node": 4, "gpu": "h100-80g"},
        "parallel": {"tp": 2, "pp": 2},
        "training": {"micro_batch_size": 1, "global_batch_size": 8},
        "launch": {},
    }
    for key, value in changes.items():
        section, _, leaf = key.rpartition(".")
        (cfg[section] if section else cfg)[leaf] = value
    return cfg


#: Explicit specs for divergences a random run may miss (each exercises one table row).
EXTRA = [
    _spec(
        engine="deepspeed",
        **{"parallel.pp": 1, "parallel.zero_stage": 0, "training.offload_optimizer": "cpu"},
    ),  # TRC320
    _spec(
        engine="deepspeed",
        **{"parallel.pp": 1, "parallel.zero_stage": 3, "training.offload_param": "nvme"},
    ),  # TRC321
    _spec(
        engine="deepspeed",
        **{"parallel.pp": 1, "parallel.zero_stage": 2, "training.offload_param": "cpu"},
    ),  # TRC305
    _spec(**{"parallel.pp": 2, "parallel.vpp": 2}),  # TRC303 emit
    _spec(**{"cluster.gpus_per_node": 8, "parallel.dp": 1}),  # TRC102
    _spec(
        **{
            "cluster.gpus_per_node": 8,
            "parallel.pp": 1,
            "parallel.ep": 2,
            "parallel.dp": 2,
            "parallel.sequence_parallel": True,
            "model.num_experts": 4,
        }
    ),  # TRC103
    _spec(
        **{"model.num_experts": 2, "model.moe_router_topk": 3, "parallel.sequence_parallel": True}
    ),  # TRC206
    _spec(
        **{
            "model.num_attention_heads": 8,
            "model.num_query_groups": 3,
            "parallel.tp": 1,
            "cluster.gpus_per_node": 2,
        }
    ),  # TRC207
    _spec(**{"model.hidden_size": 258}),  # TRC208
    _spec(
        **{"parallel.pp": 1, "parallel.pipeline_first_stage_layers": 4, "cluster.gpus_per_node": 2}
    ),  # TRC212
    _spec(
        **{
            "cluster.gpus_per_node": 8,
            "parallel.tp": 4,
            "parallel.pp": 1,
            "parallel.cp": 2,
            "parallel.cp_comm_type": "a2a",
        }
    ),  # TRC220
    _spec(engine="deepspeed", **{"parallel.zero_stage": 2}),  # TRC304
    _spec(**{"training.recompute": "full", "training.recompute_num_layers": 3}),  # TRC309
]


def test_divergence_table_names_real_rules() -> None:
    rows = table()
    assert rows, "docs/divergences.md has no table rows"
    for rule_id, (name, _kind) in rows.items():
        assert rule_id in R.RULES_BY_ID, f"{rule_id} is not in the rule catalog"
        assert R.RULES_BY_ID[rule_id].name == name, (rule_id, name)


def test_generated_specs_agree_with_the_oracles() -> None:
    rows = table()
    stricter = {r for r, (_, k) in rows.items() if k == "stricter"}
    report = H.run_generated(EXAMPLES, stricter, extra=EXTRA)
    print(report.summary())
    assert report.examples >= EXAMPLES, report.summary()
    assert not report.disagreements, "\n\n".join(
        f"{cfg}\n  " + "\n  ".join(bad) for cfg, bad in report.disagreements[:5]
    )
    # both verdicts occur often enough for the comparison to mean something
    assert report.trainc_accepts >= report.examples // 4, report.summary()
    assert report.examples - report.trainc_accepts >= report.examples // 4, report.summary()
    seen = set(report.divergences) | set(report.emit_divergences)
    never = sorted(set(rows) - seen)
    assert not never, (
        f"rows of docs/divergences.md never exercised by {report.examples} "
        f"specs: {never} (remove them, or add a case that exercises them)"
    )
    wrong_kind = sorted(r for r in report.divergences if rows[r][1] != "stricter") + sorted(
        r for r in report.emit_divergences if rows[r][1] != "emit"
    )
    assert not wrong_kind, wrong_kind


@pytest.mark.parametrize(
    "case", sorted(p.name for p in CASES.iterdir() if (p / "spec.yaml").is_file())
)
def test_golden_case_accepted_by_the_oracles(case: str) -> None:
    result = compile_spec(CASES / case / "spec.yaml")
    assert result.ok and result.plan is not None and result.spec is not None
    plan, spec = result.plan, result.spec
    out = H.Outcome({}, frozenset(), frozenset())
    H.megatron_oracle(out, spec, plan)
    if spec.engine.name == "deepspeed":
        H.deepspeed_oracle(out, spec, plan)
    assert not out.failures, out.failures
    assert not out.problems and not out.hazards, (out.problems, out.hazards)
    # plan.json's rank map (first node's rows) against RankGenerator
    rank_map = plan["estimates"]["rank_map"]
    d = plan["derived"]
    groups = H.megatron_groups(
        d["world_size"],
        d["tp"],
        d["pp"],
        d["cp"],
        d["ep"],
        d["etp"],
        H.megatron_core_kwargs(plan)["initialize_model_parallel"]["order"],
    )
    assert rank_map["first_node"]
    for row in rank_map["first_node"]:
        for kind, g in row["groups"].items():
            full = next(grp for grp in groups[kind] if row["rank"] in grp)
            assert g["size"] == len(full) and g["ranks"] == full[: len(g["ranks"])], (kind, row)
