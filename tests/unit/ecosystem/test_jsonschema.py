"""trainc schema: generated from the dataclasses; presets and examples validate against it."""

import json
from pathlib import Path

import pytest
import yaml

from trainc.cli import main
from trainc.compiler.load import conf_dir
from trainc.compiler.load.schema_check import schema_keys
from trainc.ecosystem.jsonschema import field_docs, section_schema, spec_schema
from trainc.schemas import ModelSpec

jsonschema = pytest.importorskip("jsonschema")
ROOT = Path(__file__).resolve().parents[3]
V = jsonschema.Draft202012Validator


def _errors(schema, doc):
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in V(schema).iter_errors(doc)
    ]


def test_schema_is_valid_draft_2020_12():
    V.check_schema(spec_schema())
    for section in ("model", "cluster", "parallel", "training", "launch", "data", "resume"):
        V.check_schema(section_schema(section))


def test_schema_covers_every_spec_key_with_a_description():
    s = spec_schema()
    found = set()

    def walk(props, prefix):  # nested sections (resume.saved) are $refs too
        for key, prop in props.items():
            if "$ref" in prop and prefix:
                walk(s["$defs"][prop["$ref"].rsplit("/", 1)[1]]["properties"], f"{prefix}{key}.")
            found.add(f"{prefix}{key}")
            if prefix:
                assert prop.get("description"), f"{prefix}{key} has no description"

    for section, ref in s["properties"].items():
        if "$ref" not in ref:
            found.add(section)
            continue
        sub = s["$defs"][ref["$ref"].rsplit("/", 1)[1]]
        assert sub["additionalProperties"] is False
        walk(sub["properties"], f"{section}.")
    assert set(schema_keys()) <= found
    assert "defaults" in s["properties"]


def test_types_enums_and_defaults():
    m = spec_schema()["$defs"]["ModelSpec"]["properties"]
    assert m["num_layers"] == {
        "type": "integer",
        "description": field_docs(ModelSpec)["num_layers"],
    }
    assert m["activation"]["enum"] == ["swiglu", "gelu"] and m["activation"]["default"] == "swiglu"
    assert m["num_query_groups"]["type"] == ["integer", "null"]
    env = spec_schema()["$defs"]["LaunchSpec"]["properties"]["env"]
    assert env["type"] == "object" and env["default"] == {}


@pytest.mark.parametrize(
    "example", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name
)
def test_examples_validate(example):
    assert _errors(spec_schema(), yaml.safe_load(example.read_text())) == []


# conf/gpu holds GPU profiles (hardware data read by trainc.compiler.support.hardware), not
# spec sections
@pytest.mark.parametrize(
    "preset",
    sorted(p for p in conf_dir().glob("*/*.yaml") if p.parent.name != "gpu"),
    ids=lambda p: f"{p.parent.name}/{p.stem}",
)
def test_presets_validate_against_their_section(preset):
    doc = yaml.safe_load(preset.read_text())
    assert _errors(section_schema(preset.parent.name), doc) == []


def test_mistakes_are_rejected():
    s = spec_schema()
    explicit = {
        "model": {
            "num_layers": 2,
            "hidden_size": 8,
            "num_attention_heads": 2,
            "vocab_size": 10,
            "seq_length": 4,
        },
        "cluster": {"num_nodes": 1},
        "training": {"global_batch_size": 8},
    }
    assert _errors(s, explicit) == []
    assert _errors(s, {**explicit, "parallel": {"tpp": 2}})  # unknown key
    assert _errors(s, {**explicit, "parallel": {"tp": 2.5}})  # wrong type
    assert _errors(s, {**explicit, "model": {**explicit["model"], "activation": "relu"}})
    # without a defaults list every required key must be present; with one, presets supply them
    assert _errors(s, {"cluster": {"num_nodes": 1}})
    assert (
        _errors(s, {"defaults": [{"model": "llama2-7b"}, "_self_"], "cluster": {"num_nodes": 1}})
        == []
    )


def test_cli_prints_the_schema(capsys):
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == spec_schema()
    assert main(["schema", "--section", "model"]) == 0
    assert json.loads(capsys.readouterr().out)["$ref"] == "#/$defs/ModelSpec"
    assert main(["schema", "--section", "nope"]) == 2
