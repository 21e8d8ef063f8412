"""Fixes that help: the values a fix offers are computed for the user's cluster and layout."""

from __future__ import annotations

from pathlib import Path

from trainc.compiler.load import load_spec
from trainc.compiler.pipeline import State, run_passes

GB200 = """\
defaults:
  - model: deepseek-v3-like
  - cluster: gb200-nvl72
  - _self_
name: ep
cluster: {{num_nodes: 36}}
parallel: {parallel}
training: {{micro_batch_size: 1, global_batch_size: 144, train_iters: 10}}
"""


def _diags(tmp_path: Path, text: str):
    f = tmp_path / "spec.yaml"
    f.write_text(text)
    loaded = load_spec(f)
    assert loaded.spec is not None, [d.message for d in loaded.diagnostics]
    st = run_passes(
        State(spec=loaded.spec, where=loaded.where, suggest=False), stop_after="check_fit"
    )
    return st.diagnostics


def test_trc205_on_36_gb200_trays_offers_the_ep_of_the_nvlink_domain(tmp_path: Path) -> None:
    """36 trays x 4 GPUs, tp 4 (so etp 4): ep must divide 144 / 4 = 36 and 256, so 1, 2, 4;
    with etp 2 the expert grid has 72 GPUs and ep 8 makes ETP x EP groups of 16 ranks: 72 % 16
    != 0, but sbatch.sh's derived --segment of 12 trays (48 GPUs) holds three whole groups, as
    TRC107 accepts; with etp 1 the grid has 144 GPUs and ep 16 (16 ranks) is placed the same
    way."""
    (d,) = [
        d
        for d in _diags(tmp_path, GB200.format(parallel="{tp: 4, pp: 1, ep: 6}"))
        if d.rule.id == "TRC205"
    ]
    assert d.fix == (
        "set parallel.ep to one of 1, 2, 4 (divisors of 256 experts that fit the "
        "expert grid of 144 GPUs), or set parallel.etp=2 and parallel.ep=8 "
        "(ETP x EP within one NVLink domain of 72 GPUs), or set parallel.etp=1 and "
        "parallel.ep=16 (ETP x EP within one NVLink domain of 72 GPUs)"
    )
    assert d.edits == {"parallel.ep": 4}


def test_trc205_without_a_smaller_etp_is_unchanged(tmp_path: Path) -> None:
    (d,) = [
        d
        for d in _diags(tmp_path, GB200.format(parallel="{tp: 1, pp: 1, ep: 6}"))
        if d.rule.id == "TRC205"
    ]
    assert d.fix == (
        "set parallel.ep to one of 1, 2, 4, 8, 16 (divisors of 256 experts that "
        "fit the expert grid of 144 GPUs)"
    )


def _trc210_fix(tmp_path: Path, parallel: str) -> str:
    (d,) = [
        d
        for d in _diags(tmp_path, GB200.format(parallel=parallel))
        if d.rule.id in ("TRC210", "TRC211")
    ]
    return d.fix


def test_61_layers_with_vpp_get_a_split_that_megatron_builds(tmp_path: Path) -> None:
    """61 layers (a prime) over pp 4 x vpp 2: no stage sizes that are all multiples of 2 sum
    to 61 and 61 + 1 or + 2 is not a multiple of 8, so the fix drops vpp and splits unevenly
    (Megatron-Core 0.16.1 num_layers_in_first/last_pipeline_stage), not "choose a pp that
    divides 61"."""
    assert _trc210_fix(tmp_path, "{tp: 1, pp: 4, vpp: 2, ep: 8}") == (
        "set parallel.vpp=1, parallel.pipeline_first_stage_layers=14 and "
        "parallel.pipeline_last_stage_layers=15 (first and last searched together; stages: "
        "14, 16, 16, 15, largest 16)"
    )


def test_61_layers_pp3_vpp2_also_offer_counting_embedding_and_loss(tmp_path: Path) -> None:
    """61 + 2 = 63 = 3 x 21: account_for_embedding/loss_in_pipeline_split with one chunk."""
    assert _trc210_fix(tmp_path, "{tp: 1, pp: 3, vpp: 2, ep: 8}") == (
        "set parallel.vpp=1, parallel.pipeline_first_stage_layers=20 and "
        "parallel.pipeline_last_stage_layers=20 (first and last searched together; stages: "
        "20, 21, 20, largest 21), or set parallel.vpp=1 and "
        "parallel.account_for_embedding_in_pipeline_split=true and "
        "parallel.account_for_loss_in_pipeline_split=true (each stage then counts 21 layers)"
    )


def test_61_layers_without_vpp_keep_their_fixes(tmp_path: Path) -> None:
    assert _trc210_fix(tmp_path, "{tp: 1, pp: 2, ep: 8}") == (
        "set parallel.pp to one of 1 (divisors of 61 that fit the GPUs), or set "
        "parallel.pipeline_first_stage_layers=30 and parallel.pipeline_last_stage_layers=31 "
        "(first and last searched together; stages: 30, 31, largest 31), or set "
        "parallel.account_for_loss_in_pipeline_split=true (each stage then counts 31 layers)"
    )


NVL36 = """\
defaults:
  - model: mixtral-8x7b
  - cluster: gb200-nvl72
  - _self_
name: ep36
cluster: {{num_nodes: 36, nvlink_domain_size: 36}}
parallel: {parallel}
training: {{micro_batch_size: 1, global_batch_size: 288, train_iters: 10}}
"""


def test_trc205_on_an_nvl36_domain_offers_the_ep_its_segments_hold(tmp_path: Path) -> None:
    """GB200 NVL36 (9 trays of 4 = 36 GPUs per domain), 36 trays, tp 2 pp 2 etp 2, 8 experts:
    ep 1, 2, 4 fit the grid of 144 / (2 x 2) = 36; etp 1 opens ep 8. Its groups of 8 ranks do
    not divide 36, but the derived --segment of 6 trays (24 GPUs) holds three whole groups, so
    ep 8 is offered (it was not: only 1, 2, 4) and the layout it names lints without TRC107;
    with launch.slurm_segment=0 (no segment) it is not offered."""
    par = "{tp: 2, pp: 2, ep: 3, etp: 2}"
    (d,) = [d for d in _diags(tmp_path, NVL36.format(parallel=par)) if d.rule.id == "TRC205"]
    assert d.fix == (
        "set parallel.ep to one of 1, 2, 4 (divisors of 8 experts that fit the "
        "expert grid of 144 GPUs), or set parallel.etp=1 and parallel.ep=8 "
        "(ETP x EP within one NVLink domain of 36 GPUs)"
    )
    fixed = NVL36.format(parallel="{tp: 2, pp: 2, ep: 8, etp: 1}")
    assert not [d for d in _diags(tmp_path, fixed) if d.rule.id in ("TRC205", "TRC107")]
    no_segment = NVL36.replace("name: ep36", "name: ep36\nlaunch: {{slurm_segment: 0}}")
    (d,) = [d for d in _diags(tmp_path, no_segment.format(parallel=par)) if d.rule.id == "TRC205"]
    assert "parallel.ep=8" not in d.fix
