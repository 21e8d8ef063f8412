"""Safe output (issue 7): atomic writes, no partial OUTDIR after an error or a kill, spec strings
never executed by the generated scripts, secrets never written in clear.

Extends tests/unit/compiler/emit/test_scripts.py (container image/mounts/env/partition
adversarial values) with megatron_lm_path, data_path, save_dir, account and the job name, and an
sbatch stub.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.emit import compile_dict, make_stubs, read_env, read_nul, run_script, write_files
from trainc import cli

REPO = Path(__file__).resolve().parents[3]
SPEC = {
    "defaults": [{"model": "llama3-8b"}, {"cluster": "dgx-h100"}, "_self_"],
    "name": "safe",
    "cluster": {"num_nodes": 2},
    "parallel": {"tp": 2, "pp": 1},
    "training": {"micro_batch_size": 1, "global_batch_size": 16},
    "launch": {"env": {"NCCL_DEBUG": "WARN"}},
}


def _write_spec(tmp: Path, spec: dict = SPEC) -> Path:
    import yaml

    p = tmp / "spec.yaml"
    p.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    return p


def _leftovers(parent: Path, name: str) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(f".{name}."))


# --- atomic write, --force -------------------------------------------------------------------


def test_non_empty_outdir_refused_without_force(tmp_path: Path, capsys) -> None:
    spec, out = _write_spec(tmp_path), tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert cli.main(["compile", str(spec), "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    # --force replaces only a previous trainc output (tests/unit/cli/test_outdir.py)
    assert cli.main(["compile", str(spec), "-o", str(out), "--force"]) == 2
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    (out / "keep.txt").unlink()
    assert cli.main(["compile", str(spec), "-o", str(out)]) == 0
    assert cli.main(["compile", str(spec), "-o", str(out), "--force"]) == 0
    assert (out / "manifest.json").is_file()
    assert _leftovers(tmp_path, "out") == []


def test_error_mid_write_leaves_no_outdir_and_no_temp(tmp_path: Path, monkeypatch) -> None:
    spec = _write_spec(tmp_path)
    real = Path.write_text
    count = {"n": 0}

    def failing(self: Path, *args, **kwargs):
        count["n"] += 1
        if count["n"] == 3:
            raise OSError(28, "No space left on device")
        return real(self, *args, **kwargs)

    for existing in (False, True):
        out = tmp_path / f"out{existing}"
        if existing:  # a previous trainc output (what --force may replace)
            assert cli.main(["compile", str(spec), "-o", str(out), "training.lr=1e-4"]) == 0
            previous = {p.name: p.read_bytes() for p in out.iterdir()}
        count["n"] = 0
        monkeypatch.setattr(Path, "write_text", failing)
        rc = cli.main(["compile", str(spec), "-o", str(out), "--force"])
        monkeypatch.setattr(Path, "write_text", real)
        assert rc == 4  # the environment refused
        if existing:
            assert {p.name: p.read_bytes() for p in out.iterdir()} == previous
        else:
            assert not out.exists()
        assert _leftovers(tmp_path, out.name) == []


_SLOW_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    real = Path.write_text
    n = [0]
    def slow(self, *a, **k):
        r = real(self, *a, **k)
        n[0] += 1
        if n[0] == 2:
            print("WROTE", flush=True)
            time.sleep(60)
        return r
    Path.write_text = slow
    from trainc.cli import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_kill_mid_write_leaves_no_partial_outdir(tmp_path: Path, sig: int) -> None:
    spec, out = _write_spec(tmp_path), tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SLOW_WRITER, "compile", str(spec), "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        line = proc.stdout.readline()
        assert line.strip() == "WROTE", (line, proc.stderr.read() if proc.poll() else "")
        assert _leftovers(tmp_path, "out"), "the write should be under way in a temp folder"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert "Traceback" not in err
    assert not out.exists(), "a partial OUTDIR was left behind"
    if sig == signal.SIGTERM:
        assert _leftovers(tmp_path, "out") == []  # cleaned up by the process itself
    # SIGKILL leaves the temp folder; the next compile of the same OUTDIR sweeps it
    assert cli.main(["compile", str(spec), "-o", str(out)]) == 0
    assert _leftovers(tmp_path, "out") == []
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["files"]) == sorted(
        p.name for p in out.iterdir() if p.name != "manifest.json"
    )


# --- adversarial strings in scripts ----------------------------------------------------------

_SBATCH = r"""#!/usr/bin/env bash
printf '%s\0' "$@" > "$STUB_LOG/sbatch.args"
echo "Submitted batch job 42"
"""

# (${...} would be an OmegaConf interpolation in the YAML spec: $IFS is the shell-only spelling)
EVIL = [
    "$(touch {m})",
    "`touch {m}`",
    "x; touch {m}",
    "x' ; touch {m}; '",
    'x" ; touch {m}; "',
    "$IFS;touch$IFS{m}",
    "$HOME && touch {m}",
    "a b  touch {m}",
]


@pytest.mark.parametrize("value", EVIL)
def test_megatron_lm_strings_stay_literal(tmp_path: Path, value: str) -> None:
    marker = tmp_path / "pwned"
    lit = value.format(m=marker)
    spec = dict(
        SPEC,
        launch={
            "entrypoint": "megatron-lm",
            "megatron_lm_path": lit,
            "data_path": lit,
            "save_dir": lit,
            "partition": lit,
            "account": lit,
            "container_image": lit,
            "container_mounts": [lit],
            "env": {"EVIL": lit},
        },
    )
    res = compile_dict(tmp_path, spec)
    assert res.ok, [d.to_json() for d in res.diagnostics if d.is_error]
    out = write_files(tmp_path / "out", res.files)
    bindir, log = make_stubs(tmp_path)
    sb = bindir / "sbatch"
    sb.write_text(_SBATCH)
    sb.chmod(sb.stat().st_mode | stat.S_IXUSR)
    r = run_script(
        out / "sbatch.sh",
        bindir,
        log,
        out,
        {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_ID": "7", "SLURM_SUBMIT_DIR": str(out)},
    )
    assert r.returncode == 0, r.stderr
    r2 = run_script(out / "torchrun.sh", bindir, log, out)
    assert r2.returncode == 0, r2.stderr
    assert not marker.exists(), "a spec value was executed"
    args = read_nul(log / "torchrun.0.args")
    assert f"{lit}/pretrain_gpt.py" in args
    assert args[args.index("--data-path") + 1] == lit
    assert args[args.index("--save") + 1] == lit
    assert read_env(log / "torchrun.0.env")["EVIL"] == lit
    assert f"--container-image={lit}" in read_nul(log / "srun.args")


def test_unsafe_names_and_env_keys_are_rejected(tmp_path: Path) -> None:
    res = compile_dict(tmp_path, dict(SPEC, name="job$(touch x)"))
    assert "TRC501" in {d.rule.id for d in res.diagnostics if d.is_error} and not res.files
    res = compile_dict(tmp_path, dict(SPEC, launch={"env": {"A;touch x": "1"}}))
    assert "TRC504" in {d.rule.id for d in res.diagnostics if d.is_error} and not res.files


# --- secrets ---------------------------------------------------------------------------------

SECRETS = {
    "WANDB_API_KEY": "wk-0123456789abcdef",
    "HF_TOKEN": "hf_SeCrEt987",
    "DB_PASSWORD": "pa$$w0rd",
    "AWS_SECRET_ACCESS_KEY": "aws/Secret+Key",
    # trial 13: a PASS / PWD name and a URL with a password were written in clear
    "MY_DB_PASS": "pw-LEAKME-789",
    "GIT_PWD": "pwd-LEAK",
    "S3_URL": "s3://AKIA:sk-LEAK@b/x",
}


def test_secrets_are_never_written_in_clear(tmp_path: Path) -> None:
    spec = _write_spec(
        tmp_path,
        dict(
            SPEC,
            launch={
                "env": {**SECRETS, "NCCL_DEBUG": "WARN"},
                "container_image": "ghcr.io/acme/t:1",
            },
        ),
    )
    out = tmp_path / "out"
    assert cli.main(["compile", str(spec), "-o", str(out)]) == 0
    for p in out.iterdir():
        text = p.read_text(encoding="utf-8")
        for value in SECRETS.values():
            assert value not in text, f"{value!r} written in clear to {p.name}"
    plan = json.loads((out / "plan.json").read_text())
    env = plan["spec"]["launch"]["env"]
    assert {k: env[k] for k in SECRETS} == dict.fromkeys(SECRETS, "***")
    assert env["NCCL_DEBUG"] == "WARN"
    assert plan["derived"]["secret_env"] == sorted(SECRETS)
    warned = {d["key"] for d in plan["diagnostics"] if d["rule"] == "TRC510"}
    assert warned == {f"launch.env.{k}" for k in SECRETS}
    assert all(d["severity"] == "warning" for d in plan["diagnostics"] if d["rule"] == "TRC510")
    for name in ("pytorchjob.yaml", "trainjob.yaml"):
        job = (out / name).read_text()
        assert "secretKeyRef" in job and "safe-secrets" in job, name
        assert "***" not in job, name
    # the scripts take the values from the submitting environment
    bindir, log = make_stubs(tmp_path)
    r = run_script(out / "torchrun.sh", bindir, log, out, SECRETS)
    assert r.returncode == 0, r.stderr
    seen = read_env(log / "torchrun.0.env")
    assert {k: seen[k] for k in SECRETS} == SECRETS
    (log / "torchrun.0.env").unlink()
    r = run_script(
        out / "torchrun.sh", bindir, log, out, {k: v for k, v in SECRETS.items() if k != "HF_TOKEN"}
    )
    assert r.returncode != 0 and "set HF_TOKEN in the environment" in r.stderr
    assert not (log / "torchrun.0.env").exists(), "torchrun started without the secret"


@pytest.mark.parametrize(
    "env",
    [
        "    HF_TOKEN: hf_SeCrEt987\n    NCCL_DEBUG: [INFO, WARN]\n",  # TRC001 shows the mapping
        '    HF_TOKEN: "hf_SeCrEt987\\0x"\n',  # TRC511: a control character
        "    HF_TOKEN: 123456789\n    NCCL_DEBUG: 2.5x\n    X: [1]\n",  # a number, and TRC001
    ],
)
def test_diagnostics_never_show_a_secret_value(tmp_path: Path, capsys, env: str) -> None:
    """Diagnostics are printed, written as JSON / SARIF and posted as CI annotations: a secret
    launch.env value appears in none of them (trial 13: TRC001 printed the whole env mapping,
    TRC511 the value)."""
    base = _write_spec(tmp_path, {k: v for k, v in SPEC.items() if k != "launch"})
    spec = tmp_path / "s.yaml"
    spec.write_text(base.read_text() + "launch:\n  env:\n" + env)
    for fmt in ("text", "json", "github", "sarif"):
        assert cli.main(["lint", str(spec), "--format", fmt]) == 2
        cap = capsys.readouterr()
        text = cap.out + cap.err
        assert "hf_SeCrEt987" not in text and "123456789" not in text, (fmt, text)
        assert "***" in text or "not shown" in text, (fmt, text)


def test_compile_output_is_identical_across_hash_seeds_and_caches(tmp_path: Path) -> None:
    """Every golden case and example compiled by two processes with different PYTHONHASHSEED,
    one with the preset cache off and one with a cold cache folder: identical bytes."""
    cases = sorted((REPO / "tests" / "golden" / "cases").glob("*/spec.yaml"))
    cases += sorted((REPO / "examples").glob("*.yaml"))
    driver = textwrap.dedent("""
        import sys
        from pathlib import Path
        from trainc.cli import main
        out = Path(sys.argv[1])
        for i, spec in enumerate(sys.argv[2:]):
            rc = main(["compile", spec, "-o", str(out / str(i)), "--format", "json"])
            assert rc == 0, (spec, rc)
    """)
    trees = []
    for seed, extra in (
        ("0", {"TRAINC_NO_CACHE": "1"}),
        ("4242", {"XDG_CACHE_HOME": str(tmp_path / "cache")}),
    ):
        out = tmp_path / f"out{seed}"
        env = {k: v for k, v in os.environ.items() if k != "TRAINC_NO_CACHE"}
        env |= {"PYTHONHASHSEED": seed, **extra}
        rels = [str(c.relative_to(REPO)) for c in cases]
        r = subprocess.run(
            [sys.executable, "-c", driver, str(out), *rels],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        trees.append(
            {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
        )
    assert trees[0].keys() == trees[1].keys()
    differ = [k for k in trees[0] if trees[0][k] != trees[1][k]]
    assert not differ, differ
    assert sum(k.endswith("manifest.json") for k in trees[0]) == len(cases)
