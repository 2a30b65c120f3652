"""docs/fidelity.md holds one section per transformers version: a sweep under one version replaces
that version's section and keeps the others, newest version first."""

from __future__ import annotations

import pytest
from oracle.sweep._compare import Result
from oracle.sweep._report import page, render

pytestmark = pytest.mark.oracle


def _section(version: str, status: str = "compared") -> str:
    result = Result(
        target="llama.LlamaModel",
        family="llama",
        name="LlamaModel",
        status=status,
        variants={"a": "equal", "b": "equal", "c": "equal"} if status == "compared" else {},
    )
    return render([result], versions=f"transformers {version}, torch 2.13.0", import_failures={}, seconds=60.0)


def test_a_section_per_version_newest_first() -> None:
    text = page(_section("5.23.0"))
    text = page(_section("5.24.0"), text)
    assert text.count("# Fidelity:") == 1
    assert text.index("## transformers 5.24.0") < text.index("## transformers 5.23.0")
    assert "### Totals (transformers 5.24.0)" in text and "### Totals (transformers 5.23.0)" in text


def test_a_run_replaces_only_its_own_version() -> None:
    text = page(_section("5.24.0"), page(_section("5.23.0")))
    text = page(_section("5.23.0", status="forward"), text)
    newer, older = text.split("## transformers 5.23.0")
    assert "| compared | 1 | 100.0% |" in newer
    assert "| compared | 0 | 0.0% |" in older and "| llama.LlamaModel | forward |" in older
    assert text.count("## transformers 5.23.0") == 1
