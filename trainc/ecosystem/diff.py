"""``trainc diff A B [KEY=VALUE ...]``: what differs between two specs after resolution.

A or B may also be a compiled output (an OUTDIR, or its plan.json): it stands for the spec it
was compiled from (plan.json ``spec_as_written``: what the user set, so an override of B's tp
re-derives etp, sequence parallelism and TP overlap as compiling the spec file would; a
plan.json from before trainc recorded it stands for its resolved ``spec``). Both specs are
compiled (nothing is written); the resolved spec keys (``model.num_layers``), the presets
chosen, every derived value (``derived.dp``, ``derived.num_microbatches``, ...) and every
estimate (``estimates.memory_bytes.total``, ``estimates.step_time_seconds``, ...) are compared,
plus the set of rule ids reported. A is the baseline; the overrides apply to B only, so
``trainc diff s.yaml s.yaml parallel.tp=4`` shows what changing one key does.

It also says whether B can resume from A's checkpoints (:func:`resume_verdict`: the same
comparison as the ``resume.saved`` rules TRC533-TRC538, A's layout as the saved one).

Exit codes: 0 when both specs compile (whether or not they differ), 2 when either has an error
(the diff of what could be resolved is still shown).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

#: Rows always shown first (when either plan has them), differing or not.
HEADLINE = (
    "derived.world_size",
    "derived.dp",
    "derived.expert_dp",
    "derived.num_microbatches",
    "estimates.memory_bytes.total",
    "estimates.pipeline_bubble_fraction",
    "estimates.step_time_seconds",
    "estimates.tokens_per_second",
    "estimates.mfu",
)
_SKIP = frozenset(
    {"trainc_version", "target_versions", "spec_hash", "diagnostics", "spec_as_written"}
)
_FREE_MAPS = frozenset({"launch.env."})
#: Sections computed by trainc (compared at the shown precision), not written by the user.
_COMPUTED = ("derived.", "estimates.")
#: Longest list / mapping shown inline in the text table (``--format json`` has them whole).
_MAX_INLINE = 48


def flatten(plan: dict[str, Any]) -> dict[str, Any]:
    """The comparable values of a plan as dotted keys: spec keys without the ``spec.`` prefix,
    then ``presets.*``, ``derived.*``, ``estimates.*`` (lists and free mappings stay whole), and
    ``diagnostics`` as the sorted rule ids."""
    out: dict[str, Any] = {}

    def walk(value: Any, prefix: str) -> None:
        if isinstance(value, dict) and prefix not in _FREE_MAPS:
            for k, v in value.items():  # an empty section adds no rows
                walk(v, f"{prefix}{k}.")
        elif _is_argv(value):  # a command line (engines.megatron_lm): one row per flag
            for flag, *rest in value:
                out[f"{prefix}{flag}"] = " ".join(rest) if rest else True
        else:
            out[prefix[:-1]] = value

    walk(plan.get("spec", {}), "")
    for section in sorted(plan):
        if section != "spec" and section not in _SKIP:
            walk(plan[section], f"{section}.")
    out["diagnostics"] = sorted({d["rule"] for d in plan.get("diagnostics", [])})
    return out


def _is_argv(value: Any) -> bool:
    """A list of ``[flag, value...]`` / ``[flag]`` items with distinct ``--`` flags."""
    if not isinstance(value, list) or not value:
        return False
    ok = all(
        isinstance(i, list) and i and isinstance(i[0], str) and i[0].startswith("--") for i in value
    )
    return ok and len({i[0] for i in value}) == len(value)


def _echo(key: str, flat: dict[str, Any]) -> bool:
    """True when ``derived.X`` only repeats the resolved ``parallel.X``."""
    section, _, name = key.partition(".")
    twin = f"parallel.{name}"
    return section == "derived" and twin in flat and flat[twin] == flat.get(key)


def compare(a: dict[str, Any], b: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``(differences, unchanged)`` between two plans: each difference is ``{"key", "a", "b"}``
    (a missing side is None), in plan order (spec, presets, derived, estimates, diagnostics).

    A derived value or estimate is a difference only when it differs as shown (:func:`fmt_value`:
    ``11.2201 GiB`` and ``11.2203 GiB`` are both ``11.22 GiB``, a bubble of ``-3e-15 s`` is
    ``0.000 s``); spec keys and presets differ when their values do."""
    fa, fb = flatten(a), flatten(b)
    keys = list(fa) + [k for k in fb if k not in fa]
    diffs, same = [], {}
    for k in keys:
        if _echo(k, fa) and _echo(k, fb):
            continue  # derived.tp repeats parallel.tp
        va, vb = fa.get(k), fb.get(k)
        if va == vb or (
            k.startswith(_COMPUTED)
            and _number(va)
            and _number(vb)
            and fmt_value(k, va) == fmt_value(k, vb)
        ):
            same[k] = va  # a computed value equal at the shown precision is no difference
        else:
            diffs.append({"key": k, "a": va, "b": vb})
    return diffs, same


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def fmt_value(key: str, value: Any) -> str:
    """A value for the text table (bytes in GiB, fractions in percent, seconds with units; a
    long list or mapping as its size), rounded to what is shown
    (:mod:`trainc.compiler.support.numfmt`: a rounding residue is shown as zero, without a sign)."""
    from trainc.compiler.support.numfmt import NOISE_FLOOR, fixed, gib, percent

    if value is None:
        return "-"
    if isinstance(value, (list, dict)):
        text = json.dumps(value)
        if len(text) <= _MAX_INLINE:
            return text
        return f"[{len(value)} items]" if isinstance(value, list) else f"{{{len(value)} keys}}"
    if not _number(value):
        return str(value)
    if "bytes" in key:
        return f"{gib(value)} GiB"
    if key.endswith(("fraction", "mfu")):
        return f"{percent(value)}%"
    if key.endswith("per_second"):
        return fixed(value, 0, sep=True)
    if "seconds" in key:
        return f"{fixed(value, 3, sep=True)} s"
    if isinstance(value, float):
        return "0" if abs(value) < NOISE_FLOOR else f"{value:,.4g}"
    return f"{value:,}"


def change(a: Any, b: Any, key: str = "") -> str:
    """Relative change of two numbers as shown for ``key`` (``+12.5%``); ``new`` when the base
    is zero as shown (or a billionth of ``b``: no percentage of a rounding residue); empty when
    they are not numbers or are equal as shown."""
    if not (_number(a) and _number(b)) or a == b:
        return ""
    shown_a = fmt_value(key, a)
    if shown_a == fmt_value(key, b):
        return ""
    if shown_a == fmt_value(key, 0) or abs(a) <= 1e-9 * abs(b):
        return "new"
    pct = 100 * (b - a) / abs(a)
    return f"{pct:+.1f}%" if abs(pct) >= 0.05 else f"{pct:+.1g}%"


def headline(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """The :data:`HEADLINE` rows present in either plan."""
    fa, fb = flatten(a), flatten(b)
    return [{"key": k, "a": fa.get(k), "b": fb.get(k)} for k in HEADLINE if k in fa or k in fb]


def resume_verdict(a_res: Any, b_res: Any) -> dict[str, Any] | None:
    """Can B resume from a checkpoint A wrote? ``{"ok": bool, "reasons": [...]}`` (each reason:
    rule, severity, key, a, b, message, fix): errors make ``ok`` false, warnings (another batch
    or schedule) do not. None when either spec did not resolve. B's ``resume.finetune``
    (weights only) waives the batch, schedule and optimizer reasons, as in the lint rules."""
    from trainc.compiler.derive import derive
    from trainc.compiler.validate.checkpoint import layout_facts, resume_findings

    if a_res.spec is None or b_res.spec is None:
        return None
    try:
        saved = layout_facts(a_res.spec, derive(a_res.spec))
        now = layout_facts(b_res.spec, derive(b_res.spec))
    except (ArithmeticError, ValueError, TypeError):
        return None
    found = resume_findings(saved, now, b_res.spec.resume.finetune)
    reasons = [
        {
            "rule": f.rule.id,
            "severity": f.rule.severity,
            "key": f.key,
            "a": f.saved,
            "b": f.now,
            "message": f.message,
            "fix": f.fix,
        }
        for f in found
    ]
    return {"ok": not any(r["severity"] == "error" for r in reasons), "reasons": reasons}


def to_json(a_res: Any, b_res: Any, show_all: bool = False) -> dict[str, Any]:
    """The ``--format json`` object."""
    out: dict[str, Any] = {
        "a": {"path": a_res.path, "ok": a_res.ok},
        "b": {"path": b_res.path, "ok": b_res.ok},
    }
    verdict = resume_verdict(a_res, b_res)
    if verdict is not None:
        out["resume"] = verdict
    if a_res.plan is not None and b_res.plan is not None:
        diffs, same = compare(a_res.plan, b_res.plan)
        out["summary"] = headline(a_res.plan, b_res.plan)
        out["differences"] = diffs
        out["num_equal"] = len(same)
        if show_all:
            out["unchanged"] = same
    return out


def render_table(a_res: Any, b_res: Any, show_all: bool = False) -> None:
    """Print the Rich tables (summary, then differences) to stdout."""
    from rich.table import Table

    from trainc.console import Console

    console = Console(width=None if sys.stdout.isatty() else 160)
    diffs, same = compare(a_res.plan, b_res.plan)
    summary = Table(title="summary", title_justify="left")
    summary.add_column("key", no_wrap=True)
    for col in ("A", "B", "change"):
        summary.add_column(col, justify="right")
    for row in headline(a_res.plan, b_res.plan):
        k = row["key"]
        summary.add_row(
            k, fmt_value(k, row["a"]), fmt_value(k, row["b"]), change(row["a"], row["b"], k)
        )
    console.print(f"A = {a_res.path}\nB = {b_res.path}")
    console.print(summary)
    verdict = resume_verdict(a_res, b_res)
    if verdict is not None:
        console.print(
            "B can resume from A's checkpoints"
            if verdict["ok"]
            else "B cannot resume from A's checkpoints",
            markup=False,
        )
        for r in verdict["reasons"]:
            console.print(
                f"  {r['severity']}[{r['rule']}] {r['key']}: {r['message']}\n    fix: {r['fix']}",
                markup=False,
            )
    rows = [*diffs, *({"key": k, "a": v, "b": v} for k, v in same.items())] if show_all else diffs
    if not diffs:
        console.print(f"no differences after resolution ({len(same)} keys compared)")
        if not show_all:
            return
    table = Table(title=f"{len(diffs)} difference(s), {len(same)} equal keys", title_justify="left")
    table.add_column("key", no_wrap=True)
    table.add_column("A", overflow="fold")
    table.add_column("B", overflow="fold")
    table.add_column("change", justify="right")
    for row in rows:
        k = row["key"]
        shown = _shown_pair(k, row["a"], row["b"])
        table.add_row(k, *shown, change(row["a"], row["b"], k))
    console.print(table)


def _shown_pair(key: str, a: Any, b: Any) -> tuple[str, str]:
    """Both values as shown; a spec value that differs only past the shown digits is shown in
    full (``0.0001`` vs ``0.00010001``), so a listed difference never reads as equal."""
    sa, sb = fmt_value(key, a), fmt_value(key, b)
    if sa == sb and a != b:
        if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            idx = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
            at = ", ".join(f"#{i}" for i in idx[:4]) + (" ..." if len(idx) > 4 else "")
            return f"{sa} ({len(idx)} differ: {at})", sb
        if max(len(repr(a)), len(repr(b))) > 4 * _MAX_INLINE:  # no wall of text
            return f"{sa} (differs; --format json has both)", sb
        return repr(a), repr(b)
    return sa, sb


def _plan_file(path: str) -> str:
    """The plan.json a compiled output names (the OUTDIR's, or the file itself)."""
    p = Path(path)
    return str(p / "plan.json" if p.is_dir() else p)


def _relocated(diags: list[Any], scratch: str, shown: str) -> list[Any]:
    """``diags`` with locations in the scratch file moved to ``shown`` (the plan.json; no line:
    the scratch file's lines are not the plan's)."""

    def move(loc: Any) -> Any:
        return dataclasses.replace(loc, file=shown, line=None) if loc.file == scratch else loc

    return [dataclasses.replace(d, locations=tuple(move(x) for x in d.locations)) for d in diags]


def _compiled_plan(path: str) -> dict[str, Any] | None:
    """The plan.json of a compiled output (an OUTDIR holding plan.json, or a plan.json) with a
    ``spec`` mapping, else None (``path`` is a spec file, or not readable as an output)."""
    p = Path(path)
    plan = p / "plan.json" if p.is_dir() else p
    if plan.suffix != ".json" or not plan.is_file():
        return None
    try:
        data = json.loads(plan.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("spec"), dict) else None


def run_diff(
    a: str,
    b: str,
    overrides: Sequence[str] = (),
    *,
    fmt: str = "text",
    show_all: bool = False,
    require_resume: bool = False,
) -> int:
    """Compile both specs (overrides on B) and print their differences; the exit code: 2 when
    either has errors, else 1 with ``require_resume`` when B cannot resume from A's checkpoints
    (:func:`resume_verdict`), else 0. A difference alone is not a failure (it is what a diff
    is asked for)."""
    from trainc.compiler.diagnostics import render_text
    from trainc.compiler.pipeline import compile_spec
    from trainc.compiler.plan import recorded_spec

    # a compiled output stands for the spec it was compiled from (written to a scratch file to
    # compile) and keeps the presets it recorded (the recorded spec has no defaults list)
    plans = [_compiled_plan(a), _compiled_plan(b)]
    if overrides and plans[1] is not None and "spec_as_written" not in plans[1]:
        print(
            f"trainc diff: warning: B ({b}) is a plan.json from a trainc that did not record "
            "the spec as written; the overrides apply to its resolved spec, whose derived "
            "values (etp, sequence_parallel, tp_comm_overlap, ...) stay as they were "
            "compiled: diff the spec file to derive them again",
            file=sys.stderr,
        )
    with tempfile.TemporaryDirectory(prefix="trainc-diff-") as tmp:
        files = []
        for given, plan, name in ((a, plans[0], "a.yaml"), (b, plans[1], "b.yaml")):
            if plan is None:
                files.append(given)
                continue
            scratch = Path(tmp) / name
            scratch.write_text(
                yaml.safe_dump(recorded_spec(plan), sort_keys=False), encoding="utf-8"
            )
            files.append(str(scratch))
        a_res = compile_spec(files[0], emit_files=False)
        b_res = compile_spec(files[1], list(overrides), emit_files=False)
    for given, scratch_file, res in zip((a, b), files, (a_res, b_res), strict=True):
        if scratch_file != given:  # name the compiled output, not the deleted scratch file
            res.diagnostics = _relocated(res.diagnostics, scratch_file, _plan_file(given))
    for plan, res in zip(plans, (a_res, b_res), strict=True):
        if plan is not None and res.plan is not None:
            presets = plan.get("presets")
            res.plan["presets"] = dict(presets) if isinstance(presets, dict) else {}
    a_res.path, b_res.path = a, b
    for label, res in (("A", a_res), ("B", b_res)):
        errors = [d for d in res.diagnostics if d.is_error]
        if errors:
            print(f"trainc diff: {label} ({res.path}) has errors:", file=sys.stderr)
            print(render_text(errors), file=sys.stderr)
    if fmt == "json":
        print(
            json.dumps(to_json(a_res, b_res, show_all), indent=2, sort_keys=False, allow_nan=False)
        )
    elif a_res.plan is not None and b_res.plan is not None:
        render_table(a_res, b_res, show_all)
    if not (a_res.ok and b_res.ok):
        return 2
    verdict = resume_verdict(a_res, b_res) if require_resume else None
    if verdict is not None and not verdict["ok"]:
        print(
            "trainc diff: B cannot resume from A's checkpoints (--require-resume)", file=sys.stderr
        )
        return 1
    return 0
