"""Test kit: build specs in memory (no Hydra), lint them, and query diagnostics as data.

``make(**changes)`` starts from BASE (a small valid dense model on one 8-GPU node) and applies
dotted-key changes: ``make(**{"parallel.tp": 3})`` or ``make(parallel__tp=3)``.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import typing
from typing import Any

from trainc.compiler.diagnostics import Diagnostic
from trainc.compiler.normalize import normalize
from trainc.compiler.validate import validate
from trainc.schemas import TrainSpec

BASE: dict[str, Any] = {
    "name": "kit",
    "engine": "megatron",
    "model": {
        "num_layers": 8,
        "hidden_size": 512,
        "num_attention_heads": 8,
        "num_query_groups": 8,
        "ffn_hidden_size": 2048,
        "vocab_size": 32000,
        "seq_length": 1024,
    },
    "cluster": {"num_nodes": 1, "gpus_per_node": 8, "gpu": "a100-80g"},
    "parallel": {"tp": 2, "pp": 2},
    "training": {"micro_batch_size": 1, "global_batch_size": 16},
    "launch": {},
}


def _build(cls: type, data: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    kw = {}
    for k, v in data.items():
        tp = hints[k]
        if dataclasses.is_dataclass(tp):
            kw[k] = _build(tp, v)
            continue
        etype = (
            tp
            if isinstance(tp, type) and issubclass(tp, enum.Enum)
            else next(
                (
                    a
                    for a in typing.get_args(tp)
                    if isinstance(a, type) and issubclass(a, enum.Enum)
                ),
                None,
            )
        )
        kw[k] = etype(v) if etype is not None and isinstance(v, str) else v
    return cls(**kw)


def apply(cfg: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``cfg`` with dotted keys (or ``a__b`` keys) set."""
    out = copy.deepcopy(cfg)
    for key, val in changes.items():
        parts = key.replace("__", ".").split(".")
        cur = out
        for p in parts[:-1]:
            cur = cur.setdefault(p, {})
        cur[parts[-1]] = val
    return out


def make(base: dict[str, Any] | None = None, **changes: Any) -> TrainSpec:
    """A normalized spec: BASE (or ``base``) with ``changes`` applied."""
    return normalize(_build(TrainSpec, apply(base or BASE, changes)))


def lint(spec: TrainSpec) -> list[Diagnostic]:
    """validate() of a normalized spec."""
    return validate(spec)


def lint_cfg(base: dict[str, Any] | None = None, **changes: Any) -> list[Diagnostic]:
    """make() then lint()."""
    return lint(make(base, **changes))


def ids(diags: list[Diagnostic]) -> set[str]:
    """Rule ids of the diagnostics."""
    return {d.rule.id for d in diags}


def find(diags: list[Diagnostic], rule_id: str) -> list[Diagnostic]:
    """The diagnostics of one rule."""
    return [d for d in diags if d.rule.id == rule_id]


def errors(diags: list[Diagnostic]) -> list[Diagnostic]:
    """Error-severity diagnostics."""
    return [d for d in diags if d.is_error]


def verdict(diags: list[Diagnostic]) -> str:
    """reject (an error), warn (a warning, no error) or ok."""
    if any(d.is_error for d in diags):
        return "reject"
    if any(d.severity.value == "warning" for d in diags):
        return "warn"
    return "ok"
