"""`yamltrace._versions`: which transformers release's semantics yamltrace follows, and its predicates."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from yamltrace import _versions


@pytest.fixture
def fresh_version(monkeypatch):
    """`transformers_version` read afresh inside the test (and the read kept before it restored after)."""
    monkeypatch.setattr(_versions, "_followed", None)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5.24.0", (5, 24, 0)),
        ("5.23.1", (5, 23, 1)),
        ("5.24.0.dev0", (5, 24, 0)),
        ("5.25.0rc1", (5, 25, 0)),
        ("5.24", (5, 24, 0)),
    ],
)
def test_parse_version_reads_the_release(text, expected) -> None:
    assert _versions.parse_version(text) == expected


def test_parse_version_refuses_what_is_not_a_version() -> None:
    with pytest.raises(ValueError, match="not a transformers version: 'main'"):
        _versions.parse_version("main")


def test_without_transformers_the_newest_supported_release_is_followed(monkeypatch, fresh_version) -> None:
    def absent(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(_versions.metadata, "version", absent)
    assert _versions.transformers_version() == _versions.NEWEST_SUPPORTED == (5, 24, 0)
    assert _versions.cache_named_cache() and _versions.use_cache_off_needs_grad()


def test_the_installed_release_is_read_from_its_metadata_once(monkeypatch, fresh_version) -> None:
    calls = []

    def version(name: str) -> str:
        calls.append(name)
        return "5.23.0"

    monkeypatch.setattr(_versions.metadata, "version", version)
    assert _versions.transformers_version() == (5, 23, 0)
    assert _versions.transformers_version() == (5, 23, 0)
    assert calls == ["transformers"]
    assert not _versions.cache_named_cache() and not _versions.use_cache_off_needs_grad()


@pytest.mark.parametrize(
    ("version", "after"), [((5, 23, 0), False), ((5, 23, 9), False), ((5, 24, 0), True), ((5, 24, 1), True), ((5, 25, 0), True)]
)
@pytest.mark.parametrize("predicate", ["cache_named_cache", "use_cache_off_needs_grad"])
def test_each_rule_changes_at_its_release(monkeypatch, predicate, version, after) -> None:
    monkeypatch.setattr(_versions, "transformers_version", lambda: version)
    assert getattr(_versions, predicate)() is after


def test_asking_imports_neither_transformers_nor_torch() -> None:
    code = (
        "import sys, yamltrace._versions as v; v.transformers_version(); v.cache_named_cache(); "
        "print('transformers' in sys.modules, 'torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]
