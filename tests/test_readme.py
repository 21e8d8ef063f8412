"""The README's first two commands are what CI runs, and they work."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```bash\n(.*?)\n```", text, flags=re.S)[:2]


def test_ci_runs_the_readme_commands_verbatim():
    cmds = readme_commands()
    assert len(cmds) == 2
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for cmd in cmds:
        assert cmd in ci, f"README command not in .ci/run: {cmd}"
