"""docs/index.md maps every page of docs/ (one line each), and every link in it opens."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def test_index_lists_every_doc_and_its_links_open() -> None:
    text = (DOCS / "index.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)\)", text)
    assert all((DOCS / link).resolve().is_file() for link in links), links
    listed = {(DOCS / link).resolve() for link in links}
    pages = {p.resolve() for p in DOCS.glob("*.md") if p.name != "index.md"}
    assert not pages - listed, sorted(p.name for p in pages - listed)
