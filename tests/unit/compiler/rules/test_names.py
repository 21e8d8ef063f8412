"""A rule's name fits every engine it fires for: an engine=fsdp spec with pp > 1 gets TRC313
named ``runner-axes`` (it was ``deepspeed-axes``), and no diagnostic of an FSDP spec is named
after DeepSpeed."""

from __future__ import annotations

from pathlib import Path

from trainc.compiler.load import load_spec
from trainc.compiler.pipeline import State, run_passes

SPEC = """\
defaults:
  - model: llama2-70b
  - cluster: dgx-a100-80g
  - _self_
name: fsdp-pp
engine: fsdp
cluster: {num_nodes: 8}
parallel: {tp: 8, pp: 2}
training: {micro_batch_size: 1, global_batch_size: 64, train_iters: 10}
"""


def test_fsdp_with_pp_gets_runner_axes(tmp_path: Path) -> None:
    f = tmp_path / "spec.yaml"
    f.write_text(SPEC)
    loaded = load_spec(f)
    assert loaded.spec is not None, [d.message for d in loaded.diagnostics]
    st = run_passes(
        State(spec=loaded.spec, where=loaded.where, suggest=False), stop_after="check_fit"
    )
    trc313 = [d for d in st.diagnostics if d.rule.id == "TRC313"]
    assert [d.key for d in trc313] == ["parallel.pp"]
    assert trc313[0].rule.name == "runner-axes"
    assert "DeepSpeed or FSDP2" in trc313[0].rule.summary
    assert not [d.rule.name for d in st.diagnostics if "deepspeed" in d.rule.name]
