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
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError

from ..errors import SpecError, SpecIssue, did_you_mean
from ._limits import intervention_issues, recorder_issues, size_issues, unique_key
from ._patterns import PatternError, compile_pattern
from ._reader import DEFAULT_MAX_BYTES, SpecDocument, read_spec_document

__all__ = ["SCHEMA_ID", "SCHEMA_FILE", "checked_document", "load_schema", "schema_issues", "schema_path", "validate_spec"]

SCHEMA_ID = "https://yamltrace.dev/schemas/yamltrace-spec-v1.schema.json"
SCHEMA_FILE = "yamltrace-spec-v1.schema.json"

_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)")
_NUMBER_LIKE = re.compile(r"[-+]?[0-9][0-9_.oOxXbBeE+-]*")
# A list item that YAML flow style reads back unquoted as the same value.
_PLAIN_ITEM = re.compile(r"-?[0-9]+|[A-Za-z_][A-Za-z0-9_.:]*")


def schema_path() -> str:
    """The installed schema file's path: what an editor's `$schema=` modeline or `yaml.schemas` setting
    can name to resolve offline (the `$id` URL is an identifier nothing serves)."""
    return str(resources.files("yamltrace").joinpath("schemas", SCHEMA_FILE))


@functools.cache
def _schema() -> dict[str, Any]:
    text = resources.files("yamltrace").joinpath("schemas", SCHEMA_FILE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def load_schema() -> dict[str, Any]:
    """The spec JSON Schema (draft 2020-12), read from the installed package; a fresh copy each call."""
    return copy.deepcopy(_schema())


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    # YAML numbers are never integers when written with a dot: `index: 1.0` is an error, not 1.
    checker = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _, value: isinstance(value, int) and not isinstance(value, bool)
    )
    cls = jsonschema.validators.extend(
        jsonschema.Draft202012Validator, {"uniqueItems": _unique_items, "properties": _properties}, type_checker=checker
    )
    validator: jsonschema.protocols.Validator = cls(_schema())
    return validator


def _unique_items(validator: Any, unique: bool, instance: Any, schema: Mapping[str, Any]) -> Any:
    """`uniqueItems` in linear time (jsonschema compares every pair when items cannot be sorted)."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: dict[str, int] = {}
    for i, item in enumerate(instance):
        key = unique_key(float(item) if isinstance(item, int) and not isinstance(item, bool) else item)
        if key in seen:
            yield ValidationError(f"{_show(item)} is listed twice (items {seen[key]} and {i}); keep one")
            return
        seen[key] = i


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
    if "boolean" in expected and (isinstance(value, str) or value in (0, 1)) and not isinstance(value, bool):
        return message + "; write true or false"
    if "integer" in expected and isinstance(value, str) and _DECIMAL.fullmatch(value):
        return message + "; it is quoted, so it is text: remove the quotes"
    if "integer" in expected and isinstance(value, (str, float)) and _NUMBER_LIKE.fullmatch(str(value)):
        return message + "; write a plain decimal integer (no leading zeros, underscores, 0o/0x or dot)"
    if expected == ["array"] and isinstance(value, (int, str)) and not isinstance(value, bool):
        return message + _list_hint(str(value))
    return message


def _list_hint(text: str) -> str:
    """How to write `text` (a scalar given where a list is expected) as a YAML list: `0,-1` is `[0, -1]`."""
    items = [item.strip() for item in text.split(",")]
    if len(items) > 1 and all(_PLAIN_ITEM.fullmatch(item) for item in items):
        return f"; write [{', '.join(items)}] for a list"
    item = text if _PLAIN_ITEM.fullmatch(text) else json.dumps(text)
    return f"; write [{item}] for a list of one"


def _subschema(error: ValidationError) -> Mapping[str, Any]:
    """The schema object an error came from (`error.schema` is typed to allow a boolean schema or none)."""
    return error.schema if isinstance(error.schema, Mapping) else {}


def _unknown_keys(error: ValidationError, document: SpecDocument, path: tuple[str | int, ...]) -> list[SpecIssue]:
    allowed = list(_subschema(error).get("properties", {}))
    issues = []
    instance: Any = error.instance  # the mapping that has the unknown keys
    for key in instance:
        if key not in allowed:
            hint = did_you_mean(key, allowed) or f"; expected one of: {', '.join(allowed)}"
            issues.append(document.issue((*path, key), f"unknown key {key!r}{hint}", at_key=True))
    return issues


def _custom_message(error: ValidationError) -> str | None:
    """The schema's own message for `error`, read as yaml-language-server reads it, so an editor and
    yamltrace say the same thing: `patternErrorMessage` for a failed `pattern` (yamltrace puts the value
    first: `'gpu' is not a device; ...`), else the failing object's `errorMessage` (a string, for every
    failure of that object), else, for `oneOf` / `anyOf`, the `errorMessage` all its alternatives share."""
    schema = _subschema(error)
    if error.validator == "pattern" and isinstance(schema.get("patternErrorMessage"), str):
        return f"{_show(error.instance)} is {schema['patternErrorMessage']}"
    message = schema.get("errorMessage")
    if isinstance(message, str):
        return message
    if error.validator in ("oneOf", "anyOf") and isinstance(error.validator_value, list):
        shared = {alt.get("errorMessage") if isinstance(alt, Mapping) else None for alt in error.validator_value}
        if len(shared) == 1 and isinstance(only := shared.pop(), str):
            return only
    return None


def _properties(validator: Any, properties: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]) -> Any:
    """`properties`, with a property whose schema is `false` reported at the object that forbids it,
    where that object's `errorMessage` says why (`{"properties": {"index": false}, "errorMessage": ...}`,
    the form editors show)."""
    if not validator.is_type(instance, "object"):
        return
    for name, subschema in properties.items():
        if name not in instance:
            continue
        if subschema is False:
            yield ValidationError(f"{name!r} is not allowed here")
        else:
            yield from validator.descend(instance[name], subschema, path=name, schema_path=name)


def _issues_for(error: ValidationError, document: SpecDocument) -> list[SpecIssue]:
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and _subschema(error).get("additionalProperties") is False:
        return _unknown_keys(error, document, path)
    if "propertyNames" in error.absolute_schema_path:
        key: Any = error.instance  # propertyNames validates a key, a str
        return [document.issue((*path, key), f"key {error.message}", at_key=True)]
    custom = _custom_message(error)
    if custom:
        message = custom
    elif error.validator == "type":
        message = _type_message(error)
    else:
        message = error.message
    return [document.issue(path, message)]


def _patch_key_issues(document: SpecDocument) -> list[SpecIssue]:
    """Patch keys that are not linear-time patterns a spec may use (see `_patterns`)."""
    patches = document.data.get("patches")
    issues = []
    for key in patches if isinstance(patches, Mapping) else ():
        try:
            compile_pattern(key)
        except PatternError as e:
            issues.append(document.issue(("patches", key), str(e), at_key=True))
    return issues


def content_issues(document: SpecDocument) -> list[SpecIssue]:
    """What a schema-valid document may still get wrong: reserved output keys, recorder and intervention fields, patch keys."""
    issues: list[SpecIssue] = []
    recorder_issues(document.data, lambda path, message: issues.append(document.issue(path, message)))
    intervention_issues(document.data, lambda path, message: issues.append(document.issue(path, message)))
    return issues + _patch_key_issues(document)


def _sorted(issues: list[SpecIssue]) -> list[SpecIssue]:
    return sorted(set(issues), key=lambda i: (i.file or "", i.line or 0, i.column or 0, i.json_path, i.message))


def structure_issues(document: SpecDocument) -> list[SpecIssue]:
    """Every way `document` breaks a size limit or the schema; a document over a size limit is not given to jsonschema."""
    issues: list[SpecIssue] = []
    size_issues(document.data, lambda path, message: issues.append(document.issue(path, message)))
    if not issues:
        issues = [issue for error in _validator().iter_errors(document.data) for issue in _issues_for(error, document)]
    return _sorted(issues)


def schema_issues(document: SpecDocument) -> list[SpecIssue]:
    """Every way `document` breaks the schema or a limit, each located at its YAML node (an unknown key: at the key)."""
    issues = structure_issues(document)
    return issues if issues else _sorted(content_issues(document))


def _issues_past_refusals(source: Any, refused: Sequence[SpecIssue], max_bytes: int) -> list[SpecIssue]:
    """The schema problems of the rest of a file a strict read refused (an anchor, an alias, a tab), read
    again leniently; none when that read fails too. A problem at a refused node (an alias read as null) is dropped."""
    if isinstance(source, Mapping):
        return []
    try:
        document = read_spec_document(source, max_bytes=max_bytes, lenient=True)
    except SpecError:
        return []
    at = {(i.file, i.line, i.column) for i in refused}
    texts: dict[str | None, list[str]] = {file: raw.decode("utf-8", "replace").splitlines() for file, _, raw in document.read}
    if isinstance(source, (str, bytes)) and not texts:
        text = source if isinstance(source, str) else source.decode("utf-8", "replace")
        texts = {None: text.splitlines(), "<string>": text.splitlines()}

    def at_alias(issue: SpecIssue) -> bool:
        lines = texts.get(issue.file, [])
        if issue.line is None or issue.column is None or issue.line > len(lines):
            return False
        return lines[issue.line - 1][issue.column - 1 : issue.column] == "*"

    return [i for i in schema_issues(document) if (i.file, i.line, i.column) not in at and not at_alias(i)]


def checked_document(
    source: str | bytes | os.PathLike[str] | Mapping[str, Any] | SpecDocument, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> tuple[SpecDocument, list[SpecIssue]]:
    """`source` read and checked for structure (SpecError if that fails), with its content issues.

    `load_spec` reports content issues together with what resolving the classes finds; `validate_spec`
    raises them. Both therefore refuse the same specs.
    """
    if isinstance(source, SpecDocument):
        document = source
    else:
        try:
            document = read_spec_document(source, max_bytes=max_bytes)
        except SpecError as e:
            raise SpecError(_sorted([*e.issues, *_issues_past_refusals(source, e.issues, max_bytes)])) from None
    issues = structure_issues(document)
    if issues:
        raise SpecError(issues)
    return document, content_issues(document)


def validate_spec(
    source: str | bytes | os.PathLike[str] | Mapping[str, Any] | SpecDocument, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> SpecDocument:
    """Read `source` safely (see `read_spec_document`) and check it against the schema; imports nothing.

    Needs only PyYAML and jsonschema: it never imports torch or a module the spec names, so it is what
    CI and pre-commit run (`yamltrace validate`). Class names are not resolved: `load_spec` does that.

    Args:
        source: a path, YAML text or bytes, a mapping, or an already read `SpecDocument`. A file's
            `extends` chain is read and checked too.
        max_bytes: the largest spec accepted, counted over the whole `extends` chain.

    Returns:
        The validated `SpecDocument` (the merged mapping, with each node's file, line and column).

    Raises:
        SpecError: every problem found, each located (`file:line:column: $.json.path: message`).

    Example:
        >>> from yamltrace import SpecError, validate_spec
        >>> try:
        ...     validate_spec({"yamltrace": 1, "outputs": {"hidden_states": {"target": "X", "idx": 0}}})
        ... except SpecError as e:
        ...     print(e.issues[0].message)
        unknown key 'idx'; did you mean 'index'?
    """
    document, issues = checked_document(source, max_bytes=max_bytes)
    if issues:
        raise SpecError(issues)
    return document
