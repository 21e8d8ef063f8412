"""Megatron-LM ``pretrain_gpt.py`` flags and Megatron-Core keyword arguments (placeholder: the
full mapping lands with the emit work of issue #2)."""

from __future__ import annotations

from typing import Any

from trainc.compiler.emit.render import header


def megatron_args(plan: dict[str, Any]) -> dict[str, str]:
    """``megatron_args.txt``: one flag (with its value) per line."""
    d = plan["derived"]
    lines = [f"--tensor-model-parallel-size {d['tp']}", f"--pipeline-model-parallel-size {d['pp']}"]
    return {"megatron_args.txt": header(plan) + "\n".join(lines) + "\n"}


def megatron_core(plan: dict[str, Any]) -> dict[str, str]:
    """``megatron_core.yaml``: kwargs of initialize_model_parallel / TransformerConfig / ..."""
    return {}
