"""TRC210 names what the engine really does with layers that do not split over pp: Megatron-Core
(engine=megatron, and engine=deepspeed, which trains a Megatron-Core model chunk) builds
``L // pp`` per stage and drops the rest; torchtitan (engine=fsdp) drops nothing, but trainc
writes its stage split explicitly, so the message says that instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainc.compiler.load import load_spec
from trainc.compiler.pipeline import plan_and_estimate

SPEC = """\
defaults:
  - model: llama3-8b
  - cluster: dgx-h100
  - _self_
name: layers-pp
engine: {engine}
model:
  num_layers: 30
parallel:
  pp: 4
cluster:
  num_nodes: 2
training:
  global_batch_size: 64
"""


def _trc210(tmp_path: Path, engine: str) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(engine=engine), encoding="utf-8")
    loaded = load_spec(path)
    assert loaded.spec is not None, loaded
    _, diags, _ = plan_and_estimate(loaded.spec)
    (d,) = [d for d in diags if d.rule.id == "TRC210"]
    return d.message


@pytest.mark.parametrize("engine", ["megatron", "deepspeed"])
def test_megatron_core_engines_are_told_layers_are_dropped(tmp_path: Path, engine: str) -> None:
    assert _trc210(tmp_path, engine) == (
        "num_layers (30) is not divisible by pp (4); Megatron-Core would build 7 layers per "
        "stage and silently drop 2"
    )


def test_fsdp_is_told_the_split_trainc_writes_for_torchtitan(tmp_path: Path) -> None:
    message = _trc210(tmp_path, "fsdp")
    assert "Megatron-Core" not in message
    assert message.startswith(
        "num_layers (30) is not divisible by pp (4); there is no even split over 4 stages, "
        "and trainc writes torchtitan's stage split explicitly"
    )
