"""Spec documents vs the JSON Schema: every error found, located at its YAML node, with hints.

The schema ships inside the package (`yamltrace/schemas/`) and is read with `importlib.resources`.
Validation imports nothing beyond PyYAML and jsonschema: a spec can be checked where torch and the
model's code are not installed, and checking it never runs code the spec names.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from ..errors import SpecError, SpecIssue, did_you_mean
from ._reader import DEFAULT_MAX_BYTES, SpecDocument, read_spec_document

__all__ = ["SCHEMA_ID", "SCHEMA_FILE", "load_schema", "schema_issues", "validate_spec"]

SCHEMA_ID = "https://yamltrace.dev/schemas/yamltrace-spec-v1.schema.json"
SCHEMA_FILE = "yamltrace-spec-v1.schema.json"

_NUMBER_LIKE = re.compile(r"[-+]?[0-9][0-9_.oOxXbBeE+-]*")
# A list item that YAML flow style reads back unquoted as the same value.
_PLAIN_ITEM = re.compile(r"-?[0-9]+|[A-Za-z_][A-Za-z0-9_.:]*")


@functools.cache
def _schema() -> dict[str, Any]:
    text = resources.files("yamltrace").joinpath("schemas", SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def load_schema() -> dict[str, Any]:
    """The spec JSON Schema (draft 2020-12), read from the installed package; a fresh copy each call."""
    return copy.deepcopy(_schema())


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    # YAML numbers are never integers when written with a dot: `index: 1.0` is an error, not 1.
    checker = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    )
    cls = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=checker)
    return cls(_schema())


def _show(value: Any) -> str:
    """A value as the user wrote it in YAML, kept short."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_message(error: ValidationError) -> str:
    expected = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
    value = error.instance
    message = f"{_show(value)} is not of type {', '.join(repr(t) for t in expected)}"
    if "string" in expected and (value is None or isinstance(value, (bool, int, float))):
        return message + "; quote it to make it text"
    if "boolean" in expected and isinstance(value, str):
        return message + "; write true or false"
    if "integer" in expected and isinstance(value, (str, float)) and _NUMBER_LIKE.fullmatch(str(value)):
        return message + "; write a plain decimal integer (no leading zeros, underscores, 0o/0x or dot)"
    if expected == ["array"] and isinstance(value, (int, str)) and not isinstance(value, bool):
        item = str(value) if _PLAIN_ITEM.fullmatch(str(value)) else json.dumps(value)
        return message + f"; write [{item}] for a list of one"
    return message


def _unknown_keys(error: ValidationError, document: SpecDocument, path: tuple[str | int, ...]) -> list[SpecIssue]:
    allowed = list(error.schema.get("properties", {}))
    issues = []
    for key in error.instance:
        if key not in allowed:
            hint = did_you_mean(key, allowed) or f"; expected one of: {', '.join(allowed)}"
            issues.append(document.issue((*path, key), f"unknown key {key!r}{hint}", at_key=True))
    return issues


def _issues_for(error: ValidationError, document: SpecDocument) -> list[SpecIssue]:
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and error.schema.get("additionalProperties") is False:
        return _unknown_keys(error, document, path)
    if "propertyNames" in error.absolute_schema_path:
        return [document.issue((*path, error.instance), f"key {error.message}", at_key=True)]
    custom = error.schema.get("errorMessage", {}).get(error.validator) if isinstance(error.schema, dict) else None
    if custom:
        message = custom.format(instance=_show(error.instance))
    elif error.validator == "type":
        message = _type_message(error)
    else:
        message = error.message
    return [document.issue(path, message)]


def schema_issues(document: SpecDocument) -> list[SpecIssue]:
    """Every way `document` breaks the schema, each located at its YAML node (an unknown key: at the key)."""
    issues = [issue for error in _validator().iter_errors(document.data) for issue in _issues_for(error, document)]
    return sorted(set(issues), key=lambda i: (i.file or "", i.line or 0, i.column or 0, i.json_path, i.message))


def validate_spec(
    source: str | bytes | os.PathLike[str] | Mapping[str, Any] | SpecDocument, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> SpecDocument:
    """Read `source` safely (see `read_spec_document`) and check it against the schema; imports nothing.

    Returns the validated document; raises SpecError listing every problem, each located.
    """
    document = source if isinstance(source, SpecDocument) else read_spec_document(source, max_bytes=max_bytes)
    issues = schema_issues(document)
    if issues:
        raise SpecError(issues)
    return document
