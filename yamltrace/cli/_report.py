"""Validation results as data (`FileResult`, holding `SpecIssue`s), rendered late by a `Reporter`:
text (`file:line:column: $.path: message`), one JSON document, or GitHub workflow commands.
`validate` reports problems; `check` also reports warnings and notes (what each recorder hooks)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TextIO

from ..errors import SpecIssue

__all__ = [
    "FileResult",
    "escape_text",
    "escaped_issue",
    "Reporter",
    "TextReporter",
    "JsonReporter",
    "GitHubReporter",
    "REPORTERS",
]


@dataclass(frozen=True)
class FileResult:
    """One file's outcome: `status` is "valid", "invalid" or "unreadable"; `issues` says why;
    `warnings` (located, not failing) and `notes` (lines of what was found) come from `check`."""

    file: str
    status: str
    issues: tuple[SpecIssue, ...] = ()
    warnings: tuple[SpecIssue, ...] = ()
    notes: tuple[str, ...] = ()


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _skipped_text(n: int) -> str:
    """How a run says that walked YAML files were not specs."""
    return f"{_count(n, 'YAML file')} skipped (no top-level 'yamltrace:' key)"


class Reporter:
    """Renders a run's results to `stream`; subclasses choose the format. `detailed` (`check`) adds
    each file's warnings and notes, and a warnings count to the summary."""

    def __init__(self, stream: TextIO, *, detailed: bool = False) -> None:
        self.stream = stream
        self.detailed = detailed

    def report(self, results: Sequence[FileResult], *, skipped: Sequence[str] = ()) -> None:
        """Render `results`; `skipped`: the walked YAML files passed over as not specs (counted)."""
        raise NotImplementedError

    def summary(self, results: Sequence[FileResult]) -> dict[str, int]:
        statuses = [r.status for r in results]
        counts = {
            "files": len(results),
            "invalid": statuses.count("invalid"),
            "unreadable": statuses.count("unreadable"),
            "problems": sum(len(r.issues) for r in results),
        }
        if self.detailed:
            counts["warnings"] = sum(len(r.warnings) for r in results)
        return counts


def escape_text(text: str, *, keep: str = "") -> str:
    """`text` on one line: control characters (ESC included) and Unicode line breaks written as escapes
    (`\\n`, `\\x1b`, `\\u2028`), a backslash doubled, so a file name or message cannot forge lines of a
    report or drive a terminal. Characters in `keep` are left as they are (a format that escapes them
    its own way)."""
    return "".join(ch if (ch.isprintable() and ch != "\\") or ch in keep else _escape_char(ch) for ch in text)


def escaped_issue(issue: SpecIssue) -> str:
    """`issue` rendered on one line (`file:line:column: $.path: message`), its file, path and message escaped."""
    safe = replace(issue, message=escape_text(issue.message), json_path=escape_text(issue.json_path))
    if issue.file is not None:
        safe = replace(safe, file=escape_text(issue.file))
    return safe.render()


def _escape_char(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    return repr(ch)[1:-1] if ch in "\n\r\t" else f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


class TextReporter(Reporter):
    """Every issue as `file:line:column: $.path: message`, then `2 files, 1 invalid, 3 problems`.

    File names, paths and messages are escaped (see `escape_text`): one issue is always one line.
    """

    def report(self, results: Sequence[FileResult], *, skipped: Sequence[str] = ()) -> None:
        for result in results:
            for note in result.notes if self.detailed else ():
                print(escape_text(note), file=self.stream)
            for issue in result.issues:
                print(escaped_issue(issue), file=self.stream)
            for issue in result.warnings if self.detailed else ():
                print(escaped_issue(replace(issue, message=f"warning: {issue.message}")), file=self.stream)
        counts = self.summary(results)
        parts = [_count(counts["files"], "file"), f"{counts['invalid']} invalid"]
        if counts["unreadable"]:
            parts.append(f"{counts['unreadable']} unreadable")
        parts.append(_count(counts["problems"], "problem"))
        if self.detailed:
            parts.append(_count(counts["warnings"], "warning"))
        if skipped:
            parts.append(_skipped_text(len(skipped)))
        print(", ".join(parts), file=self.stream)


class JsonReporter(Reporter):
    """One JSON document: `valid`, `summary` counts, per-file `status` with `issues` as dicts, and the
    `skipped` files (walked YAML without a top-level `yamltrace:` key)."""

    def report(self, results: Sequence[FileResult], *, skipped: Sequence[str] = ()) -> None:
        document = {
            "valid": all(r.status == "valid" for r in results),
            "summary": self.summary(results),
            "files": [self.file_entry(r) for r in results],
            "skipped": list(skipped),
        }
        print(json.dumps(document, indent=2), file=self.stream)

    def file_entry(self, result: FileResult) -> dict[str, object]:
        """One file's `status` and `issues` (with `detailed`, its `warnings` and `notes` too)."""
        entry: dict[str, object] = {"file": result.file, "status": result.status, "issues": [i.to_dict() for i in result.issues]}
        if self.detailed:
            entry["warnings"] = [issue.to_dict() for issue in result.warnings]
            entry["notes"] = list(result.notes)
        return entry


def _escape_data(text: str) -> str:
    """GitHub's escapes for a workflow command's text (`%`, CR, LF), every other control character escaped."""
    return escape_text(text, keep="\\\r\n").replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


class GitHubReporter(Reporter):
    """GitHub Actions `::error` workflow commands, one per issue (`::warning` per warning, with
    `detailed`), so each shows on its line in the diff; one `::notice` when walked YAML files were
    skipped as not specs."""

    def report(self, results: Sequence[FileResult], *, skipped: Sequence[str] = ()) -> None:
        if skipped:
            print(f"::notice title=yamltrace::{_escape_data(_skipped_text(len(skipped)))}", file=self.stream)
        for result in results:
            for issue in result.issues:
                self.command("error", result, issue)
            for issue in result.warnings if self.detailed else ():
                self.command("warning", result, issue)

    def command(self, kind: str, result: FileResult, issue: SpecIssue) -> None:
        """Print one `::error` or `::warning` workflow command for `issue`."""
        where = {"file": issue.file or result.file, "line": issue.line, "col": issue.column, "title": "yamltrace"}
        properties = ",".join(f"{k}={_escape_property(str(v))}" for k, v in where.items() if v is not None)
        message = _escape_data(f"{issue.json_path}: {issue.message}")
        print(f"::{kind} {properties}::{message}", file=self.stream)


REPORTERS: dict[str, type[Reporter]] = {"text": TextReporter, "json": JsonReporter, "github": GitHubReporter}
