"""Issue #6: a layout chosen by ``trainc plan`` for a tiny model on 4 CPU ranks compiles and
trains through the worker (the generated torchrun.sh)."""

from __future__ import annotations

import yaml

from tests.support.e2e import base_spec, launch, steps
from trainc.compiler.pipeline import compile_spec
from trainc.compiler.support.write import write_artifacts
from trainc.planner import applied_spec, plan_layouts


def test_planned_layout_trains_on_4_cpu_ranks(tmp_path):
    spec = base_spec("planned", 4)
    spec["model"]["num_layers"] = 8
    spec["training"]["global_batch_size"] = 16
    spec["training"]["train_iters"] = 12
    del spec["parallel"]  # every parallel key is the planner's choice
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    res = plan_layouts(path, top=1)
    assert res.ok and res.planned, res.diagnostics
    best = res.planned[0]
    applied = tmp_path / "applied.yaml"
    applied.write_text(yaml.safe_dump(applied_spec(best), sort_keys=False))
    result = compile_spec(applied)
    assert result.ok, [d.to_json() for d in result.diagnostics if d.is_error]
    out = tmp_path / "out"
    write_artifacts(result.files, result.plan, out, force=True)
    log = launch(out, label="planned layout")
    losses = {n: s["loss"] for n, s in steps(log).items()}
    assert sorted(losses) == list(range(1, 13)), log[-3000:]
    assert sum(losses[n] for n in (9, 10, 11, 12)) / 4 < losses[1]
