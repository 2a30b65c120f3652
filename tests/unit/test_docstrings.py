"""Every public name documents itself: a summary, every parameter, and examples that run."""

from __future__ import annotations

import doctest
import inspect

import pytest

import yamltrace

NAMES = sorted(yamltrace.__all__)
FUNCTIONS = [n for n in NAMES if inspect.isfunction(inspect.unwrap(getattr(yamltrace, n)))]


@pytest.mark.parametrize("name", NAMES)
def test_a_public_name_has_a_summary(name: str) -> None:
    doc = inspect.getdoc(getattr(yamltrace, name)) or ""
    summary = doc.split("\n\n")[0]
    assert len(summary) >= 20 and summary.rstrip().endswith((".", ":", ")", "`")), f"{name}: {summary!r}"


@pytest.mark.parametrize("name", FUNCTIONS)
def test_a_public_function_documents_each_parameter(name: str) -> None:
    function = getattr(yamltrace, name)
    doc = inspect.getdoc(function) or ""
    for parameter in inspect.signature(function).parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        assert f"`{parameter.name}" in doc or f"{parameter.name}:" in doc or f"{parameter.name}=" in doc, (
            f"{name}: parameter {parameter.name!r} is not documented"
        )


def test_trace_help_stands_on_its_own() -> None:
    doc = inspect.getdoc(yamltrace.trace)
    for section in ("Args:", "Yields:", "Raises:", "Example:"):
        assert section in doc


@pytest.mark.parametrize("name", NAMES)
def test_docstring_examples_run(name: str) -> None:
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    obj = getattr(yamltrace, name)
    test = parser.get_doctest(inspect.getdoc(obj) or "", {"yamltrace": yamltrace}, name, None, 0)
    result = runner.run(test, clear_globs=True)
    assert result.failed == 0, f"{name}: {result.failed} docstring example(s) failed"
