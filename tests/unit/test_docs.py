"""The README is a first page, and the documentation site holds every page of docs/.

``make check`` builds the site itself (``mkdocs build --strict``: broken links and anchors, pages the
navigation leaves out); these tests hold what the build does not see.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The README says what podgahp is, shows the picture, installs, gives the two commands and points on.
README_MOST_LINES = 150


def test_readme_is_a_page() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MOST_LINES, f"README.md has {len(lines)} lines; move the detail to docs/"
    headings = [line for line in lines if line.startswith("## ")]
    assert headings == ["## Install", "## Two commands", "## Read on", "## Dependencies and why"]


def test_readme_links_resolve() -> None:
    # The README is read on a forge and in the RPM's docdir, not through the site: its relative links
    # must name files of the tree.
    text = (ROOT / "README.md").read_text()
    targets = [t for t in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text) if "://" not in t]
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing


def test_every_doc_page_is_in_the_navigation() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert [p for p in pages if f": {p}" not in nav] == []
