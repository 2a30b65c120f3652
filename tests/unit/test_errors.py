"""SpecIssue rendering, SpecError aggregation and the small helpers for messages."""

from __future__ import annotations

import pickle

import pytest

from yamltrace.errors import SpecError, SpecIssue, did_you_mean, format_json_path


def test_issue_renders_file_line_column_path_message() -> None:
    issue = SpecIssue("'one' is not of type 'integer'", "$.outputs.attentions.index", "specs/llama.yaml", 12, 5)
    assert issue.render() == "specs/llama.yaml:12:5: $.outputs.attentions.index: 'one' is not of type 'integer'"


@pytest.mark.parametrize(
    ("issue", "rendered"),
    [
        (SpecIssue("too big", "$", "a.yaml"), "a.yaml: $: too big"),
        (SpecIssue("bad", "$.x", None, 3), "<string>:3: $.x: bad"),
        (SpecIssue("bad"), "<string>: $: bad"),
    ],
)
def test_unknown_parts_of_the_location_are_left_out(issue: SpecIssue, rendered: str) -> None:
    assert issue.render() == rendered


def test_error_renders_every_issue_ordered_by_file_line_column() -> None:
    issues = [
        SpecIssue("third", "$.c", "b.yaml", 1, 1),
        SpecIssue("second", "$.b", "a.yaml", 10, 2),
        SpecIssue("first", "$.a", "a.yaml", 2, 7),
    ]
    error = SpecError(issues)
    assert str(error).splitlines() == [
        "a.yaml:2:7: $.a: first",
        "a.yaml:10:2: $.b: second",
        "b.yaml:1:1: $.c: third",
    ]
    assert [i.message for i in error.issues] == ["first", "second", "third"]
    assert isinstance(error, ValueError)


def test_error_needs_an_issue() -> None:
    with pytest.raises(ValueError, match="at least one issue"):
        SpecError([])


def test_single_builds_one_issue() -> None:
    error = SpecError.single("nope", "$.x", "f.yaml", 1, 2)
    assert error.issues == (SpecIssue("nope", "$.x", "f.yaml", 1, 2),)


def test_error_survives_pickling_with_its_issues() -> None:
    error = SpecError([SpecIssue("bad", "$.x", "f.yaml", 3, 4)])
    copy = pickle.loads(pickle.dumps(error))
    assert copy.issues == error.issues and str(copy) == str(error)


def test_issue_as_data_and_with_note() -> None:
    issue = SpecIssue("bad", "$.x", "f.yaml", 3, 4)
    assert issue.to_dict() == {"file": "f.yaml", "line": 3, "column": 4, "json_path": "$.x", "message": "bad"}
    assert issue.with_note("(why)").message == "bad (why)"


@pytest.mark.parametrize(
    ("path", "rendered"),
    [
        ((), "$"),
        (("outputs", "attentions", "index"), "$.outputs.attentions.index"),
        (("outputs", "router_logits", 1, "index"), "$.outputs.router_logits[1].index"),
        (("patches", "^Llama\\d+$"), "$.patches['^Llama\\\\d+$']"),
        (("outputs", "012"), "$.outputs['012']"),
    ],
)
def test_format_json_path(path: tuple, rendered: str) -> None:
    assert format_json_path(path) == rendered


@pytest.mark.parametrize(
    ("word", "choices", "hint"),
    [
        ("outptus", ["outputs", "options"], "; did you mean 'outputs'?"),
        ("idx", ["target", "index", "layers"], "; did you mean 'index'?"),
        ("layer_nme", ["layer_name", "layers"], "; did you mean 'layer_name'?"),
        ("zzz", ["outputs", "options"], ""),
    ],
)
def test_did_you_mean(word: str, choices: list[str], hint: str) -> None:
    assert did_you_mean(word, choices) == hint
