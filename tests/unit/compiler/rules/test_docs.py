"""docs/rules.md is generated from the catalog and must be up to date."""

from pathlib import Path

from trainc.compiler.rules import ALL_RULES
from trainc.docs import main, render

DOC = Path(__file__).resolve().parents[4] / "docs" / "rules.md"


def test_rules_md_is_current():
    assert DOC.read_text() == render(), "docs/rules.md is stale: run `python -m trainc.docs`"


def test_every_rule_is_listed_with_its_severity_per_engine():
    from trainc.schemas import Engine

    text = render()
    for r in ALL_RULES:
        grades = " | ".join(r.severity_for(e.value) for e in Engine)
        assert f"| {r.id} | `{r.name}` | {grades} |" in text


def test_every_rule_names_its_source():
    from trainc.compiler.rules import SOURCES

    assert {r.id for r in ALL_RULES} <= set(SOURCES)


def test_check_mode(tmp_path):
    f = tmp_path / "rules.md"
    assert main(["--check", str(f)]) == 1
    assert main([str(f)]) == 0
    assert main(["--check", str(f)]) == 0


def test_an_option_is_never_taken_for_the_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--help"]) == 0
    assert main(["--chek"]) == 2
    assert main(["a.md", "b.md"]) == 2
    assert not list(tmp_path.iterdir())
