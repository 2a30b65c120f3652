"""mkdocs.yml lists every page under docs/, and every page it lists exists."""

from __future__ import annotations

import yaml
from helpers import ROOT


def _pages(node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for item in node for page in _pages(item)]
    return [page for value in node.values() for page in _pages(value)]


def test_the_nav_covers_the_docs_exactly() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = _pages(config["nav"])
    on_disk = sorted(p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md"))
    assert sorted(listed) == on_disk and len(set(listed)) == len(listed)
