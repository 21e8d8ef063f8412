"""Loader: every malformed input becomes a TRC00x diagnostic with a key and, where possible, the
file and line; nothing raises."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainc.compiler.diagnostics import locate
from trainc.compiler.load import load_spec
from trainc.compiler.normalize import normalize
from trainc.compiler.validate import validate

SPEC = """\
name: load-test
model:
  num_layers: 8
  hidden_size: 512
  num_attention_heads: 8
  vocab_size: 32000
  seq_length: 1024
cluster:
  num_nodes: 1
  gpu: a100-80g
parallel:
  tp: 2
training:
  global_batch_size: 16
"""


def load_text(tmp_path: Path, text: str | bytes, overrides=(), name: str = "spec.yaml"):
    f = tmp_path / name
    if isinstance(text, bytes):
        f.write_bytes(text)
    else:
        f.write_text(text)
    return load_spec(f, list(overrides))


def only(loaded, rule_id: str):
    found = [d for d in loaded.diagnostics if d.rule.id == rule_id]
    assert found, [(d.rule.id, d.key, d.message) for d in loaded.diagnostics]
    assert loaded.spec is None
    return found[0]


def test_valid_spec_loads(tmp_path):
    loaded = load_text(tmp_path, SPEC)
    assert loaded.diagnostics == [] and loaded.spec is not None
    assert loaded.spec.parallel.tp == 2


def test_unknown_key_with_did_you_mean(tmp_path):
    d = only(load_text(tmp_path, SPEC.replace("  tp: 2", "  tpp: 2")), "TRC002")
    assert d.key == "parallel.tpp"
    assert "did you mean `parallel.tp`" in d.message
    assert d.locations[0].line == 12


@pytest.mark.parametrize(
    ("written", "value", "ours"),
    [
        ("  tensor_model_parallel_size: 4", 4, "parallel.tp"),
        ("  context_parallel_size: 2", 2, "parallel.cp"),
        ("  expert_model_parallel_size: 8", 8, "parallel.ep"),
    ],
)
def test_megatron_names_point_to_trainc_keys(tmp_path, written, value, ours):
    """Megatron's names are the most common wrong keys; did-you-mean guessed
    `parallel.sequence_parallel` for them."""
    d = only(load_text(tmp_path, SPEC.replace("  tp: 2", written)), "TRC002")
    assert f"trainc calls it `{ours}`" in d.message and "did you mean" not in d.message
    assert d.edits[ours] == value


@pytest.mark.parametrize(
    ("written", "hint"),
    [
        (
            "  pipline_parallel: 2",
            "(did you mean `pipeline_parallel`, which trainc calls `parallel.pp`?)",
        ),
        (
            "  tensor_model_paralel_size: 2",
            "(did you mean `tensor_model_parallel_size`, which trainc calls `parallel.tp`?)",
        ),
        ("  sequence_paralel: true", "(did you mean `parallel.sequence_parallel`?)"),
    ],
)
def test_a_misspelt_foreign_name_points_to_its_trainc_key(tmp_path, written, hint):
    """`pipline_parallel` got "did you mean `sequence_parallel`"; a name closer to an alias
    than to any spec key names the alias's trainc key."""
    d = only(load_text(tmp_path, SPEC.replace("  tp: 2", written)), "TRC002")
    assert d.message.endswith(hint), d.message


def test_hf_kv_heads_is_query_groups_not_attention_heads(tmp_path):
    text = SPEC.replace("model:\n", "model:\n  num_key_value_heads: 8\n")
    d = only(load_text(tmp_path, text), "TRC002")
    assert "`model.num_query_groups`" in d.message and "num_attention_heads" not in d.message


def test_hf_sliding_window_is_window_size_minus_one(tmp_path):
    """Hugging Face's sliding_window counts the query itself, trainc's window_size the keys to
    its left: the edit writes S - 1."""
    text = SPEC.replace("model:\n", "model:\n  sliding_window: 512\n")
    d = only(load_text(tmp_path, text), "TRC002")
    assert d.key == "model.sliding_window"
    assert d.fix == "write model.window_size: 511 instead of model.sliding_window"
    assert dict(d.edits) == {"model.sliding_window": None, "model.window_size": 511}


def test_unknown_section(tmp_path):
    d = only(load_text(tmp_path, SPEC + "paralel:\n  tp: 2\n"), "TRC002")
    assert d.key == "paralel" and "parallel" in d.message


@pytest.mark.parametrize(
    ("value", "got"),
    [
        ("2.0", "float"),
        ("2.5", "float"),
        ("true", "bool"),
        ("two", "str"),
        ('"2"', "str"),
        ("[2]", "list"),
    ],
)
def test_wrong_type_for_int(tmp_path, value, got):
    d = only(load_text(tmp_path, SPEC.replace("  tp: 2", f"  tp: {value}")), "TRC001")
    assert d.key == "parallel.tp"
    assert got in d.message and d.locations[0].line == 12


def test_scientific_notation_is_a_string_in_yaml(tmp_path):
    # YAML 1.1 reads 5e8 as a string (DeepSpeed/accelerate bug case BC-049's kind).
    d = only(
        load_text(tmp_path, SPEC.replace("global_batch_size: 16", "global_batch_size: 1e3")),
        "TRC001",
    )
    assert d.key == "training.global_batch_size"


def test_missing_required(tmp_path):
    d = only(load_text(tmp_path, SPEC.replace("  num_layers: 8\n", "")), "TRC003")
    assert d.key == "model.num_layers" and d.fix


def test_an_empty_file_is_one_finding(tmp_path):
    """An empty (or comment-only) spec is one TRC000 naming what a spec needs, not a missing
    value per required key (12 findings, among them custom-GPU bandwidths)."""
    for text in ("", "# nothing yet\n"):
        loaded = load_text(tmp_path, text)
        assert loaded.spec is None
        assert [d.rule.id for d in loaded.diagnostics] == ["TRC000"]
        assert "is empty: a spec names at least the model" in loaded.diagnostics[0].message


def test_an_empty_file_with_overrides_reports_every_missing_section_key(tmp_path):
    spec = tmp_path / "e.yaml"
    spec.write_text("")
    loaded = load_spec(spec, ["engine=megatron"])
    keys = {d.key for d in loaded.diagnostics if d.rule.id == "TRC003"}
    assert {"model.num_layers", "cluster.num_nodes", "training.global_batch_size"} <= keys


def test_bad_enum_value(tmp_path):
    d = only(load_text(tmp_path, SPEC + "engine: megatorn\n"), "TRC004")
    assert d.key == "engine" and "did you mean `megatron`" in d.message


def test_unknown_preset_in_defaults(tmp_path):
    text = (
        "defaults:\n  - model: llama2-7bb\n  - _self_\ncluster:\n  num_nodes: 1\n"
        "training:\n  global_batch_size: 16\n"
    )
    d = only(load_text(tmp_path, text), "TRC004")
    assert d.key == "model" and "did you mean `llama2-7b`" in d.message
    assert "llama3-8b" in (d.fix or "")


def test_unknown_preset_on_command_line(tmp_path):
    d = only(load_text(tmp_path, SPEC, ["cluster=dgx-h10"]), "TRC004")
    assert d.key == "cluster" and d.locations[0].file == "<command line>"


def test_group_override_selects_a_preset(tmp_path):
    loaded = load_text(tmp_path, SPEC, ["model=llama2-7b"])
    assert loaded.spec is not None and loaded.spec.model.num_layers == 32
    assert loaded.where["model.num_layers"].file.endswith("model/llama2-7b.yaml")


@pytest.mark.parametrize("override", ["parallel.tp=[1", "foo", "parallel.tp=1)"])
def test_bad_override_syntax(tmp_path, override):
    d = only(load_text(tmp_path, SPEC, [override]), "TRC005")
    assert d.locations[0].file == "<command line>" and d.fix


def test_an_unquoted_non_ascii_value_gets_the_quoted_form_as_fix(tmp_path):
    """`name=llama³-70b` failed with Hydra's bare LexerNoViableAltException; the fix now shows
    the quoted form Hydra's grammar takes."""
    d = only(load_text(tmp_path, SPEC, ["name=llama³-70b"]), "TRC005")
    assert d.fix is not None and "name='llama³-70b' (in a shell: \"name='llama³-70b'\")" in d.fix
    assert load_text(tmp_path, SPEC, ["name='llama-70b'"]).spec.name == "llama-70b"


def test_override_unknown_key_and_wrong_type(tmp_path):
    loaded = load_text(tmp_path, SPEC, ["parallel.tpp=2", "parallel.pp=abc"])
    got = {(d.rule.id, d.key) for d in loaded.diagnostics}
    assert got == {("TRC002", "parallel.tpp"), ("TRC001", "parallel.pp")}
    assert all(d.locations[0].file == "<command line>" for d in loaded.diagnostics)


def test_delete_override_returns_a_key_to_its_default(tmp_path):
    """Hydra's ~KEY: the key leaves the composed spec (its default applies, and it is no longer
    one the user wrote); ~KEY=VALUE only when it holds VALUE; a preset cannot be deleted."""
    spec = SPEC.replace("  tp: 2\n", "  tp: 2\n  pp: 2\n")
    loaded = load_text(tmp_path, spec, ["~parallel.pp"])
    assert not loaded.diagnostics and loaded.spec is not None
    assert loaded.spec.parallel.pp == 1 and "parallel.pp" not in loaded.explicit
    assert "parallel.pp" not in loaded.where
    assert load_text(tmp_path, spec, ["~parallel.pp=2"]).spec.parallel.pp == 1
    d = only(load_text(tmp_path, spec, ["~parallel.pp=4"]), "TRC005")
    assert d.message == "cannot apply '~parallel.pp=4': parallel.pp is 2, not 4"
    assert d.locations[0].file == "<command line>" and d.locations[0].line == 1
    d = only(load_text(tmp_path, SPEC, ["parallel.tp=4", "~parallel.vpp"]), "TRC005")
    assert d.message == "cannot apply '~parallel.vpp': parallel.vpp is not set in the composed spec"
    assert d.locations[0].line == 2
    d = only(load_text(tmp_path, SPEC, ["~model"]), "TRC005")
    assert d.fix == "choose another preset instead (model=NAME)"
    # later overrides win, in command-line order
    assert load_text(tmp_path, spec, ["~parallel.pp", "parallel.pp=4"]).spec.parallel.pp == 4


def test_non_utf8(tmp_path):
    d = only(load_text(tmp_path, SPEC.encode() + b"name: caf\xe9\n"), "TRC000")
    assert "UTF-8" in d.message


def test_malformed_yaml_has_line(tmp_path):
    d = only(load_text(tmp_path, SPEC.replace("  tp: 2", "  tp: [2")), "TRC000")
    assert d.key == "<file>" and d.locations[0].line is not None


def test_not_a_mapping(tmp_path):
    d = only(load_text(tmp_path, "- a\n- b\n"), "TRC000")
    assert "mapping" in d.message


def test_directory(tmp_path):
    d = only(load_spec(tmp_path), "TRC000")
    assert "directory" in d.message


def test_missing_file(tmp_path):
    d = only(load_spec(tmp_path / "nope.yaml"), "TRC000")
    assert "does not exist" in d.message


def test_unreadable_file(tmp_path):
    f = tmp_path / "secret.yaml"
    f.write_text(SPEC)
    f.chmod(0)
    try:
        if os.access(f, os.R_OK):
            pytest.skip("running as root: chmod 000 does not stop reading")
        d = only(load_spec(f), "TRC000")
        assert "cannot read" in d.message
    finally:
        f.chmod(0o644)


def test_deep_nesting_does_not_raise(tmp_path):
    deep = "name: " + "[" * 20000 + "]" * 20000 + "\n"
    loaded = load_text(tmp_path, SPEC + deep)
    assert loaded.spec is None and loaded.diagnostics


def test_deep_mapping_under_a_leaf_is_a_type_error(tmp_path):
    nested = (
        "  tp:\n" + "".join("  " * (i + 2) + f"k{i}:\n" for i in range(50)) + "  " * 52 + "v: 1\n"
    )
    loaded = load_text(tmp_path, SPEC.replace("  tp: 2\n", nested))
    assert loaded.spec is None
    assert {d.key for d in loaded.diagnostics} == {"parallel.tp"}


def test_other_suffix(tmp_path):
    loaded = load_text(tmp_path, SPEC, name="spec.yml")
    assert loaded.spec is not None


def test_validator_diagnostics_carry_file_and_line(tmp_path):
    loaded = load_text(tmp_path, SPEC.replace("  tp: 2", "  tp: 3"))
    assert loaded.spec is not None
    diags = locate(validate(normalize(loaded.spec)), loaded.where)
    d = next(d for d in diags if d.rule.id == "TRC201")
    assert d.key == "parallel.tp"
    rec = d.to_json()
    assert rec["file"].endswith("spec.yaml") and rec["line"] == 12


def test_preset_values_are_located_in_the_preset(tmp_path):
    text = (
        "defaults:\n  - model: llama2-7b\n  - cluster: dgx-a100-80g\n  - _self_\n"
        "cluster:\n  num_nodes: 1\nparallel:\n  tp: 8\ntraining:\n  global_batch_size: 16\n"
    )
    loaded = load_text(tmp_path, text)
    assert loaded.spec is not None
    assert loaded.where["model.num_layers"].file == "trainc/conf/model/llama2-7b.yaml"
    assert loaded.where["parallel.tp"].line == 8
    assert "parallel.tp" in loaded.explicit and "model.num_layers" not in loaded.explicit


# --- the fast composition path gives what Hydra gives ------------------------------------------

from trainc.compiler import load as L  # noqa: E402


def _both(path: Path, overrides: list[str]):
    """(trainc's composition, a plain Hydra compose of the whole spec) as (container, presets,
    diagnostics) triples; presets are compared by group."""
    import warnings

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    node, _ = L._read_yaml(path, str(path))
    L._PRESET_CACHE.clear()
    fast = L._compose(path, str(path), node, overrides)
    listed = {g for g, _ in L._defaults_list(node)}
    hydra_ov = [o if o.split("=")[0] in listed else "+" + o for o in overrides]
    GlobalHydra.instance().clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with initialize_config_dir(config_dir=str(path.parent), version_base="1.3"):
            cfg = compose(
                config_name=path.stem,
                overrides=[*hydra_ov, f"hydra.searchpath=[file://{L.conf_dir()}]"],
            )
    GlobalHydra.instance().clear()
    ref = OmegaConf.to_container(cfg, resolve=True)
    return (fast[0], set(fast[1]), fast[2]), (ref, set(fast[1]), [])


@pytest.mark.parametrize("model", L.preset_names("model"))
def test_fast_compose_equals_hydra_for_every_model_preset(tmp_path, model):
    cluster = L.preset_names("cluster")[len(model) % len(L.preset_names("cluster"))]
    f = tmp_path / "spec.yaml"
    f.write_text(
        f"defaults:\n  - model: {model}\n  - cluster: {cluster}\n  - _self_\n"
        "cluster:\n  num_nodes: 2\nmodel:\n  seq_length: 2048\n"
        "training:\n  global_batch_size: 64\n"
    )
    fast, hydra = _both(f, [])
    assert fast is not None
    assert fast[0] == hydra[0] and fast[1] == hydra[1] and not fast[2] and not hydra[2]


def test_fast_compose_self_first_and_group_override(tmp_path):
    f = tmp_path / "spec.yaml"
    f.write_text(
        "defaults:\n  - _self_\n  - model: llama2-7b\nmodel:\n  num_layers: 2\n"
        "cluster:\n  num_nodes: 1\n"
    )
    fast, hydra = _both(f, ["model=llama3-8b"])
    assert fast[0] == hydra[0] and fast[0]["model"]["num_layers"] == 32


def test_fast_compose_interpolation(tmp_path):
    loaded = load_text(tmp_path, SPEC + "launch:\n  partition: p-${name}\n")
    assert loaded.spec is not None and loaded.spec.launch.partition == "p-load-test"


def test_preset_next_to_the_spec_wins(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "tiny.yaml").write_text(
        "num_layers: 2\nhidden_size: 64\nnum_attention_heads: 4\nvocab_size: 100\nseq_length: 128\n"
    )
    loaded = load_text(
        tmp_path,
        "defaults:\n  - model: tiny\n  - _self_\ncluster:\n"
        "  num_nodes: 1\ntraining:\n  global_batch_size: 8\n",
    )
    assert loaded.spec is not None and loaded.spec.model.num_layers == 2
    assert loaded.where["model.num_layers"].file.endswith("model/tiny.yaml")


def test_duplicate_key_is_an_error(tmp_path):
    loaded = load_text(tmp_path, SPEC + "name: again\n")
    assert loaded.spec is None and loaded.diagnostics[0].rule.id == "TRC000"


def test_launch_env_entries_are_located(tmp_path):
    loaded = load_text(
        tmp_path,
        SPEC + "launch:\n  env:\n    NCCL_DEBUG: INFO\n",
        ["launch.env={MASTER_ADDR:localhost}"],
    )
    assert loaded.spec is not None
    assert loaded.where["launch.env.MASTER_ADDR"].file == "<command line>"
    loaded = load_text(tmp_path, SPEC + "launch:\n  env:\n    NCCL_DEBUG: INFO\n")
    assert loaded.where["launch.env.NCCL_DEBUG"].line == 17


def test_an_integral_float_for_an_integer_key_names_the_integer(tmp_path):
    """train_iters: 1e3 is the float 1000.0 in YAML: the fix names the integer to write."""
    d = only(load_text(tmp_path, SPEC + "  train_iters: 1e3\n"), "TRC001")
    assert d.key == "training.train_iters"
    assert "a decimal point or an exponent, 2.0 or 1e3, as a float" in d.message
    assert d.fix == "write it as the integer 1000: training.train_iters=1000"
    assert d.edits == {"training.train_iters": 1000}


def test_a_megatron_name_outside_parallel_points_to_the_parallel_key(tmp_path):
    """A top-level tensor_model_parallel_size got 'fix: write tp: 2' (no section)."""
    d = only(load_text(tmp_path, SPEC + "tensor_model_parallel_size: 2\n"), "TRC002")
    assert "trainc calls it `parallel.tp`" in d.message
    assert d.fix == "write parallel.tp: 2 instead of tensor_model_parallel_size"
    assert d.edits == {"tensor_model_parallel_size": None, "parallel.tp": 2}
