"""trainc lint --format sarif|github, and the pre-commit hook definition."""

import json
import re
from pathlib import Path

import pytest
import yaml

from trainc.cli import main
from trainc.compiler.rules import ALL_RULES

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = "examples/llama2-70b-dgx-a100.yaml"


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch):
    monkeypatch.chdir(ROOT)


def _lint(capsys, *args):
    rc = main(["lint", *args])
    return rc, capsys.readouterr().out


def test_sarif_clean_spec(capsys):
    rc, out = _lint(capsys, EXAMPLE, "--format", "sarif")
    assert rc == 0
    log = json.loads(out)
    assert log["version"] == "2.1.0" and "sarif" in log["$schema"]
    (run,) = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert run["tool"]["driver"]["name"] == "trainc"
    assert {r["id"] for r in rules} == {r.id for r in ALL_RULES}
    assert all(
        r["shortDescription"]["text"]
        and r["defaultConfiguration"]["level"] in ("error", "warning", "note")
        for r in rules
    )
    assert all(res["level"] != "error" for res in run["results"])


def test_sarif_errors_point_at_files_and_lines(capsys):
    rc, out = _lint(capsys, EXAMPLE, "parallel.tp=3", "--format", "sarif")
    assert rc == 2
    (run,) = json.loads(out)["runs"]
    rules = run["tool"]["driver"]["rules"]
    by_rule = {r["ruleId"]: r for r in run["results"]}
    assert "TRC201" in by_rule and by_rule["TRC201"]["level"] == "error"
    for res in run["results"]:
        assert rules[res["ruleIndex"]]["id"] == res["ruleId"]
        (loc,) = res["locations"]
        phys = loc["physicalLocation"]
        assert (ROOT / phys["artifactLocation"]["uri"]).is_file()
        assert phys["region"]["startLine"] >= 1
        assert loc["logicalLocations"][0]["fullyQualifiedName"] == res["properties"]["key"]
    # parallel.tp was set on the command line: the result says so and points at a related file
    assert "set at <command line>" in by_rule["TRC201"]["message"]["text"]


def test_sarif_location_of_a_key_set_in_the_spec(tmp_path, capsys):
    spec = (ROOT / EXAMPLE).read_text().replace("  tp: 8\n", "  tp: 3\n")
    path = tmp_path / "bad.yaml"
    path.write_text(spec)
    rc, out = _lint(capsys, str(path), "--format", "sarif")
    assert rc == 2
    res = next(r for r in json.loads(out)["runs"][0]["results"] if r["ruleId"] == "TRC201")
    phys = res["locations"][0]["physicalLocation"]
    line = next(i for i, text in enumerate(spec.splitlines(), 1) if text == "  tp: 3")
    assert phys["region"]["startLine"] == line
    assert phys["artifactLocation"]["uri"] == path.resolve().as_uri()


def test_github_annotations(capsys):
    rc, out = _lint(capsys, EXAMPLE, "parallel.tp=3", "--format", "github")
    assert rc == 2
    cmds = [line for line in out.splitlines() if line.startswith("::")]
    pattern = re.compile(
        r"::(error|warning|notice) file=([^,]+),line=(\d+),title=(TRC\d{3} [a-z0-9-]+)::(.+)"
    )
    parsed = [pattern.fullmatch(c) for c in cmds]
    assert cmds and all(parsed)
    titles = {m.group(4) for m in parsed}
    assert "TRC201 heads-divisible-by-tp" in titles
    assert all((ROOT / m.group(2)).is_file() for m in parsed)
    assert all("\n" not in m.group(5) for m in parsed)  # newlines are %0A-escaped
    assert out.splitlines()[-1].startswith(f"{EXAMPLE}: FAILED")


def test_github_clean_and_werror(capsys):
    rc, out = _lint(capsys, EXAMPLE, "--format", "github")
    assert rc == 0 and "::error" not in out
    rc, out = _lint(
        capsys, EXAMPLE, "parallel.tp=16", "cluster.num_nodes=16", "--format", "github", "--werror"
    )
    assert "::warning" in out and rc == 2


def test_pre_commit_hook_definition():
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "trainc-lint" and hook["entry"] == "trainc lint"
    assert hook["language"] == "python"
    files, exclude = re.compile(hook["files"]), re.compile(hook["exclude"])

    def linted(p):
        return bool(files.search(p)) and not exclude.search(p)

    assert linted(EXAMPLE) and linted("specs/llama.yaml") and linted("jobs/x.trainc.yaml")
    assert not linted("specs/model/mine.yaml") and not linted("docs/mkdocs.yml")
