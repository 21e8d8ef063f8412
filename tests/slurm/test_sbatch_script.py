"""The generated sbatch.sh, read as Slurm and bash read it (no cluster needed).

The classic failures (issue #5): #SBATCH lines after the first command (sbatch silently ignores
them), shell expansions in #SBATCH lines (never expanded), a torchrun per GPU task instead of one
task per node, every node computing node rank 0 (SLURM_NODEID expanded once by the batch shell),
a rendezvous on localhost or on the submit host, the environment not reaching srun, no signal
before the time limit. Run over every example, every model preset and every golden case.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.support.slurm import ROOT, SPECS
from trainc.compiler.pipeline import compile_spec

# golden cases that expect a generated sbatch.sh (a case of a rejected spec has none)
GOLDEN = [
    p
    for p in ROOT.glob("tests/golden/cases/*/spec.yaml")
    if (p.parent / "expected" / "sbatch.sh").is_file()
]
SPEC_FILES = sorted([*ROOT.glob("examples/*.yaml"), *SPECS.glob("*.yaml"), *GOLDEN])


def _id(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.fixture(scope="module", params=SPEC_FILES, ids=_id)
def compiled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    result = compile_spec(request.param)
    assert result.ok, [d.message for d in result.diagnostics if d.is_error]
    assert "sbatch.sh" in result.files and "torchrun.sh" in result.files
    out = tmp_path_factory.mktemp("compiled")
    for name in ("sbatch.sh", "torchrun.sh"):
        (out / name).write_text(result.files[name])
    return result, out


def _commands(text: str) -> list[str]:
    """Logical command lines (continuations joined, comments and blank lines dropped)."""
    joined = re.sub(r"\\\n", " ", text)
    return [
        ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.lstrip().startswith("#")
    ]


def _directives(text: str) -> dict[str, str]:
    opts: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH"):
            for word in shlex.split(line[len("#SBATCH") :]):
                key, _, value = word.partition("=")
                opts[key] = value
    return opts


def test_directives_come_first_and_are_literal(compiled):
    result, _ = compiled
    lines = result.files["sbatch.sh"].splitlines()
    assert lines[0].startswith("#!"), "sbatch needs a #! first line"
    first_cmd = next(
        i for i, ln in enumerate(lines) if ln.strip() and not ln.lstrip().startswith("#")
    )
    late = [ln for ln in lines[first_cmd:] if ln.lstrip().startswith("#SBATCH")]
    assert not late, f"#SBATCH after the first command are ignored by sbatch: {late}"
    for line in lines[:first_cmd]:
        if line.startswith("#SBATCH"):
            assert "$" not in line and "`" not in line, f"never expanded by sbatch: {line}"
            assert line.startswith("#SBATCH --"), line


def test_one_task_per_node_and_a_signal_before_the_limit(compiled):
    result, _ = compiled
    plan, text = result.plan, result.files["sbatch.sh"]
    opts = _directives(text)
    assert opts["--nodes"] == str(plan["spec"]["cluster"]["num_nodes"])
    assert opts["--ntasks-per-node"] == "1", "one srun task per node, each running torchrun"
    assert re.fullmatch(r"(B:)?(USR1|USR2|TERM|INT|URG)@\d+", opts.get("--signal", "")), opts
    assert opts["--time"] == plan["spec"]["launch"]["time_limit"]
    sruns = [c for c in _commands(text) if re.match(r"(exec\s+)?srun\b", c)]
    assert len(sruns) == 1, sruns
    srun = sruns[0]
    assert "--ntasks-per-node=1" in srun and f"--nodes={opts['--nodes']}" in srun
    assert "--export=NONE" not in srun and "--export=ALL" in srun, "the environment reaches srun"
    assert "--kill-on-bad-exit=1" in srun, "a failed node must end the job, not leave peers hanging"
    assert "torchrun.sh" in srun


def test_rendezvous_host_and_node_rank_come_from_slurm_per_task(compiled):
    result, _ = compiled
    text, tr = result.files["sbatch.sh"], result.files["torchrun.sh"]
    body = "\n".join(_commands(text))
    assert re.search(r'scontrol show hostnames "?\$\{?SLURM_JOB_NODELIST', body), (
        "the rendezvous host is the first host of the allocation"
    )
    master = re.findall(r"MASTER_ADDR=(\S+)", body)
    assert master and all("TRAINC_HOSTS[0]" in m or "head" in m for m in master), master
    for bad in (
        "localhost",
        "127.0.0.1",
        "SLURM_LAUNCH_NODE_IPADDR",
        "SLURM_SUBMIT_HOST",
        "$(hostname",
    ):
        assert bad not in body, f"rendezvous must not use {bad} (BC-057, BC-059)"
    # SLURM_NODEID/SLURM_PROCID expanded by the batch shell are the same on every node
    for var in ("SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID"):
        assert var not in body, f"sbatch.sh expands {var} once for all nodes"
    assert "SLURM_NODEID" in tr, "torchrun.sh takes the node rank from its own srun task"


def test_spec_environment_is_exported(compiled):
    result, _ = compiled
    env = result.plan["spec"]["launch"]["env"] or {}
    scripts = result.files["sbatch.sh"] + result.files["torchrun.sh"]
    for key in env:
        assert re.search(rf"^export {re.escape(key)}=", scripts, re.M), key


def test_bash_parses_both_scripts(compiled):
    _, out = compiled
    for name in ("sbatch.sh", "torchrun.sh"):
        proc = subprocess.run(
            ["bash", "-n", str(out / name)], capture_output=True, text=True, check=False
        )
        assert proc.returncode == 0, f"{name}: {proc.stderr}"


def test_shellcheck_clean(compiled, shellcheck):
    _, out = compiled
    proc = subprocess.run(
        [shellcheck, "-s", "bash", str(out / "sbatch.sh"), str(out / "torchrun.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
