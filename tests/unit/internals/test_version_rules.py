"""`yamltrace._versions`: which transformers release's semantics yamltrace follows, and its predicates."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from yamltrace import _versions, errors


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
    assert _versions.transformers_version() == _versions.NEWEST_SUPPORTED == (5, 25, 0)
    assert _versions.cache_named_cache() and _versions.use_cache_off_needs_grad()
    assert _versions.declared_cache_fields_kept()


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
    assert not _versions.declared_cache_fields_kept()


RULES = {"cache_named_cache": (5, 24, 0), "use_cache_off_needs_grad": (5, 24, 0), "declared_cache_fields_kept": (5, 25, 0)}


@pytest.mark.parametrize("version", [(5, 23, 0), (5, 23, 9), (5, 24, 0), (5, 24, 1), (5, 25, 0), (5, 26, 0)])
@pytest.mark.parametrize("predicate", list(RULES))
def test_each_rule_changes_at_its_release(monkeypatch, predicate, version) -> None:
    monkeypatch.setattr(_versions, "transformers_version", lambda: version)
    assert getattr(_versions, predicate)() is (version >= RULES[predicate])


def test_asking_imports_neither_transformers_nor_torch() -> None:
    code = (
        "import sys, yamltrace._versions as v; v.transformers_version(); v.cache_named_cache(); "
        "print('transformers' in sys.modules, 'torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


def _installed(monkeypatch, text: str) -> None:
    monkeypatch.setattr(_versions.metadata, "version", lambda name: text)


def test_a_release_newer_than_the_verified_ones_warns_once_naming_them(monkeypatch, fresh_version) -> None:
    _installed(monkeypatch, "5.26.0")
    with pytest.warns(errors.UnverifiedReleaseWarning) as caught:
        assert _versions.cache_named_cache()  # the first use that depends on the release
        assert _versions.use_cache_off_needs_grad() and _versions.transformers_version() == (5, 26, 0)
    assert [str(w.message) for w in caught] == [
        "transformers 5.26.0 is newer than the releases yamltrace is verified with (5.23.0, 5.24.0, 5.25.0): "
        "yamltrace follows 5.25.0's semantics for it (docs/semantics.md, 'Differences between transformers "
        "versions'); check your captures against this release, or install transformers<5.26."
    ]
    assert issubclass(errors.UnverifiedReleaseWarning, UserWarning)
    assert caught[0].filename == __file__  # the caller's line, not yamltrace's


@pytest.mark.parametrize("text", ["5.23.0", "5.24.0", "5.24.3", "5.25.0", "5.25.1.dev0", "5.22.0"])
def test_a_verified_release_or_a_patch_of_one_does_not_warn(monkeypatch, fresh_version, text) -> None:
    import warnings

    _installed(monkeypatch, text)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _versions.transformers_version()
        _versions.cache_named_cache()


def test_the_newest_verified_release_is_the_one_followed_without_transformers() -> None:
    assert _versions.NEWEST_SUPPORTED == _versions.VERIFIED[-1]


def test_the_verified_releases_are_pyprojects_transformers_range() -> None:
    import re
    import tomllib

    from helpers import ROOT

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    (pin,) = [p for p in extras["transformers"] if p.startswith("transformers")]
    low, high = re.fullmatch(r"transformers>=([\d.]+),<([\d.]+)", pin).groups()
    newest = _versions.NEWEST_SUPPORTED
    assert _versions.parse_version(low) == _versions.VERIFIED[0]
    assert _versions.parse_version(high) == (newest[0], newest[1] + 1, 0)
