"""The house by its plan: counts that keep the package's architecture as docs/architecture.md
describes it.

Each test measures one property of the source tree (by parsing it, never by importing it):

- engine names are compared (``==``, ``!=``, ``is``, ``in`` or a ``match`` case against
  ``Engine.megatron`` / ``Engine.deepspeed`` / ``Engine.fsdp`` or their strings) in at most
  ``MAX_ENGINE_FILES`` files under ``trainc/``: everywhere else an engine is looked up in a table
  keyed by :class:`trainc.schemas.Engine` (a registration);
- no function is longer than ``MAX_FUNCTION_LINES`` lines (after ``ruff format``) but the
  declarative tables named in ``LONG_TABLES`` (at most two);
- no CJK text in ``trainc/``; no history markers ("session 3", "trial 2", "(issue 26)") in
  ``trainc/`` and ``docs/``; no reference to notes a clone does not have (the folder of
  reference notes beside the checkout, the
  reference notes ``megatron_rules.md`` / ``deepspeed_rules.md`` and their "MR §" / "DR §"
  sections) anywhere in the repository's code and docs;
- at most ``MAX_FLAT_UNIT_FILES`` test files directly in ``tests/unit/`` (the rest mirror the
  package).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "trainc"

MAX_ENGINE_FILES = 8
MAX_FUNCTION_LINES = 120
#: Declarative tables allowed to be longer than MAX_FUNCTION_LINES ("path:function").
LONG_TABLES: frozenset[str] = frozenset()
MAX_FLAT_UNIT_FILES = 10

_ENGINES = frozenset({"megatron", "deepspeed", "fsdp"})


def _sources(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _is_engine(node: ast.AST | None) -> bool:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return node.value.id == "Engine" and node.attr in _ENGINES
    if isinstance(node, ast.Constant):
        return node.value in _ENGINES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_engine(e) for e in node.elts)
    return False


def engine_comparisons(root: Path = PACKAGE) -> dict[str, list[int]]:
    """file (relative to the repo) -> line numbers where an engine name is compared."""
    found: dict[str, list[int]] = {}
    for path in _sources(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            lines: list[int] = []
            if isinstance(node, ast.Compare) and any(
                _is_engine(x) for x in (node.left, *node.comparators)
            ):
                lines.append(node.lineno)
            elif isinstance(node, ast.Match):
                lines += [
                    c.pattern.lineno
                    for c in node.cases
                    if isinstance(c.pattern, ast.MatchValue) and _is_engine(c.pattern.value)
                ]
            if lines:
                found.setdefault(str(path.relative_to(REPO)), []).extend(lines)
    return found


def long_functions(root: Path = PACKAGE) -> dict[str, int]:
    """ "path:function" -> its length in lines, for every def over MAX_FUNCTION_LINES lines."""
    found: dict[str, int] = {}
    for path in _sources(root):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    found[f"{path.relative_to(REPO)}:{node.name}"] = n
    return found


def test_engine_names_are_compared_in_few_files() -> None:
    found = engine_comparisons()
    assert len(found) <= MAX_ENGINE_FILES, "\n".join(f"{f}: {ls}" for f, ls in found.items())


def test_no_long_functions_but_the_declarative_tables() -> None:
    assert len(LONG_TABLES) <= 2
    found = {k: n for k, n in long_functions().items() if k not in LONG_TABLES}
    assert not found, "\n".join(f"{k}: {n} lines" for k, n in sorted(found.items()))


def test_no_cjk_text_in_the_package() -> None:
    cjk = re.compile(r"[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff00-\uffef]")
    bad = [
        f"{p.relative_to(REPO)}:{i}"
        for p in _sources(PACKAGE)
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if cjk.search(line)
    ]
    assert not bad, bad


_HISTORY = re.compile(r"\b(session|trial|round) \d+\b|\(issue \d+\)|\bissue #?\d+ of trainc", re.I)


def test_no_history_markers_in_package_and_docs() -> None:
    files = [*_sources(PACKAGE), *sorted((REPO / "docs").rglob("*.md"))]
    bad = [
        f"{p.relative_to(REPO)}:{i}: {line.strip()}"
        for p in files
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if _HISTORY.search(line) and "round(" not in line
    ]
    assert not bad, "\n".join(bad)


_UNOPENABLE = re.compile(
    r"\.\./" + "shared|/wo" + "rk/shared|megatron_rules\\.md|deepspeed_rules\\.md|\b[MD]R §"
)


def test_no_references_a_clone_cannot_open() -> None:
    roots = ["trainc", "docs", "bench", "scripts", "tests"]
    files = [
        p
        for r in roots
        for p in sorted((REPO / r).rglob("*"))
        if p.is_file()
        and p.suffix in {".py", ".md", ".yaml", ".j2", ".sh", ".toml", ".txt"}
        and "__pycache__" not in p.parts
        and p != Path(__file__)
    ]
    files += [REPO / "README.md", REPO / "pyproject.toml"]
    bad = [
        f"{p.relative_to(REPO)}:{i}"
        for p in files
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if _UNOPENABLE.search(line)
    ]
    assert not bad, bad


def test_unit_tests_mirror_the_package() -> None:
    flat = sorted(p.name for p in (REPO / "tests" / "unit").glob("test_*.py"))
    assert len(flat) <= MAX_FLAT_UNIT_FILES, flat
