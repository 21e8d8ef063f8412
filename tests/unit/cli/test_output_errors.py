"""Output that cannot be written is the environment refusing (exit 4, one line, no traceback),
not a bug in trainc (issue 12): stdout on a full device, an output file in a folder that does
not exist or under a file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SPEC = REPO / "examples" / "llama2-70b-dgx-a100.yaml"
HF = """{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 512,
"intermediate_size": 1376,
"num_attention_heads": 8, "num_hidden_layers": 4, "num_key_value_heads": 8,
"vocab_size": 32000, "max_position_embeddings": 2048, "hidden_act": "silu",
"rms_norm_eps": 1e-5, "tie_word_embeddings": false}"""

needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


def _trainc(args: list[str], stdout=subprocess.PIPE, cwd: Path = REPO) -> tuple[int, str]:
    r = subprocess.run(
        [sys.executable, "-m", "trainc", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    return r.returncode, r.stderr


@needs_dev_full
@pytest.mark.parametrize(
    "args",
    [
        ["schema"],
        ["schema", "--section", "model"],
        ["lint", str(SPEC), "--format", "json"],
        ["lint", str(SPEC)],
        ["lint", str(SPEC), "--format", "sarif"],
        ["compile", str(SPEC), "--format", "json", "-o", "{tmp}/o"],
        ["explain", str(SPEC)],
        ["diff", str(SPEC), str(SPEC), "parallel.tp=4", "--format", "json"],
    ],
    ids=[
        "schema",
        "schema-section",
        "lint-json",
        "lint-text",
        "lint-sarif",
        "compile-json",
        "explain",
        "diff-json",
    ],
)
def test_stdout_on_a_full_device_is_exit_4(tmp_path: Path, args: list[str]) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    with open("/dev/full", "w") as full:
        rc, err = _trainc(args, stdout=full)
    assert rc == 4, err
    assert "Traceback" not in err and "Exception ignored" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("trainc ")]
    assert lines and "No space left on device" in lines[-1], err


@pytest.mark.parametrize("where", ["missing-folder", "under-a-file"])
def test_plan_apply_to_an_unwritable_path_is_exit_4(tmp_path: Path, where: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    target = {
        "missing-folder": tmp_path / "no" / "such" / "x.yaml",
        "under-a-file": tmp_path / "file" / "x.yaml",
        "a-folder": tmp_path / "dir",
    }[where]
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "defaults:\n  - model: llama2-7b\n  - cluster: dgx-h100\n  - _self_\n"
        "cluster:\n  num_nodes: 1\ntraining:\n  global_batch_size: 32\n"
    )
    rc, err = _trainc(["plan", str(spec), "--top", "1", "--apply", str(target)])
    assert rc == 4, err
    assert "Traceback" not in err
    assert f"trainc plan: cannot write {target}" in err


_PLAN_SPEC = (
    "defaults:\n  - model: llama2-7b\n  - cluster: dgx-h100\n  - _self_\n"
    "cluster:\n  num_nodes: 1\ntraining:\n  global_batch_size: 32\n"
)


@pytest.mark.parametrize("where", ["a-folder", "a-notes-file", "another-spec", "a-symlink"])
def test_plan_apply_never_replaces_what_is_not_the_spec(tmp_path: Path, where: str) -> None:
    """--apply edits the spec itself or writes a new file; an existing other file (a user's
    notes, another spec, an artifact) is replaced only with --force, a folder or link never."""
    spec = tmp_path / "s.yaml"
    spec.write_text(_PLAN_SPEC)
    (tmp_path / "dir").mkdir()
    (tmp_path / "notes.txt").write_text("mine\n")
    (tmp_path / "other.yaml").write_text("name: other\n")
    (tmp_path / "link.yaml").symlink_to(tmp_path / "notes.txt")
    target = {
        "a-folder": tmp_path / "dir",
        "a-notes-file": tmp_path / "notes.txt",
        "another-spec": tmp_path / "other.yaml",
        "a-symlink": tmp_path / "link.yaml",
    }[where]
    before = target.read_text() if target.is_file() else None
    rc, err = _trainc(["plan", str(spec), "--top", "1", "--apply", str(target)])
    assert rc == 2 and "Traceback" not in err, err
    assert "--apply" in err
    assert (target.read_text() if target.is_file() else None) == before
    if where in ("a-notes-file", "another-spec"):
        assert "--force" in err
        rc, err = _trainc(["plan", str(spec), "--top", "1", "--apply", str(target), "--force"])
        assert rc == 0, err
        assert "num_nodes" in target.read_text()


def test_plan_apply_edits_the_spec_in_place_without_force(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("# my comment\n" + _PLAN_SPEC)
    rc, err = _trainc(["plan", str(spec), "--top", "1", "--apply", str(spec)])
    assert rc == 0, err
    assert spec.read_text().startswith("# my comment\n")


def test_import_hf_output_under_a_file_is_exit_4(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(HF)
    (tmp_path / "file").write_text("x")
    rc, err = _trainc(
        [
            "import-hf",
            str(tmp_path / "config.json"),
            "-o",
            str(tmp_path / "file" / "m.yaml"),
            "--force",
        ]
    )
    assert rc == 4, err
    assert "Traceback" not in err and "trainc import-hf: cannot write" in err


def test_error_classes_carry_their_exit_code() -> None:
    from trainc.cli._common import OutputError
    from trainc.compiler.support.write import OutdirNotEmpty, OutdirRefused
    from trainc.errors import InternalError, LaunchError

    assert (
        InternalError().exit_code,
        LaunchError().exit_code,
        OutputError().exit_code,
        OutdirRefused().exit_code,
        OutdirNotEmpty().exit_code,
    ) == (3, 4, 4, 2, 2)


def test_import_hf_refuses_an_existing_file_without_force(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(HF)
    target = tmp_path / "m.yaml"
    target.write_text("mine\n")
    rc, err = _trainc(["import-hf", str(tmp_path / "config.json"), "-o", str(target)])
    assert rc == 2 and "pass --force" in err and target.read_text() == "mine\n"
    rc, err = _trainc(["import-hf", str(tmp_path / "config.json"), "-o", str(target), "--force"])
    assert rc == 0, err
    assert "hidden_size: 512" in target.read_text()


@pytest.mark.parametrize("kind", ["folder", "fifo", "link"])
def test_import_hf_never_replaces_a_non_file(tmp_path: Path, kind: str) -> None:
    (tmp_path / "config.json").write_text(HF)
    target = tmp_path / "m.yaml"
    if kind == "folder":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        (tmp_path / "real.yaml").write_text("mine\n")
        target.symlink_to(tmp_path / "real.yaml")
    rc, err = _trainc(["import-hf", str(tmp_path / "config.json"), "-o", str(target), "--force"])
    assert rc == 2 and "not a plain file" in err, err
    if kind == "link":
        assert (tmp_path / "real.yaml").read_text() == "mine\n"


@pytest.mark.parametrize(
    "args",
    [["compile", str(SPEC), "-o", "{tmp}/o"], ["lint", str(SPEC)], ["--help"]],
    ids=["compile", "lint", "help"],
)
def test_stdout_closed_is_exit_4_and_nothing_written(tmp_path: Path, args: list[str]) -> None:
    """``trainc ... >&-`` (file descriptor 1 closed: Python's sys.stdout is None) is the
    environment refusing, before anything reaches the disk -- it was an AttributeError traceback
    (exit 3) after compile had written its folder."""
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    r = subprocess.run(
        [sys.executable, "-m", "trainc", *args],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        timeout=300,
        close_fds=True,
        preexec_fn=lambda: os.close(1),
    )
    assert r.returncode == 4, r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.strip() == (
        "trainc: standard output is closed; run trainc with stdout open "
        "(redirect it to a file or /dev/null)"
    )
    assert not (tmp_path / "o").exists()


def test_a_rich_table_piped_to_head_exits_141_quietly(tmp_path) -> None:
    """``trainc explain SPEC | head -1``: the reader goes away, the exit is 141 (as a Unix tool
    ended by SIGPIPE), not Rich's 1, with no traceback."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    cmd = (
        f"{sys.executable} -m trainc explain examples/llama2-70b-dgx-a100.yaml --ranks 256 "
        f"2>{tmp_path / 'err.txt'} | head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}}"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    r = subprocess.run(
        ["bash", "-c", cmd], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    err = (tmp_path / "err.txt").read_text()
    assert r.stdout.strip() == "141"
    assert "Traceback" not in err and "Exception ignored" not in err
