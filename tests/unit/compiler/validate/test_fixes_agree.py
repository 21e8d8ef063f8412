"""Fix suggestions that agree with each other and with the spec (trial 13): following one
rule's fix does not break another, suggested values fit the job, a shortened GPU name points at
its preset, and values normalization computes from a missing key get no error of their own."""

from __future__ import annotations

from pathlib import Path

from tests.support.kit import find, lint_cfg, make
from trainc.cli import main
from trainc.compiler.validate import validate


def test_seq_length_fix_also_keeps_fp8_gemm_tokens_aligned():
    """cp 3, tp 2 with sequence parallelism and FP8 (delayed): TRC217 / TRC218's seq_length
    must also be a multiple of 8 tokens x cp for TRC371; their edit satisfies all three."""
    changes = {
        "cluster.gpu": "h100-80g",
        "parallel.tp": 2,
        "parallel.pp": 1,
        "parallel.cp": 3,
        "cluster.num_nodes": 3,
        "model.seq_length": 4096,
        "training.fp8_format": "e4m3",
        "training.micro_batch_size": 2,
        "training.global_batch_size": 48,
    }
    diags = lint_cfg(**changes)
    [d217] = find(diags, "TRC217")
    seq = d217.edits["model.seq_length"]
    assert seq % 24 == 0 and "a multiple of 24" in d217.fix and "delayed" in d217.fix
    fixed = lint_cfg(**{**changes, **{k: v for k, v in d217.edits.items()}})
    assert not [d for d in fixed if d.rule.id in ("TRC217", "TRC218", "TRC371")]


def test_tp_fix_fits_the_job_when_pp_is_invalid_too():
    """tp 3 and pp 5 on 8 GPUs, 32 heads: the heads rule's tp list stops at the job's GPUs
    (it offered tp 16 and 32 when pp did not divide the world either)."""
    diags = lint_cfg(
        **{
            "parallel.tp": 3,
            "parallel.pp": 5,
            "model.num_attention_heads": 32,
            "model.num_query_groups": 32,
        }
    )
    [d] = find(diags, "TRC201")
    assert d.edits["parallel.tp"] <= 8 and "the job's 8 GPUs: 1, 2, 4, 8)" in d.fix


def test_no_range_error_for_a_value_derived_from_a_missing_key(tmp_path: Path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\nengine: megatron\ntraining:\n  global_batch_size: 64\n")
    assert main(["lint", str(spec)]) == 2
    cap = capsys.readouterr()
    out = cap.out + cap.err
    assert "model.hidden_size is required" in out and "TRC006" not in out


def test_a_shortened_gpu_name_suggests_its_preset(tmp_path: Path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "defaults:\n  - model: llama3-8b\n  - _self_\nname: x\ncluster: {num_nodes: 1, gpu: h100}\n"
    )
    assert main(["lint", str(spec)]) == 2
    cap = capsys.readouterr()
    assert "did you mean `h100-80g`?" in cap.out + cap.err


def test_range_errors_of_broken_keys_are_withheld():
    """validate() with a key marked broken (a loader placeholder) reports no range error for
    it; the same value unmarked is one."""
    spec = make(**{"training.global_batch_size": 0})
    assert find(validate(spec), "TRC006")
    assert not [
        d
        for d in validate(spec, frozenset({"training.global_batch_size"}))
        if d.rule.id == "TRC006" and d.key == "training.global_batch_size"
    ]


def test_a_section_added_on_the_command_line_is_located_there(tmp_path: Path, capsys):
    """``+new.key=3``: the unknown section ``new`` was located at <default> (trial 13)."""
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "defaults:\n  - model: llama3-8b\n  - cluster: dgx-h100\n  - _self_\n"
        "name: x\ncluster: {num_nodes: 1}\n"
    )
    assert main(["lint", str(spec), "+new.key=3"]) == 2
    cap = capsys.readouterr()
    out = cap.out + cap.err
    assert "new is not a spec key" in out
    line = next(
        ln
        for ln in out.splitlines()
        if ln.strip().startswith("-->") and ln.rstrip().endswith(" new")
    )
    assert "<command line>" in line
