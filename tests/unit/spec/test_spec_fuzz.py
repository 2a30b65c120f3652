"""Fuzzing the whole spec path: any text, mapping or schema-valid spec loads or raises SpecError, quickly.

Each example must finish within hypothesis' `deadline` (2 s): a hostile input that is slow to refuse
fails here as a DeadlineExceeded. Schema-valid specs come from a hand-written strategy over the schema's
vocabulary, with hostile values (long texts, deep chains of groups in patch keys, reserved keys).
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yamltrace.errors import SpecError
from yamltrace.spec import Spec, load_spec, validate_spec

FUZZ = settings(
    max_examples=60,
    deadline=timedelta(seconds=2),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(autouse=True)
def _empty_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # fuzzed specs may name files (extends)


def only_spec_errors(source) -> None:
    for check in (validate_spec, load_spec):
        try:
            result = check(source)
        except SpecError as e:
            assert e.issues and all(issue.message for issue in e.issues)
        else:
            assert result is not None and (check is validate_spec or isinstance(result, Spec))


identifiers = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,12}", fullmatch=True)
hostile_text = st.sampled_from(
    ["", "\n", "a\n", "__dict__", "to_dict", "last_hidden_state", "keys", "x" * 2000, "\u2028", "\x85", "../../etc/passwd",
     "/etc/passwd", "yamltrace.__main__", "torch.utils.model_dump.__main__:X", "torch.nn:Linear", "torch.nn.Linear"]
)  # fmt: skip
texts = st.text(max_size=30) | hostile_text
class_refs = (
    st.sampled_from(["torch.nn:Linear", "torch.nn:Identity", "torch.nn.ReLU", "torch.nn:Module", "Linear"]) | hostile_text
)
patterns = st.sampled_from(
    [r"^(\w+\w?)+!$", r"^((((\w+)+)+)+)+!$", "a{4294967296}", "a{2147483648}", "(" * 300 + ")" * 300, r"(a)\1", r"x(?=y)",
     ".*", "^Linear$", "Lin", r"\Z", "(unclosed"]
) | st.text(max_size=20)  # fmt: skip
integers = st.integers(min_value=-(10**20), max_value=10**20) | st.sampled_from([0, 1, -1, 2**16, 2**16 + 1])
recorders = class_refs | st.fixed_dictionaries(
    {"target": class_refs},
    optional={
        "index": integers, "layer_name": texts, "num_hidden_layers_key": identifiers | hostile_text,
        "layers": st.lists(integers, min_size=1, max_size=5, unique=True), "detach": st.booleans(),
        "to": st.sampled_from(["cpu", "cuda", "cuda:1", "mps", "cpu\n"]), "dtype": st.sampled_from(["float16", "float32"]),
        "capture_initial_hidden_state": st.booleans(),
    },
)  # fmt: skip
schema_like_specs = st.fixed_dictionaries(
    {"yamltrace": st.sampled_from([1, 1, 1, 1.0, True, "1"])},
    optional={
        "model": class_refs,
        "imports": st.lists(st.sampled_from(["torch.nn", "torch", "yamltrace.examples.tiny", "yamltrace.__main__"]) | texts, max_size=4),
        "outputs": st.dictionaries(identifiers | hostile_text, recorders | st.lists(recorders, min_size=1, max_size=3), max_size=4),
        "options": st.fixed_dictionaries({}, optional={"tie_last_hidden_states": st.booleans()}),
        "patches": st.dictionaries(patterns, class_refs | st.fixed_dictionaries({"replace_with": class_refs}), max_size=3),
        "extends": texts,
    },
)  # fmt: skip
plain = st.recursive(
    st.none() | st.booleans() | integers | st.floats() | texts,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(texts, inner, max_size=5),
    max_leaves=30,
)


@FUZZ
@given(schema_like_specs)
def test_schema_like_specs(document: dict) -> None:
    only_spec_errors(document)


@FUZZ
@given(st.dictionaries(texts | st.sampled_from(["yamltrace", "outputs", "patches", "imports", "extends"]), plain, max_size=6))
def test_any_mapping(document: dict) -> None:
    only_spec_errors(document)


@FUZZ
@given(st.text(max_size=300))
def test_any_text(text: str) -> None:
    only_spec_errors(text)


@FUZZ
@given(schema_like_specs)
def test_schema_like_specs_as_yaml(document: dict) -> None:
    import yaml

    only_spec_errors(yaml.safe_dump(document, allow_unicode=True))
