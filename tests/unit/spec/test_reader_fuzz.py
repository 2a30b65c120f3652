"""Fuzzing the spec reader: any text or bytes reads, or raises SpecError; never another exception."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yamltrace.errors import SpecError
from yamltrace.spec import validate_spec
from yamltrace.spec import SpecDocument, read_spec_document

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Pieces of YAML syntax, spec vocabulary and hostile constructs, joined in random order.
TOKENS = [
    "yamltrace: 1\n",
    "outputs:\n",
    "patches:\n",
    "options: ",
    "imports: ",
    "extends: ",
    "base.yaml",
    "\n",
    "  ",
    "- ",
    ": ",
    ", ",
    "[",
    "]",
    "{",
    "}",
    "? ",
    "&a ",
    "*a",
    "<<: ",
    "!!python/object/apply:os.system ",
    "!!str ",
    "!!int ",
    "!custom ",
    "!!binary ",
    "%YAML 1.1\n",
    "%TAG ! tag:x,2000:\n",
    "---\n",
    "...\n",
    "'",
    '"',
    "\\",
    "#",
    "|\n",
    ">-\n",
    "\t",
    "on",
    "no",
    "~",
    "0o17",
    "1_000",
    "012",
    "1e999",
    "9" * 30,
    "index",
    "target",
    "layers",
    "hidden_states",
    "LlamaAttention",
    "\ufeff",
    "\x85",
    "\u2028",
    "é",
    "\x00",
]
yaml_like = st.lists(st.sampled_from(TOKENS), max_size=40).map("".join)
plain_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def reads_or_raises_spec_error(source: str | bytes) -> None:
    for reader in (read_spec_document, validate_spec):
        try:
            document = reader(source)
        except SpecError as e:
            assert e.issues and all(issue.message for issue in e.issues)
        else:
            assert isinstance(document, SpecDocument) and isinstance(document.data, dict)


@pytest.fixture(autouse=True)
def _empty_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Fuzzed text may name files (`extends: base.yaml`, a one-line path); resolve them in an empty place.
    monkeypatch.chdir(tmp_path)


@FUZZ
@given(st.text())
def test_any_text(text: str) -> None:
    reads_or_raises_spec_error(text)


@FUZZ
@given(st.binary())
def test_any_bytes(data: bytes) -> None:
    reads_or_raises_spec_error(data)


@FUZZ
@given(yaml_like)
def test_yaml_like_text(text: str) -> None:
    reads_or_raises_spec_error(text)
    reads_or_raises_spec_error(text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(plain_data, st.integers(min_value=0, max_value=200))
def test_dumped_and_truncated_yaml(data: object, cut: int) -> None:
    text = yaml.safe_dump({"yamltrace": 1, "outputs": data}, allow_unicode=True)
    reads_or_raises_spec_error(text)
    reads_or_raises_spec_error(text[:cut])
