"""Every `trainc ...` command shown in docs/ecosystem.md runs and exits 0."""

import re
import shlex
from pathlib import Path

import pytest

from trainc.cli import main

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "ecosystem.md"


def _commands():
    blocks = re.findall(r"```bash\n(.*?)```", DOC.read_text(), flags=re.S)
    return [
        line.split("#")[0].strip()
        for block in blocks
        for line in block.splitlines()
        if line.startswith("trainc ")
    ]


def test_the_doc_shows_commands():
    assert len(_commands()) >= 4


@pytest.mark.parametrize("command", _commands())
def test_documented_command_runs(command, tmp_path, monkeypatch, capsys):
    for name in ("examples", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(command)[1:]
    if ">" in argv:
        argv = argv[: argv.index(">")]
    assert main(argv) == 0, capsys.readouterr().err
