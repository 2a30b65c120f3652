"""Every code block of every page under docs/ and of the README and CHANGELOG runs (tests/helpers_docs_run.py).

One test per page: its Python blocks (shown and hidden) run in order in one namespace, in a temporary
directory holding a copy of `specs/`; its YAML blocks are specs that validate and load; its shell blocks
are `yamltrace` commands run in-process, each expected to exit 0 (or the status its marker gives).
Blocks marked `skip` say why (a network, a GPU, a package yamltrace does not depend on). The pages of
`VISION_PAGES` need timm, torchvision and diffusers: tests/vision/test_vision_docs.py runs them in the
vision environment (`make test-vision`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ROOT
from helpers_docs import blocks, commands
from helpers_docs_run import VISION_PAGES, page_name, run_page

ALL_PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
PAGES = [page for page in ALL_PAGES if page_name(page) not in VISION_PAGES]


@pytest.mark.parametrize("page", PAGES, ids=page_name)
def test_every_block_of_the_page_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_page(page, tmp_path, monkeypatch)


def test_the_vision_pages_exist_and_are_run_by_the_vision_suite() -> None:
    """The pages left out above are not left untested: tests/vision/test_vision_docs.py runs each."""
    runner = (ROOT / "tests" / "vision" / "test_vision_docs.py").read_text(encoding="utf-8")
    for name in VISION_PAGES:
        assert (ROOT / name).is_file(), name
    assert "VISION_PAGES" in runner and "run_page" in runner


def test_the_runner_reads_markers_and_hidden_blocks(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Intro.\n\n<!-- docs-test: python\nx = 1\n-->\n\n```python\ny = x + 1\n```\n\n"
        "<!-- docs-test: skip needs a GPU -->\n```python\nboom\n```\n\n"
        "<!-- docs-test: file=a/s.yaml fragment validate-only -->\n```yaml\noutputs: {h: X}\n```\n\n"
        "<!-- docs-test: exit=1 -->\n```sh\nyamltrace validate \\\n  bad.yaml  # a comment\n```\n\n"
        "```console\n$ yamltrace specs\nbuiltin:bert\n```\n\n```\nshown output\n```\n",
        encoding="utf-8",
    )
    found = blocks(page, "page.md")
    assert [(b.kind, b.line) for b in found] == [
        ("python", 4),
        ("python", 8),
        ("python", 13),
        ("yaml", 18),
        ("shell", 23),
        ("shell", 28),
        ("text", 33),
    ]
    assert found[0].code.strip() == "x = 1" and found[1].code == "y = x + 1\n"
    assert found[2].flags == {"skip"} and found[2].reason == "needs a GPU"
    assert found[3].flags == {"fragment", "validate-only"} and found[3].file == "a/s.yaml"
    assert found[4].exit == 1 and commands(found[4]) == [["yamltrace", "validate", "bad.yaml"]]
    assert commands(found[5]) == [["yamltrace", "specs"]]


@pytest.mark.parametrize(
    "text, message",
    [
        ("<!-- docs-test: skip -->\n```python\nx\n```\n", "needs a reason"),
        ("<!-- docs-test: sikp now -->\n```python\nx\n```\n", "unknown docs-test option 'sikp'"),
        ("<!-- docs-test: config -->\n\nSome text.\n```yaml\na: 1\n```\n", "must be followed by a code block"),
    ],
)
def test_the_runner_refuses_a_bad_marker(tmp_path: Path, text: str, message: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        blocks(page, "page.md")
