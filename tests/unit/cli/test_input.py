"""Inputs a real user has (issue 12): a spec on standard input (``-``), spec folders whose names
hold non-ASCII, quotes, brackets, spaces or '=', and hostile YAML (alias bombs, object tags)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainc.cli import main
from trainc.compiler.load import load_spec

SPEC = (
    "defaults:\n  - model: mine\n  - cluster: dgx-h100\n  - _self_\nname: paths\n"
    "cluster:\n  num_nodes: 1\nparallel:\n  tp: 2\ntraining:\n  global_batch_size: 16\n"
)
MODEL = (
    "num_layers: 8\nhidden_size: 512\nnum_attention_heads: 8\nvocab_size: 32001\nseq_length: 1024\n"
)


def _tree(root: Path) -> Path:
    (root / "model").mkdir(parents=True)
    (root / "model" / "mine.yaml").write_text(MODEL)
    (root / "s.yaml").write_text(SPEC)
    return root / "s.yaml"


def _trainc(args: list[str], cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainc", *args],
        input=stdin,
        text=True,
        capture_output=True,
        cwd=cwd,
        timeout=300,
        env={**__import__("os").environ, "TRAINC_NO_CACHE": "1"},
    )


# --- standard input ------------------------------------------------------------------------


def test_lint_reads_the_spec_from_stdin(tmp_path: Path) -> None:
    _tree(tmp_path)
    r = _trainc(["lint", "-", "--format", "json"], tmp_path, SPEC)
    assert r.returncode == 0, r.stderr
    [rec] = json.loads(r.stdout)["specs"]
    assert rec["path"] == "<stdin>" and rec["ok"]
    # presets resolve relative to the working folder; lines are located in <stdin>
    files = {(d.get("file"), d.get("line")) for d in rec["diagnostics"]}
    assert ("model/mine.yaml", 4) in files


def test_lint_stdin_with_overrides_and_errors(tmp_path: Path) -> None:
    _tree(tmp_path)
    r = _trainc(["lint", "-", "parallel.tp=3"], tmp_path, SPEC)
    assert r.returncode == 2 and "<stdin>: FAILED" in r.stdout and "TRC101" in r.stderr


def test_compile_reads_the_spec_from_stdin(tmp_path: Path) -> None:
    spec = _tree(tmp_path)
    r = _trainc(["compile", "-", "-o", "out-stdin"], tmp_path, SPEC)
    assert r.returncode == 0, r.stderr
    r2 = _trainc(["compile", str(spec), "-o", "out-file"], tmp_path)
    assert r2.returncode == 0, r2.stderr
    for name in ("megatron_args.txt", "sbatch.sh", "megatron_core.yaml"):
        assert (tmp_path / "out-stdin" / name).read_bytes() == (
            tmp_path / "out-file" / name
        ).read_bytes()


def test_stdin_given_twice_or_garbage_is_exit_2(tmp_path: Path) -> None:
    assert _trainc(["lint", "-", "-"], tmp_path, SPEC).returncode == 2
    r = _trainc(["lint", "-"], tmp_path, "a: [\n")
    assert r.returncode == 2 and "<stdin>" in r.stderr and "Traceback" not in r.stderr


# --- folder names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "folder",
    ["naïve-日本語", "it's", "x]y", "a b", "runs/date=2024-01-01", "q'[=] ,z", "c{d}"],
    ids=["non-ascii", "quote", "bracket", "space", "equals", "mixed", "braces"],
)
@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_spec_under_any_folder_name(
    tmp_path: Path, monkeypatch, capsys, folder: str, how: str
) -> None:
    monkeypatch.setenv("TRAINC_NO_CACHE", "1")
    spec = _tree(tmp_path / folder)
    monkeypatch.chdir(tmp_path)
    arg = str(spec) if how == "absolute" else f"{folder}/s.yaml"
    assert main(["lint", arg, "--format", "json"]) == 0, capsys.readouterr().err
    [rec] = json.loads(capsys.readouterr().out)["specs"]
    assert rec["ok"] and rec["path"] == arg
    out = tmp_path / "out" / folder.replace("/", "_")
    assert main(["compile", arg, "parallel.tp=1", "-o", str(out)]) == 0, capsys.readouterr().err
    plan = json.loads((out / "plan.json").read_text())
    assert plan["presets"]["model"] == "model/mine.yaml"
    assert plan["spec"]["parallel"]["tp"] == 1


def test_a_file_named_like_an_override_is_a_spec(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TRAINC_NO_CACHE", "1")
    _tree(tmp_path)
    (tmp_path / "s.yaml").rename(tmp_path / "tp=2.yaml")
    monkeypatch.chdir(tmp_path)
    assert main(["lint", "tp=2.yaml"]) == 0, capsys.readouterr().err


# --- hostile YAML ---------------------------------------------------------------------------

LAUGHS = (
    "a: &a ["
    + ",".join(['"lol"'] * 9)
    + "]\n"
    + "".join(
        f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
)


@pytest.mark.parametrize("where", ["spec", "preset"])
def test_billion_laughs_is_refused_fast(tmp_path: Path, where: str) -> None:
    if where == "spec":
        f = tmp_path / "s.yaml"
        f.write_text("name: x\n" + LAUGHS)
    else:
        (tmp_path / "model").mkdir()
        (tmp_path / "model" / "lol.yaml").write_text(LAUGHS)
        f = tmp_path / "s.yaml"
        f.write_text("defaults:\n  - model: lol\n  - _self_\nname: x\n")
    t0 = time.perf_counter()
    loaded = load_spec(f)
    elapsed = time.perf_counter() - t0
    assert elapsed < 0.5, elapsed
    [d] = loaded.diagnostics
    assert d.rule.id == "TRC000" and "through anchors and aliases" in d.message
    assert d.locations[0].file.endswith("s.yaml" if where == "spec" else "model/lol.yaml")
    assert d.fix == "write the values out instead of nesting aliases"


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(
        "x-common: &c\n  num_nodes: 1\n"
        + SPEC.replace("  - model: mine\n", "  - model: llama2-7b\n").replace(
            "cluster:\n  num_nodes: 1\n", "cluster: *c\n"
        )
    )
    loaded = load_spec(f)
    assert [d.rule.id for d in loaded.diagnostics] == ["TRC002"]  # x-common: unknown, no bomb


@pytest.mark.parametrize(
    ("text", "line", "tag"),
    [
        ("name: x\nmodel: !!python/object:os.system\n  a: 1\n", 2, "!!python/object:os.system"),
        ("name: x\nlaunch:\n  account: !!python/name:os.system ''\n", 3, "!!python/name:os.system"),
        ("name: !!timestamp 2024-01-01\n", 1, "!!timestamp"),
        ("name: x\nlaunch:\n  env: !!set {A: null}\n", 3, "!!set"),
        ("name: !custom x\n", 1, "!custom"),
    ],
)
def test_object_and_unknown_tags_point_at_their_line(
    tmp_path: Path, text: str, line: int, tag: str
) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(text)
    [d] = load_spec(f).diagnostics
    assert d.rule.id == "TRC000" and f"the tag {tag} is not allowed" in d.message
    assert d.locations[0].line == line and "defaults" not in (d.fix or "")
    assert d.fix.startswith("remove the tag")


def test_self_referencing_anchor(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("name: x\na: &a [1, *a]\n")
    [d] = load_spec(f).diagnostics
    assert "refers to itself" in d.message and d.locations[0].line == 2


@pytest.mark.parametrize("top", ["0", "-3"])
def test_plan_top_must_be_positive(top: str, capsys) -> None:
    """`plan --top 0` / `--top -3` were accepted and showed one row; now a usage error."""
    with pytest.raises(SystemExit) as e:
        main(["plan", "examples/llama2-70b-dgx-a100.yaml", "--top", top])
    assert e.value.code == 2
    assert f"argument --top: must be 1 or more, got {int(top)}" in capsys.readouterr().err


def test_lint_a_folder_or_a_quoted_glob(tmp_path, capsys):
    """``trainc lint specs/`` lints the folder's *.yaml / *.yml files (not its preset
    subfolders), ``trainc lint 'specs/*.yaml'`` the matches of a quoted glob, both in sorted
    order; a folder without a spec is still an error (a fresh-user trial: every folder was
    TRC000 "is a directory")."""
    spec = _tree(tmp_path / "specs")
    (spec.parent / "b.yml").write_text(SPEC.replace("name: paths", "name: b"))
    (spec.parent / "notes.txt").write_text("not a spec")
    for arg in (str(spec.parent), str(spec.parent / "*.y*ml")):
        assert main(["lint", arg, "--format", "json"]) == 0
        paths = [r["path"] for r in json.loads(capsys.readouterr().out)["specs"]]
        assert [Path(p).name for p in paths] == ["b.yml", "s.yaml"]  # not model/mine.yaml
    (tmp_path / "empty").mkdir()  # no spec inside: its TRC000, like any unreadable path
    assert main(["lint", str(tmp_path / "empty")]) == 2
    assert "TRC000" in capsys.readouterr().err
    assert main(["lint", str(tmp_path / "empty" / "*.yaml")]) == 2
    assert "TRC000" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["compile", "explain", "plan", "lint"])
def test_usage_names_the_spec_arguments_once(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse writes a nargs="+" metavar twice (``SPEC [KEY=VALUE ...] [SPEC [KEY=VALUE ...]
    ...]``); the usage line names it once."""
    from trainc.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    usage = capsys.readouterr().out.split("\n\n")[0]
    assert usage.count("KEY=VALUE") == 1, usage
    assert " ".join(usage.split()).endswith("[KEY=VALUE ...]"), usage


def test_lint_of_a_pattern_without_a_match_says_no_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A quoted glob that matches nothing is "no file matches", not "does not exist"."""
    from trainc.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["lint", "nomatch*.yaml"]) == 2
    cap = capsys.readouterr()
    out = cap.out + cap.err
    assert f"no file matches the pattern nomatch*.yaml (matched from {tmp_path})" in out
    assert "does not exist" not in out
    assert "fix: check the pattern and the directory it is matched from" in out
    assert main(["lint", "missing.yaml"]) == 2
    cap = capsys.readouterr()
    assert "spec file missing.yaml does not exist" in cap.out + cap.err
