"""Strings are strings (issue 11 item 3): a string key whose unquoted YAML value (or override)
was read as a number, base-60 time, boolean or null is TRC007 at that key's line, with the quoted
fix; NaN and infinities are TRC008 in every float key; JSON output is strict."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from trainc.cli import main
from trainc.compiler.load import load_spec
from trainc.schemas import Gpu

SPEC = """\
name: strings
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


def _load(tmp_path: Path, extra: str = "", overrides: tuple[str, ...] = (), base: str = SPEC):
    f = tmp_path / "spec.yaml"
    f.write_text(base + extra)
    return load_spec(f, list(overrides))


def _diag(loaded, rule: str, key: str):
    found = [d for d in loaded.diagnostics if d.rule.id == rule and d.key == key]
    assert found, [(d.rule.id, d.key, d.message) for d in loaded.diagnostics]
    assert loaded.spec is None
    return found[0]


# (section text, key, YAML text, what YAML read, words in the message)
YAML_CASES = [
    ("launch:\n  time_limit: 4:00:00\n", "launch.time_limit", "4:00:00", "base-60", 16),
    ("launch:\n  time_limit: 90:00\n", "launch.time_limit", "90:00", "base-60", 16),
    ("launch:\n  account: 0123\n", "launch.account", "0123", "octal integer, 83", 16),
    ("launch:\n  account: 0x1F\n", "launch.account", "0x1F", "hexadecimal integer, 31", 16),
    ("launch:\n  account: 4711\n", "launch.account", "4711", "an integer, 4711", 16),
    ("launch:\n  partition: yes\n", "launch.partition", "yes", "boolean true", 16),
    ("launch:\n  partition: off\n", "launch.partition", "off", "boolean false", 16),
    ("launch:\n  container_image: 1.5\n", "launch.container_image", "1.5", "a number, 1.5", 16),
    ("launch:\n  time_limit: ~\n", "launch.time_limit", "~", "null", 16),
    (
        "launch:\n  env:\n    OMP_NUM_THREADS: 010\n",
        "launch.env.OMP_NUM_THREADS",
        "010",
        "octal integer, 8",
        17,
    ),
    (
        "launch:\n  env:\n    NCCL_IB_DISABLE: yes\n",
        "launch.env.NCCL_IB_DISABLE",
        "yes",
        "boolean true",
        17,
    ),
]


@pytest.mark.parametrize(
    ("extra", "key", "text", "read_as", "line"), YAML_CASES, ids=[c[2] for c in YAML_CASES]
)
def test_unquoted_yaml_scalar_in_a_string_key(
    tmp_path: Path, extra: str, key: str, text: str, read_as: str, line: int
) -> None:
    d = _diag(_load(tmp_path, extra), "TRC007", key)
    assert read_as in d.message and f"unquoted {text} " in d.message
    assert d.fix == f'quote it: {key.rsplit(".", 1)[-1]}: "{text}"'
    assert d.edits == {key: text}
    assert d.locations[0].line == line and d.locations[0].file.endswith("spec.yaml")


def test_name_1e3_is_not_1000(tmp_path: Path) -> None:
    d = _diag(_load(tmp_path, base=SPEC.replace("name: strings", "name: 1e3")), "TRC007", "name")
    assert "a number, 1000.0" in d.message and d.fix == 'quote it: name: "1e3"'
    assert d.locations[0].line == 1


@pytest.mark.parametrize(
    "extra",
    [
        'launch:\n  time_limit: "4:00:00"\n',
        "launch:\n  time_limit: '4:00:00'\n",
        'launch:\n  account: "0123"\n',
        "launch:\n  partition: !!str yes\n",
        "launch:\n  container_image: 2024-01-01\n",
        "launch:\n  env:\n    CUDA_DEVICE_MAX_CONNECTIONS: 1\n",
        "launch:\n  account: null\n",
    ],
)
def test_quoted_strings_dates_and_plain_env_numbers_are_accepted(
    tmp_path: Path, extra: str
) -> None:
    loaded = _load(tmp_path, extra)
    assert loaded.spec is not None, [d.message for d in loaded.diagnostics]
    lc = loaded.spec.launch
    assert lc.time_limit in ("4:00:00", "04:00:00")
    assert lc.account in (None, "0123")
    assert lc.container_image in (None, "2024-01-01")  # no timestamp type: a date stays text
    assert lc.env in ({}, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})


def test_a_preset_value_is_reported_in_the_preset(tmp_path: Path) -> None:
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "mine.yaml").write_text("num_nodes: 1\ngpu: 100\n")
    loaded = _load(
        tmp_path,
        base="defaults:\n  - cluster: mine\n  - _self_\n"
        + SPEC.replace("cluster:\n  num_nodes: 1\n  gpu: a100-80g\n", ""),
    )
    # cluster.gpu is an enum (a closed vocabulary): a number there is a type error, reported
    # at the preset's line like any other
    d = _diag(loaded, "TRC001", "cluster.gpu")
    assert d.locations[0].file.endswith("cluster/mine.yaml") and d.locations[0].line == 2


def test_a_quoted_spec_value_wins_over_a_preset_number(tmp_path: Path) -> None:
    (tmp_path / "cluster").mkdir()
    (tmp_path / "cluster" / "mine.yaml").write_text("num_nodes: 1\ngpu: 100\n")
    loaded = _load(
        tmp_path,
        base="defaults:\n  - cluster: mine\n  - _self_\n"
        + SPEC.replace("  gpu: a100-80g\n", '  gpu: "a100-80g"\n'),
    )
    assert loaded.spec is not None and loaded.spec.cluster.gpu is Gpu.a100_80g


@pytest.mark.parametrize(
    ("override", "key", "read_as"),
    [
        ("name=1e3", "name", "a number, 1000.0"),
        ("launch.account=4711", "launch.account", "an integer, 4711"),
        ("launch.partition=true", "launch.partition", "boolean true"),
        ("launch.time_limit=null", "launch.time_limit", "null"),
    ],
)
def test_override_read_as_another_type(
    tmp_path: Path, override: str, key: str, read_as: str
) -> None:
    d = _diag(_load(tmp_path, overrides=("parallel.tp=2", override)), "TRC007", key)
    text = override.split("=", 1)[1]
    assert read_as in d.message and "the override's unquoted" in d.message
    assert d.fix == f"quote the value for Hydra, inside shell quotes: '{key}=\"{text}\"'"
    assert d.locations[0].file == "<command line>" and d.locations[0].line == 2


@pytest.mark.parametrize(
    "override",
    ['launch.account="0123"', "launch.account=0123", "launch.time_limit=4:00:00", "name='1e3'"],
)
def test_override_strings_are_accepted(tmp_path: Path, override: str) -> None:
    """Hydra's grammar reads 0123 and 4:00:00 as strings (only YAML 1.1 makes numbers of
    them): the text is kept as written."""
    loaded = _load(tmp_path, overrides=(override,))
    assert loaded.spec is not None, [d.message for d in loaded.diagnostics]
    key, text = override.split("=", 1)
    section, _, leaf = key.rpartition(".")
    obj = getattr(loaded.spec, section) if section else loaded.spec
    assert getattr(obj, leaf) == text.strip("'\"")


@pytest.mark.parametrize(
    ("extra", "overrides", "key"),
    [
        ("  lr: .nan\n", (), "training.lr"),
        ("  lr: .inf\n", (), "training.lr"),
        ("  min_lr: -.inf\n", (), "training.min_lr"),
        ("", ("training.lr=nan",), "training.lr"),
        ("", ("training.lr=inf",), "training.lr"),
        ("", ("training.weight_decay=-inf",), "training.weight_decay"),
        ("", ("cluster.gpu_memory_gib=nan",), "cluster.gpu_memory_gib"),
    ],
)
def test_non_finite_numbers_are_refused(
    tmp_path: Path, extra: str, overrides: tuple[str, ...], key: str
) -> None:
    d = _diag(_load(tmp_path, extra, overrides), "TRC008", key)
    assert "is not a finite number" in d.message and d.fix == f"set {key} to a finite number"


def test_json_output_is_strict(tmp_path: Path, capsys) -> None:
    """lint --format json of a spec with NaN: strict JSON on stdout (parse_constant refuses
    NaN/Infinity), TRC008 reported."""
    f = tmp_path / "spec.yaml"
    f.write_text(SPEC + "  lr: .nan\n")

    def refuse(c: str) -> None:
        raise AssertionError(f"non-strict JSON constant {c}")

    assert main(["lint", str(f), "training.min_lr=inf", "--format", "json"]) == 2
    report = json.loads(capsys.readouterr().out, parse_constant=refuse)
    rules = {(d["rule"], d["key"]) for d in report["specs"][0]["diagnostics"]}
    assert {("TRC008", "training.lr"), ("TRC008", "training.min_lr")} <= rules


def test_artifact_with_a_non_finite_value_is_an_internal_error(tmp_path: Path) -> None:
    """The only writer refuses a JSON artifact holding NaN (a computed value: a bug)."""
    from trainc.compiler.support.write import write_artifacts
    from trainc.errors import InternalError

    plan = {"spec_hash": "x", "trainc_version": "0", "target_versions": {}}
    with pytest.raises(InternalError, match=r"plan\.json would hold NaN"):
        write_artifacts({"plan.json": json.dumps({"x": math.nan})}, plan, tmp_path / "o")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("item", "read_as"), [("yes", "boolean true"), ("~", "null"), ("off", "boolean false")]
)
def test_unquoted_item_of_a_list_of_strings(tmp_path: Path, item: str, read_as: str) -> None:
    d = _diag(
        _load(tmp_path, f"launch:\n  container_mounts: [/a:/b, {item}]\n"),
        "TRC007",
        "launch.container_mounts",
    )
    assert f"the unquoted item {item} as" in d.message and read_as in d.message
    assert d.fix == f'quote it: - "{item}"' and d.locations[0].line == 16


def test_a_list_of_plain_strings_is_accepted(tmp_path: Path) -> None:
    loaded = _load(tmp_path, 'launch:\n  container_mounts: [/a:/b, "yes", /c]\n')
    assert loaded.spec is not None and loaded.spec.launch.container_mounts == ["/a:/b", "yes", "/c"]


@pytest.mark.parametrize(
    ("override", "key", "text", "read_as"),
    [
        ("launch.versions={nccl: 2.20}", "launch.versions.nccl", "2.20", "a number, 2.2"),
        (
            "launch.versions={torch: 2.4.0, nccl: 2.20}",
            "launch.versions.nccl",
            "2.20",
            "a number, 2.2",
        ),
        ("launch.versions.nccl=2.20", "launch.versions.nccl", "2.20", "a number, 2.2"),
        (
            "launch.env={NCCL_IB_DISABLE: true}",
            "launch.env.NCCL_IB_DISABLE",
            "true",
            "the boolean true",
        ),
    ],
)
def test_a_mapping_override_keeps_its_entries_text(
    tmp_path: Path, override: str, key: str, text: str, read_as: str
) -> None:
    """``launch.versions={nccl: 2.20}`` is not silently nccl 2.2: the entry Hydra read as a
    number is TRC007 with the quoted fix, as ``launch.versions.nccl=2.20`` is."""
    d = _diag(_load(tmp_path, overrides=(override,)), "TRC007", key)
    assert d.message == (
        f"{key} is a string, but the override's unquoted {text} was read as {read_as}"
    )
    assert d.fix == f"quote the value for Hydra, inside shell quotes: '{key}=\"{text}\"'"
    assert d.edits == {key: text}
    assert d.locations[0].file == "<command line>" and d.locations[0].line == 1


def test_a_yaml_version_number_is_an_error_with_the_quoted_fix(tmp_path: Path) -> None:
    d = _diag(
        _load(tmp_path, "launch:\n  versions:\n    nccl: 2.20\n"), "TRC007", "launch.versions.nccl"
    )
    assert d.message == (
        "launch.versions.nccl is a string, but YAML read the unquoted 2.20 as a number, 2.2"
    )
    assert d.fix == 'quote it: nccl: "2.20"'


@pytest.mark.parametrize(
    "override", ['launch.versions={nccl: "2.20"}', "launch.versions={nccl: '2.20', torch: 2.4.0}"]
)
def test_a_quoted_version_in_a_mapping_override_is_kept(tmp_path: Path, override: str) -> None:
    loaded = _load(tmp_path, overrides=(override,))
    assert loaded.spec is not None, [d.message for d in loaded.diagnostics]
    assert loaded.spec.launch.versions["nccl"] == "2.20"
