"""trainc composes presets with Hydra and merges the spec body itself (cached, for speed); the
result must equal a plain Hydra compose of the whole spec file."""

import itertools
import warnings

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from trainc.compiler import load

SPEC = """\
defaults:
{defaults}
name: t
model:
  num_layers: 4
  vocab_size: 1000
cluster:
  num_nodes: 2
training:
  global_batch_size: 64
  lr: 1e-4
"""


def hydra_reference(spec_dir, name):
    GlobalHydra.instance().clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with initialize_config_dir(config_dir=str(spec_dir), version_base="1.3"):
            cfg = compose(
                config_name=name, overrides=[f"hydra.searchpath=[file://{load.conf_dir()}]"]
            )
    GlobalHydra.instance().clear()
    return OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.parametrize(
    "model,cluster,self_pos",
    list(
        itertools.product(
            ["llama2-70b", "mixtral-8x7b", "gpt3-175b"],
            ["dgx-a100-80g", "gb200-nvl72"],
            ["first", "last", "absent"],
        )
    ),
)
def test_matches_hydra(tmp_path, monkeypatch, model, cluster, self_pos):
    monkeypatch.setenv("TRAINC_NO_CACHE", "1")
    lines = [f"  - model: {model}", f"  - cluster: {cluster}"]
    if self_pos == "first":
        lines.insert(0, "  - _self_")
    elif self_pos == "last":
        lines.append("  - _self_")
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(defaults="\n".join(lines)))
    node, diags = load._read_yaml(path, str(path))
    assert not diags
    ours, presets, diags = load._compose(path, str(path), node, [])
    assert not diags
    assert ours == hydra_reference(tmp_path, "spec")
    assert set(presets) == {"model", "cluster"}


def test_disk_cache_gives_the_same_result(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.format(defaults="  - model: llama3-8b\n  - cluster: dgx-h100\n  - _self_"))
    node, _ = load._read_yaml(path, str(path))
    load._PRESET_CACHE.clear()
    first = load._compose(path, str(path), node, [])
    assert list((tmp_path / "cache" / "trainc").glob("presets-*.json"))
    load._PRESET_CACHE.clear()
    second = load._compose(path, str(path), node, [])
    assert first == second
    assert first[0] == hydra_reference(tmp_path, "spec")
