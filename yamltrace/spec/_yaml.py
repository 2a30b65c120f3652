"""YAML text -> plain data with node locations, read safely and strictly (one file; no `extends`).

A spec is data that may arrive with a downloaded checkpoint, so reading it is deliberately narrow:

- parsing uses a `yaml.SafeLoader` subclass that only composes nodes; values are built here and may
  be text, numbers, true/false, null, mappings and lists. Any other tag (`!!python/...`, `!!binary`,
  `!custom`, ...) is an error.
- anchors and aliases are refused at the first one seen, before anything is built, so an alias bomb
  cannot expand; nesting deeper than `MAX_DEPTH` is refused before Python's recursion limit is near.
- a duplicate mapping key is an error (PyYAML would silently keep the last one), and so is a YAML
  1.1 merge key (`<<`).
- plain scalars follow a strict subset of the YAML 1.2 core schema: only `true`/`false` (also
  `True`, `TRUE`, ...) are booleans, only `null`, `~` and the empty value are null, only decimal
  integers without leading zeros and decimal floats with a dot or an exponent are numbers. Everything
  else (`on`, `no`, `yes`, `off`, `0o17`, `0x1F`, `1_000`, `012`, dates, `.inf`) stays text exactly
  as written, and mapping keys are always the text as written (an output named `on` stays `"on"`).
- the input is capped at `max_bytes` (256 KiB by default, for the whole `extends` chain) and must be
  UTF-8. Every limit is in `_limits`.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

import yaml
from yaml.events import AliasEvent, StreamEndEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..errors import SpecError, SpecIssue, format_json_path
from ._limits import DEFAULT_MAX_BYTES, HIDDEN_LINE_BREAKS, MAX_DEPTH, MAX_INTEGER_DIGITS, MAX_NODES, Budget

__all__ = ["DEFAULT_MAX_BYTES", "MAX_DEPTH", "ALLOWED", "Location", "Part", "noted", "read_file", "read_text"]

Path_ = tuple[str | int, ...]

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_TAG + t for t in ("str", "int", "float", "bool", "null"))
_SCALAR_TAGS = {_STR, _INT, _FLOAT, _BOOL, _NULL}
_COLLECTION_TAGS = {_TAG + "map", _TAG + "seq"}
_TRUE, _FALSE, _NULLS = {"true", "True", "TRUE"}, {"false", "False", "FALSE"}, {"null", "Null", "NULL", "~", ""}
_INT_RE = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT_RE = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+)")


class _Refused(yaml.MarkedYAMLError):
    """A construct the spec reader refuses (alias, anchor, depth, second document), with its mark."""

    def __init__(self, message: str, mark: yaml.Mark | None) -> None:
        super().__init__(problem=message, problem_mark=mark)


class _Event(Protocol):
    """What this module reads of a parser event: the pure-Python parser marks each with a `yaml.Mark`."""

    anchor: str | None  # node events only; the composer peeks at those in compose_node
    start_mark: yaml.Mark


class _SpecLoader(yaml.SafeLoader):
    """SafeLoader that composes one document into nodes, refusing anchors, aliases and deep nesting."""

    yaml_implicit_resolvers: dict[str, list[tuple[str, re.Pattern[str]]]] = {}

    if TYPE_CHECKING:
        # types-PyYAML leaves the parser's event methods unannotated.
        def peek_event(self) -> _Event: ...
        def get_event(self) -> _Event: ...

    def __init__(self, text: str, budget: Budget | None = None, *, lenient: bool = False) -> None:
        super().__init__(text)
        self._depth = 0
        self._budget = budget or Budget()
        self._lenient = lenient  # anchors dropped and aliases read as null, never expanded: for the other issues

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()
        if isinstance(event, AliasEvent):
            if not self._lenient:
                raise _Refused(f"aliases (*{event.anchor}) are not allowed in a spec; write the value out", event.start_mark)
            self.get_event()
            return ScalarNode(_NULL, "", event.start_mark, event.start_mark)
        if event.anchor is not None:
            if not self._lenient:
                raise _Refused(f"anchors (&{event.anchor}) are not allowed in a spec; write the value out", event.start_mark)
            event.anchor = None
        if self._depth >= MAX_DEPTH:
            raise _Refused(f"nesting is deeper than {MAX_DEPTH} levels; a spec needs only a few", event.start_mark)
        if self._budget.nodes <= 0:
            message = f"the spec has more than {MAX_NODES} YAML nodes (MAX_NODES, over the whole extends chain)"
            raise _Refused(message, event.start_mark)
        self._budget.nodes -= 1
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_single(self) -> Node | None:
        """The root node of the only document, or None for an empty stream."""
        self.get_event()  # StreamStartEvent
        root = None if self.check_event(StreamEndEvent) else self.compose_document()
        if not self.check_event(StreamEndEvent):
            raise _Refused("a spec is one YAML document; remove the second one", self.get_event().start_mark)
        return root


def _add_resolvers() -> None:
    """Resolve plain scalars by the strict rules above; anything unmatched stays text."""
    for tag, pattern, first in (
        (_BOOL, r"true|True|TRUE|false|False|FALSE", "tTfF"),
        (_NULL, r"null|Null|NULL|~|", "nN~"),
        (_INT, _INT_RE.pattern, "-0123456789"),
        (_FLOAT, _FLOAT_RE.pattern, "-0123456789"),
    ):
        starts = [*first, ""] if tag == _NULL else list(first)
        _SpecLoader.add_implicit_resolver(tag, re.compile(f"^(?:{pattern})$"), starts)


_add_resolvers()


@dataclass(frozen=True)
class Location:
    """Where a node was written: display file name, 1-based line and column, and the `extends` chain to it."""

    file: str | None
    line: int
    column: int
    chain: tuple[str, ...] = ()

    def issue(self, message: str, json_path: str) -> SpecIssue:
        return noted(SpecIssue(message, json_path, self.file, self.line, self.column), self.chain)


def noted(issue: SpecIssue, chain: tuple[str, ...]) -> SpecIssue:
    """Name the `extends` chain in issues found in a base file, so the user knows why it was read."""
    return issue.with_note(f"(extends chain: {' -> '.join(chain)})") if len(chain) > 1 else issue


@dataclass
class Part:
    """One file's plain data and node locations; building it collects every issue instead of stopping."""

    file: str | None
    chain: tuple[str, ...]
    issues: list[SpecIssue] = field(default_factory=list)
    values: dict[Path_, Location] = field(default_factory=dict)
    keys: dict[Path_, Location] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    raw: bytes | None = None  # the bytes parsed, for a part read from a file (`read_file`)

    def where(self, mark: yaml.Mark) -> Location:
        return Location(self.file, mark.line + 1, mark.column + 1, self.chain)

    def fail(self, mark: yaml.Mark, path: Path_, message: str) -> None:
        self.issues.append(self.where(mark).issue(message, format_json_path(path)))

    def build(self, node: Node, path: Path_) -> Any:
        self.values[path] = self.where(node.start_mark)
        if isinstance(node, ScalarNode):
            return self._scalar(node, path)
        if node.tag not in _COLLECTION_TAGS:
            return self.fail(node.start_mark, path, f"tag {_short(node.tag)} is not allowed; {ALLOWED}")
        if isinstance(node, SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return self._mapping(cast(MappingNode, node), path)  # the composer makes only these three kinds

    def _mapping(self, node: MappingNode, path: Path_) -> dict[str, Any]:
        result: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag not in _SCALAR_TAGS:
                kind = f"tag {_short(key_node.tag)}" if isinstance(key_node, ScalarNode) else _kind(key_node)
                self.fail(key_node.start_mark, path, f"mapping keys must be plain text, not {kind}")
                continue
            key = key_node.value
            key_path = (*path, key)
            if key == "<<" and key_node.style is None:
                self.fail(key_node.start_mark, key_path, "merge keys (<<) are not supported in a spec; write the keys out")
                continue
            if key in first_line:
                self.fail(key_node.start_mark, key_path, f"duplicate key {key!r} (first at line {first_line[key]}); keep one")
                continue
            first_line[key] = key_node.start_mark.line + 1
            self.keys[key_path] = self.where(key_node.start_mark)
            result[key] = self.build(value_node, key_path)
        return result

    def _scalar(self, node: ScalarNode, path: Path_) -> Any:
        value, tag = node.value, node.tag
        if tag == _STR:
            return value
        if tag == _NULL and value in _NULLS:
            return None
        if tag == _BOOL and value in _TRUE | _FALSE:
            return value in _TRUE
        if tag == _INT and len(value) > MAX_INTEGER_DIGITS + 1 and _INT_RE.fullmatch(value):
            return self.fail(
                node.start_mark,
                path,
                f"number {value[:20]}... has over {MAX_INTEGER_DIGITS} digits (MAX_INTEGER_DIGITS), so it is too long",
            )
        try:
            if tag == _INT and _INT_RE.fullmatch(value):
                return int(value)
            if tag == _FLOAT and _FLOAT_RE.fullmatch(value):
                return float(value)
        except ValueError:
            return self.fail(node.start_mark, path, f"number {value[:20]}... is too long")
        if tag in _SCALAR_TAGS:
            return self.fail(node.start_mark, path, f"{value!r} is not a valid {_short(tag)}; quote it to make it text")
        return self.fail(node.start_mark, path, f"tag {_short(tag)} is not allowed; {ALLOWED}")


ALLOWED = "a spec holds only text, numbers, true/false, null, mappings and lists"


def _short(tag: str) -> str:
    return "!!" + tag[len(_TAG) :] if tag.startswith(_TAG) else tag


def _kind(value: Any) -> str:
    if isinstance(value, (MappingNode, Mapping)):
        return "a mapping"
    if isinstance(value, (SequenceNode, list, tuple)):
        return "a list"
    return "a scalar" if isinstance(value, ScalarNode) else type(value).__name__


def _decode(raw: bytes, file: str | None, chain: tuple[str, ...]) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        message = f"not UTF-8: byte 0x{raw[e.start]:02x} cannot be decoded; save the file as UTF-8"
        raise SpecError([noted(SpecIssue(message, "$", file, line, column), chain)]) from None


def _too_big(max_bytes: int, file: str | None, chain: tuple[str, ...]) -> SpecError:
    message = f"the spec is larger than {max_bytes} bytes; pass a larger max_bytes= to read it"
    return SpecError([noted(SpecIssue(message, "$", file), chain)])


def _hidden_line_break(text: str, file: str | None, chain: tuple[str, ...]) -> SpecError | None:
    """A SpecError at the first NEL, LINE SEPARATOR or PARAGRAPH SEPARATOR of `text`, or None."""
    found = [i for i in (text.find(c) for c in HIDDEN_LINE_BREAKS) if i >= 0]
    if not found:
        return None
    at = min(found)
    line, column = text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1
    message = (
        f"{HIDDEN_LINE_BREAKS[text[at]]} is a line break to YAML but not to most editors, so it could hide a "
        "line from a reviewer; use a plain newline"
    )
    return SpecError([noted(SpecIssue(message, "$", file, line, column), chain)])


def _parse(text: str, file: str | None, chain: tuple[str, ...], budget: Budget | None = None, lenient: bool = False) -> Part:
    """Compose and build one YAML document; raises SpecError for YAML errors and refused constructs
    (`lenient`: anchors and aliases pass, an alias read as null, and each tab reads as a space, so the
    rest can be checked)."""
    if lenient:
        text = text.replace("\t", " ")
    part = Part(file, chain)
    hidden = _hidden_line_break(text, file, chain)
    if hidden is not None:
        raise hidden
    try:
        root = _SpecLoader(text, budget, lenient=lenient).compose_single()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        message = e.problem or e.context or "invalid YAML"
        if e.problem and "'\\t'" in e.problem:  # PyYAML writes the tab as its repr, '\t'
            message = "a tab character cannot start a token (YAML indents with spaces); replace the tab with spaces"
        if e.context and e.problem:
            message += f" ({e.context})"
        line, column = (mark.line + 1, mark.column + 1) if mark else (None, None)
        raise SpecError([noted(SpecIssue(message, "$", file, line, column), chain)]) from None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        column = e.position - (text.rfind("\n", 0, e.position) + 1) + 1
        message = f"unacceptable character #x{e.character:04x}: {e.reason}"
        raise SpecError([noted(SpecIssue(message, "$", file, line, column), chain)]) from None
    except yaml.YAMLError as e:
        raise SpecError([noted(SpecIssue(f"invalid YAML: {e}", "$", file), chain)]) from None
    if root is None or isinstance(root, ScalarNode) and root.tag == _NULL and root.value == "":
        part.issues.append(noted(SpecIssue("the spec is empty; it needs at least 'yamltrace: 1'", "$", file), chain))
    elif not isinstance(root, MappingNode):
        part.fail(
            root.start_mark, (), f"the top level of a spec must be a mapping (yamltrace: 1, outputs: ...), not {_kind(root)}"
        )
    else:
        part.data = part.build(root, ())
    if part.issues:
        raise SpecError(part.issues)
    return part


def read_text(
    text: str | bytes,
    max_bytes: int,
    file: str | None,
    chain: tuple[str, ...],
    budget: Budget | None = None,
    lenient: bool = False,
) -> Part:
    """Parse one document of at most `max_bytes` (and of what is left of `budget`, shared by an extends chain)."""
    budget = budget or Budget(bytes=max_bytes)
    size = len(text) if isinstance(text, bytes) or len(text) > max_bytes else len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes or not budget.spend_bytes(size):
        raise _too_big(max_bytes, file, chain)
    if isinstance(text, bytes):
        text = _decode(text, file, chain)
    return _parse(text, file, chain, budget, lenient)


def read_file(
    path: str, display: str, max_bytes: int, chain: tuple[str, ...], budget: Budget | None = None, lenient: bool = False
) -> Part:
    """Read a regular file (never a FIFO or device, which could block) of at most `max_bytes`."""

    def fail(message: str) -> SpecError:
        return SpecError([noted(SpecIssue(message, "$", display), chain)])

    try:
        info = os.stat(path)
        regular = stat.S_ISREG(info.st_mode)
        raw = b""
        if regular and info.st_size <= max_bytes:
            with open(path, "rb") as f:
                raw = f.read(max_bytes + 1)
    except FileNotFoundError:
        raise fail("file not found") from None
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise fail(f"cannot read the file: {reason}") from None
    if not regular:
        raise fail("not a regular file; a spec must be a YAML file")
    if info.st_size > max_bytes or len(raw) > max_bytes:
        raise _too_big(max_bytes, display, chain)
    part = read_text(raw, max_bytes, display, chain, budget, lenient)
    part.raw = raw
    return part
