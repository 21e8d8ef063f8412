"""What ``trainc compile -o OUTDIR [--force]`` may write and replace (issue 12, data loss).

``--force`` replaces only a previous trainc output (a folder whose manifest.json lists everything
in it, unchanged). The working folder, the spec and their ancestors, non-directories, symbolic
links and '.'/'..' names are refused with exit 2 and left untouched, with or without --force, and
no temporary ``.NAME.tmp-*`` / ``.NAME.old-*`` folder is left behind.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from trainc.cli import main

SPEC = {
    "defaults": [{"model": "llama3-8b"}, {"cluster": "dgx-h100"}, "_self_"],
    "name": "safe",
    "cluster": {"num_nodes": 1},
    "parallel": {"tp": 2, "pp": 1},
    "training": {"micro_batch_size": 1, "global_batch_size": 16},
}


def _spec(folder: Path, **changes: object) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / "s.yaml"
    p.write_text(yaml.safe_dump({**SPEC, **changes}, sort_keys=False), encoding="utf-8")
    return p


def _tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root`` (files by content, others by kind), for before/after checks."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link->" + os.readlink(p)
        elif p.is_fifo():
            out[rel] = "fifo"
        elif p.is_file():
            out[rel] = p.read_bytes()
        else:
            out[rel] = "dir"
    return out


def _leftovers(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob(".*") if ".tmp-" in p.name or ".old-" in p.name
    )


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], root: Path) -> str:
    before = _tree(root)
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "Traceback" not in err
    assert _tree(root) == before, "a refused OUTDIR changed files"
    assert _leftovers(root) == []
    return err


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("how", ["dot", "absolute", "dot-slash", "trailing-slash"])
def test_working_folder_is_never_replaced(
    tmp_path: Path, monkeypatch, capsys, force: bool, how: str
) -> None:
    spec = _spec(tmp_path / "w")
    (tmp_path / "w" / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path / "w")
    out = {
        "dot": ".",
        "absolute": str(tmp_path / "w"),
        "dot-slash": "./",
        "trailing-slash": str(tmp_path / "w") + "/",
    }[how]
    err = _refused(
        capsys, ["compile", str(spec), "-o", out, *(["--force"] if force else [])], tmp_path
    )
    assert "--force replaces only a folder written by trainc compile" in err or "'.'" in err


@pytest.mark.parametrize("force", [False, True])
def test_ancestor_of_cwd_is_refused(tmp_path: Path, monkeypatch, capsys, force: bool) -> None:
    spec = _spec(tmp_path / "specs")
    (tmp_path / "a" / "b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a" / "b")
    err = _refused(
        capsys,
        ["compile", str(spec), "-o", str(tmp_path / "a"), *(["--force"] if force else [])],
        tmp_path,
    )
    assert "holds the working folder" in err


@pytest.mark.parametrize("target", ["spec-folder", "grandparent", "spec-file"])
def test_spec_and_its_folders_are_refused(tmp_path: Path, monkeypatch, capsys, target: str) -> None:
    spec = _spec(tmp_path / "proj" / "runs")
    monkeypatch.chdir(tmp_path)  # elsewhere: the spec is protected on its own
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    out = {"spec-folder": spec.parent, "grandparent": tmp_path / "proj", "spec-file": spec}[target]
    err = _refused(capsys, ["compile", str(spec), "-o", str(out), "--force"], tmp_path)
    assert "the spec" in err or "not a folder" in err
    assert spec.is_file()


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("kind", ["file", "fifo", "link-to-file", "link-to-dir", "dangling-link"])
def test_non_directories_and_links_are_refused(
    tmp_path: Path, monkeypatch, capsys, force: bool, kind: str
) -> None:
    spec = _spec(tmp_path / "src")
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "out"
    if kind == "file":
        target.write_text("data")
    elif kind == "fifo":
        os.mkfifo(target)  # opening it for writing would block: it must not even be opened
    elif kind == "link-to-file":
        (tmp_path / "f").write_text("data")
        target.symlink_to(tmp_path / "f")
    elif kind == "link-to-dir":  # even to a previous trainc output
        assert main(["compile", str(spec), "-o", str(tmp_path / "real")]) == 0
        target.symlink_to(tmp_path / "real")
    else:
        target.symlink_to(tmp_path / "nowhere")
    capsys.readouterr()
    err = _refused(
        capsys, ["compile", str(spec), "-o", "out", *(["--force"] if force else [])], tmp_path
    )
    assert (
        ("symbolic link" in err)
        if kind.endswith("link") or "link" in kind
        else ("not a folder" in err)
    )


@pytest.mark.parametrize("out", [".", "..", "x/.", "x/..", "x/../.."])
def test_dot_names_are_refused_without_old_folders(
    tmp_path: Path, monkeypatch, capsys, out: str
) -> None:
    spec = _spec(tmp_path / "w" / "src")
    (tmp_path / "w" / "x").mkdir()
    monkeypatch.chdir(tmp_path / "w")
    err = _refused(capsys, ["compile", str(spec), "-o", out, "--force"], tmp_path)
    assert "'.' or '..'" in err


def test_three_dots_is_an_ordinary_folder_name(tmp_path: Path, monkeypatch) -> None:
    spec = _spec(tmp_path / "src")
    monkeypatch.chdir(tmp_path)
    assert main(["compile", str(spec), "-o", "..."]) == 0
    assert (tmp_path / "..." / "manifest.json").is_file()


@pytest.mark.parametrize("name", [".", "..", "...", "...."])
def test_job_names_of_only_dots_are_rejected(
    tmp_path: Path, monkeypatch, capsys, name: str
) -> None:
    spec = _spec(tmp_path / "src", name=name)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "other-job.txt").write_text("keep")
    monkeypatch.chdir(tmp_path)
    rc = main(["compile", str(spec), "--force", "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 2
    [d] = [d for d in report["specs"][0]["diagnostics"] if d["rule"] == "TRC501"]
    assert d["key"] == "name" and d["edits"] == {"name": "trainc-job"}
    assert _tree(tmp_path / "out") == {"other-job.txt": b"keep"}
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "extra", ["user-file", "checkpoints", "edited", "no-manifest", "foreign-manifest", "slurm-log"]
)
def test_force_refuses_a_folder_with_anything_unlisted(
    tmp_path: Path, monkeypatch, capsys, extra: str
) -> None:
    spec = _spec(tmp_path / "src")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    if extra in ("no-manifest", "foreign-manifest"):
        out.mkdir()
        (out / "plan.json").write_text("{}")
        if extra == "foreign-manifest":
            (out / "manifest.json").write_text('{"name": "some other tool"}')
    else:
        assert main(["compile", str(spec), "-o", str(out)]) == 0
        if extra == "user-file":
            (out / "notes.md").write_text("my notes")
        elif extra == "checkpoints":
            (out / "checkpoints" / "iter_0000010").mkdir(parents=True)
            (out / "checkpoints" / "latest").write_text("10")
        elif extra == "edited":
            with open(out / "sbatch.sh", "a", encoding="utf-8") as f:
                f.write("# my change\n")
        else:
            (out / "safe-123.out").write_text("job log")
    capsys.readouterr()
    err = _refused(
        capsys, ["compile", str(spec), "parallel.tp=4", "-o", "out", "--force"], tmp_path
    )
    assert "--force refused" in err and "--force replaces only a folder written by trainc" in err
    want = {
        "user-file": "notes.md",
        "checkpoints": "checkpoints/",
        "edited": "sbatch.sh",
        "no-manifest": "no manifest.json",
        "foreign-manifest": "did not write",
        "slurm-log": "safe-123.out",
    }[extra]
    assert want in err


@pytest.mark.parametrize("how", ["relative", "absolute"])
def test_force_replaces_a_previous_trainc_output(
    tmp_path: Path, monkeypatch, capsys, how: str
) -> None:
    spec = _spec(tmp_path / "src")
    monkeypatch.chdir(tmp_path)
    out = "out/job" if how == "relative" else str(tmp_path / "out" / "job")
    assert main(["compile", str(spec), "-o", out]) == 0
    first = (tmp_path / "out" / "job" / "megatron_args.txt").read_text()
    assert main(["compile", str(spec), "parallel.tp=4", "-o", out]) == 2  # no --force
    assert main(["compile", str(spec), "parallel.tp=4", "-o", out, "--force"]) == 0
    second = (tmp_path / "out" / "job" / "megatron_args.txt").read_text()
    assert "--tensor-model-parallel-size 2" in first and "--tensor-model-parallel-size 4" in second
    manifest = json.loads((tmp_path / "out" / "job" / "manifest.json").read_text())
    assert sorted(manifest["files"]) == sorted(
        p.name for p in (tmp_path / "out" / "job").iterdir() if p.name != "manifest.json"
    )
    assert _leftovers(tmp_path) == []


def test_an_empty_folder_is_written_without_force(tmp_path: Path, monkeypatch) -> None:
    spec = _spec(tmp_path / "src")
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["compile", str(spec), "-o", "out"]) == 0
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_same_spec_tree_in_two_checkouts_gives_identical_bytes(tmp_path: Path, monkeypatch) -> None:
    """A preset next to the spec, a diagnostic located in it, compiled by relative and by
    absolute paths from two copies of the tree: every artifact is byte-identical, and no path of
    the checkout appears in any of them."""
    tree = tmp_path / "a" / "proj"
    (tree / "model").mkdir(parents=True)
    (tree / "model" / "mine.yaml").write_text(
        "num_layers: 8\nhidden_size: 512\nnum_attention_heads: 8\nvocab_size: 32001\n"
        "seq_length: 1024\n"
    )
    (tree / "s.yaml").write_text(
        "defaults:\n  - model: mine\n  - cluster: dgx-h100\n  - _self_\nname: twin\n"
        "cluster:\n  num_nodes: 1\nparallel:\n  tp: 2\ntraining:\n  global_batch_size: 16\n"
    )
    shutil.copytree(tmp_path / "a", tmp_path / "b checkout")
    trees = []
    for root in (tmp_path / "a", tmp_path / "b checkout"):
        for how in ("relative", "absolute"):
            monkeypatch.chdir(root)
            spec = "proj/s.yaml" if how == "relative" else str(root / "proj" / "s.yaml")
            out = root / f"out-{how}"
            assert main(["compile", spec, "-o", str(out)]) == 0
            trees.append({p.name: p.read_bytes() for p in out.iterdir()})
    assert all(t == trees[0] for t in trees[1:])
    plan = json.loads(trees[0]["plan.json"])
    assert plan["presets"] == {
        "cluster": "trainc/conf/cluster/dgx-h100.yaml",
        "model": "model/mine.yaml",
    }
    assert {d.get("file") for d in plan["diagnostics"]} >= {"model/mine.yaml"}
    for name, data in trees[0].items():
        assert str(tmp_path).encode() not in data, name


@pytest.mark.parametrize("fail", ["move-old-away", "move-new-in"])
def test_a_failed_swap_leaves_no_old_folder_and_the_previous_output(
    tmp_path: Path, monkeypatch, capsys, fail: str
) -> None:
    """The rename of the previous OUTDIR aside (EBUSY on a mount point) or of the new one into
    place fails: exit 4, the previous output as it was, no .out.old-* / .out.tmp-* folder."""
    import errno

    spec = _spec(tmp_path / "src")
    monkeypatch.chdir(tmp_path)
    assert main(["compile", str(spec), "-o", "out"]) == 0
    before = _tree(tmp_path / "out")
    real = os.rename

    def rename(src, dst):
        moving_old = Path(dst).name == "x" and ".old-" in Path(dst).parent.name
        moving_new = ".tmp-" in Path(src).name
        if (fail == "move-old-away" and moving_old) or (fail == "move-new-in" and moving_new):
            raise OSError(errno.EBUSY, "Device or resource busy")
        return real(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    capsys.readouterr()
    rc = main(["compile", str(spec), "parallel.tp=4", "-o", "out", "--force"])
    monkeypatch.setattr(os, "rename", real)
    err = capsys.readouterr().err
    assert rc == 4 and "Device or resource busy" in err and "Traceback" not in err
    assert _tree(tmp_path / "out") == before
    assert _leftovers(tmp_path) == []
