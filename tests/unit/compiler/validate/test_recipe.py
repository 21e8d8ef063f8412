"""TRC333 (pretraining-recipe) and the bundled example's Llama 2 recipe."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.kit import find, lint_cfg
from trainc.compiler.pipeline import compile_spec

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "llama2-70b-dgx-a100.yaml"
#: Llama-2-70B shape on 64 GPUs, default training (no warm-up, Adam beta2 0.999)
BIG = {
    "model.num_layers": 80,
    "model.hidden_size": 8192,
    "model.num_attention_heads": 64,
    "model.num_query_groups": 8,
    "model.ffn_hidden_size": 28672,
    "model.seq_length": 4096,
    "cluster.num_nodes": 8,
    "parallel.tp": 8,
    "parallel.pp": 4,
    "parallel.sequence_parallel": True,
    "training.global_batch_size": 1024,
}


def test_example_follows_llama2_recipe() -> None:
    """arXiv 2307.09288 section 2.2, as the example's header says."""
    text = EXAMPLE.read_text()
    assert "arXiv 2307.09288" in text and "Llama 2" in text
    t = yaml.safe_load(text)["training"]
    assert (t["adam_beta1"], t["adam_beta2"], t["adam_eps"]) == (0.9, 0.95, 1.0e-5)
    assert (t["lr"], t["min_lr"], t["lr_warmup_iters"]) == (1.5e-4, 1.5e-5, 2000)
    assert (t["lr_decay_style"], t["weight_decay"], t["grad_clip"]) == ("cosine", 0.1, 1.0)
    assert t["global_batch_size"] * 4096 == 4_194_304  # 4M tokens per step
    assert t["train_iters"] == 500_000  # 2T tokens / 4M


def test_example_compiles_clean_and_emits_the_recipe() -> None:
    res = compile_spec(EXAMPLE)
    assert res.ok
    assert not [d for d in res.diagnostics if d.severity.value == "warning"]
    args = res.files["megatron_args.txt"]
    for flag in (
        "--adam-beta2 0.95",
        "--adam-eps 1e-05",
        "--lr-warmup-iters 2000",
        "--min-lr 1.5e-05",
        "--lr 0.00015",
        "--lr-decay-style cosine",
    ):
        assert flag in args, flag


def test_no_warmup_and_beta2_warn_at_scale() -> None:
    diags = find(lint_cfg(**BIG), "TRC333")
    assert [(d.key, d.severity.value) for d in diags] == [
        ("training.lr_warmup_iters", "warning"),
        ("training.adam_beta2", "warning"),
    ]
    warm, beta = diags
    assert "~69B-parameter" in warm.message and "2307.09288" in warm.message
    assert warm.edits == {"training.lr_warmup_iters": 100}  # a tenth of 1000 steps
    assert beta.edits == {"training.adam_beta2": 0.95} and "2005.14165" in beta.message
    long = find(lint_cfg(**BIG, **{"training.train_iters": 500_000}), "TRC333")
    assert long[0].edits == {"training.lr_warmup_iters": 2000}


@pytest.mark.parametrize(
    "changes",
    [
        {"training.lr_warmup_iters": 2000, "training.adam_beta2": 0.95},
        {"launch.device": "cpu"},
        {"resume.finetune": True, "resume.load_dir": "/ckpt"},
        {
            "model.num_layers": 8,
            "model.hidden_size": 512,
            "model.num_attention_heads": 8,
            "model.ffn_hidden_size": 2048,
            "parallel.pp": 1,
            "cluster.num_nodes": 1,
            "training.global_batch_size": 16,
        },
    ],
)
def test_recipe_or_out_of_scope_is_silent(changes: dict[str, object]) -> None:
    assert not find(lint_cfg(**{**BIG, **changes}), "TRC333")


def test_sgd_has_no_beta2_finding() -> None:
    diags = find(
        lint_cfg(**BIG, **{"training.optimizer": "sgd", "training.lr_warmup_iters": 10}), "TRC333"
    )
    assert diags == []


def test_approx_params_llama2_70b() -> None:
    """80 x (2 h^2 + 2 h x 8 x 128 + 3 h x 28672) + 2 x 32000 x h, h = 8192 (Llama-2-70B: 69B)."""
    from tests.support.kit import make
    from trainc.compiler.validate.recipe import approx_params

    assert approx_params(make(**BIG)) == 68_975_329_280
