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


def test_overrides_may_follow_options(tmp_path):
    """`trainc compile SPEC -o OUT --force parallel.vpp=4` applies the override."""
    import json
    import subprocess
    import sys

    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "trainc",
        "compile",
        str(ROOT / "examples" / "llama2-70b-dgx-a100.yaml"),
        "-o",
        str(out),
        "--force",
        "parallel.vpp=4",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out / "plan.json").read_text())["derived"]["vpp"] == 4
    bad = subprocess.run([*cmd[:-1], "--bogus"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--bogus" in bad.stderr


def test_readme_lists_every_preset_and_gpu():
    """README's preset lists name every bundled model and cluster preset and every
    ``cluster.gpu`` value (the schema's enum), in the schema's order for the GPUs."""
    from trainc.schemas.enums import Gpu

    text = (ROOT / "README.md").read_text(encoding="utf-8")

    def listed(label: str) -> list[str]:
        m = re.search(rf"^- {re.escape(label)}:(.*?)(?=\n- |\n\n)", text, flags=re.S | re.M)
        assert m, label
        return [w.strip() for w in m.group(1).replace("\n", " ").split(",")]

    assert listed("GPUs (`cluster.gpu`)") == [g.value for g in Gpu]
    for label, folder in (("models", "model"), ("clusters", "cluster")):
        assert sorted(listed(label)) == sorted(
            p.stem for p in (ROOT / "trainc" / "conf" / folder).glob("*.yaml")
        ), label
