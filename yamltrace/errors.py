"""Every error yamltrace raises, under one base: `YamltraceError`.

Errors are data rendered late. A `SpecIssue` is one located problem in a spec (file, line, column,
JSON path, message); `SpecError` carries all of them and renders each as
`file:line:column: $.json.path: message`, so text, JSON and CI annotations share one source.
A `PatchProblem` is one reason a patch cannot apply; `PatchError` carries all of them. Each error is
also importable where its users meet it (`yamltrace.extraction.ExtractError`,
`yamltrace.kernels.UnsupportedModuleError`).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "YamltraceError",
    "SpecIssue",
    "SpecError",
    "PatchProblem",
    "PatchError",
    "CaptureError",
    "ExtractError",
    "BadRows",
    "ExtractInterrupted",
    "UnsupportedModuleError",
    "PatternError",
    "PositionError",
    "FolderError",
    "CacheNameError",
    "NeverRanWarning",
    "UnverifiedReleaseWarning",
    "format_json_path",
    "did_you_mean",
]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Bounds on what one error may cost, whatever the spec: a hostile spec must not turn into a huge message.
MAX_ISSUES = 50  # issues kept in a SpecError; the rest are counted in a last "and N more" issue
MAX_MESSAGE_CHARS = 1000  # characters kept of an issue's message, file name or JSON path
MAX_HINT_CHOICES = 500  # candidates difflib compares for a did-you-mean hint
MAX_HINT_WORD = 100  # longer words get no hint (difflib is quadratic in the word's length)


def format_json_path(path: Sequence[str | int]) -> str:
    """`("outputs", "a", 1)` -> `$.outputs.a[1]`; keys that are not identifiers are quoted: `$.patches['^A.*$']`."""
    parts = ["$"]
    for part in path:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif _IDENTIFIER.fullmatch(part):
            parts.append(f".{part}")
        else:
            parts.append(f"[{part!r}]")
    return "".join(parts)


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 1) -> str:
    """`"; did you mean 'x'?"` naming up to `n` of the closest `choices` (difflib), or `""` when none is close.

    With several: `"; did you mean 'a', 'b' or 'c'?"`. The work is bounded: only the first
    `MAX_HINT_CHOICES` candidates are compared, and a word longer than `MAX_HINT_WORD` gets no hint.
    """
    if not isinstance(word, str) or len(word) > MAX_HINT_WORD:  # a key that is no name (values={1: t}) gets no hint
        return ""
    candidates: set[str] = set()
    for choice in choices:
        if len(candidates) >= MAX_HINT_CHOICES:
            break
        if len(str(choice)) <= MAX_HINT_WORD:
            candidates.add(str(choice))
    close = [repr(c) for c in difflib.get_close_matches(word, sorted(candidates), n=n, cutoff=0.6)]
    if not close:
        return ""
    return f"; did you mean {close[0] if len(close) == 1 else ', '.join(close[:-1]) + ' or ' + close[-1]}?"


class YamltraceError(Exception):
    """Base of every error yamltrace raises on purpose: catch this one type to handle them all."""


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a spec: what is wrong, and where (1-based line and column when known)."""

    message: str
    json_path: str = "$"
    file: str | None = None
    line: int | None = None
    column: int | None = None

    def __post_init__(self) -> None:
        for name in ("message", "json_path", "file"):
            value = getattr(self, name)
            if isinstance(value, str) and len(value) > MAX_MESSAGE_CHARS:
                object.__setattr__(self, name, _shorten(value))

    def render(self) -> str:
        """`file:line:column: $.json.path: message`, leaving out what is unknown."""
        where = [self.file or "<string>"]
        if self.line is not None:
            where.append(str(self.line))
            if self.column is not None:
                where.append(str(self.column))
        return f"{':'.join(where)}: {self.json_path}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        """The issue as JSON-ready data, for machine-readable reports."""
        return {
            "file": self.file,
            "line": self.line,
            "column": self.column,
            "json_path": self.json_path,
            "message": self.message,
        }

    def with_note(self, note: str) -> SpecIssue:
        """A copy whose message ends with `note`, e.g. the `extends` chain that led to this file."""
        return replace(self, message=f"{self.message} {note}")


def _shorten(text: str) -> str:
    """`text` cut to MAX_MESSAGE_CHARS, saying how much was left out."""
    cut = MAX_MESSAGE_CHARS - 40
    return f"{text[:cut]}... ({len(text) - cut} more characters)"


def _order(issue: SpecIssue) -> tuple[Any, ...]:
    return (issue.file or "", issue.line or 0, issue.column or 0, issue.json_path, issue.message)


class SpecError(YamltraceError, ValueError):
    """A spec that cannot be used; `issues` lists the problems found, in file order.

    At most `MAX_ISSUES` issues are kept: past that, the last one says how many more were found, and
    `total` counts them all. Each issue's message is at most `MAX_MESSAGE_CHARS` long.
    """

    def __init__(self, issues: Iterable[SpecIssue], total: int | None = None) -> None:
        found = sorted(issues, key=_order)
        if not found:
            raise ValueError("SpecError needs at least one issue.")
        self.total = max(total or 0, len(found))
        if len(found) > MAX_ISSUES:
            more = self.total - MAX_ISSUES
            found = [
                *found[:MAX_ISSUES],
                SpecIssue(f"and {more} more problem{'' if more == 1 else 's'} not shown", "$", found[0].file),
            ]
        self.issues = tuple(found)
        super().__init__("\n".join(issue.render() for issue in self.issues))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.issues, self.total))

    @classmethod
    def single(
        cls,
        message: str,
        json_path: str = "$",
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> SpecError:
        """A SpecError with one issue."""
        return cls([SpecIssue(message, json_path, file, line, column)])


@dataclass(frozen=True)
class PatchProblem:
    """One reason a patch cannot apply: where (a module path or class name), and what is wrong."""

    message: str
    path: str | None = None

    def render(self) -> str:
        return self.message


class PatchError(YamltraceError, ValueError):
    """A patch cannot be applied; `problems` lists every reason found (nothing was changed)."""

    def __init__(self, problems: Iterable[PatchProblem | str]) -> None:
        self.problems = tuple(p if isinstance(p, PatchProblem) else PatchProblem(p) for p in problems)
        super().__init__("\n".join(p.render() for p in self.problems))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.problems,))


class CaptureError(YamltraceError, IndexError):
    """A capture cannot record what its recorder asks for (an index past a module's tuple output)."""


class ExtractError(YamltraceError, ValueError):
    """An extraction cannot start or continue: bad input, a directory from another run, mixed shapes."""


class BadRows(ExtractError):
    """Rows of an input that cannot be used: `source`, the first `problems` (`line N: why`), `count` in all."""

    def __init__(self, source: str, problems: list[str], count: int) -> None:
        self.source, self.problems, self.count = source, problems, count
        more = f"\n  ... and {count - len(problems)} more" if count > len(problems) else ""
        super().__init__(f"{source}: {count} bad row(s):\n  " + "\n  ".join(problems) + more)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.source, self.problems, self.count))


class ExtractInterrupted(KeyboardInterrupt):
    """`extract` was interrupted (Ctrl-C, or SIGTERM under the command line): a `KeyboardInterrupt` that
    says how many batches are safe in finished shards; running the same call again resumes after them.

    Not a `YamltraceError` on purpose: an interrupt is not an error, and `except Exception` must not
    swallow it."""

    def __init__(self, directory: os.PathLike[str] | str, batches: int, world: int) -> None:
        self.directory, self.batches, self.world = directory, batches, world
        whose = "" if world == 1 else "of this process "
        super().__init__(
            f"interrupted: {batches} batch(es) {whose}are safe in finished shards in {directory}; "
            "run the same command again to resume after them."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.directory, self.batches, self.world))


class UnsupportedModuleError(YamltraceError, TypeError):
    """A shipped kernel cannot replace this module (or be built from this config): the message says why."""


class PatternError(YamltraceError, ValueError):
    """A patch key that is not a pattern a spec may use; the message says why and how to fix it (a spec
    check reports it as a located `SpecIssue`)."""


class PositionError(YamltraceError, ValueError):
    """A captured tensor has no such dimension or positions; the collector adds which module and key
    and raises it as a `CaptureError`."""


class FolderError(YamltraceError, ValueError):
    """A file of an untrusted folder (checkpoint, activations, spec folder) that yamltrace refuses to read."""


class CacheNameError(YamltraceError, ValueError):
    """The cache was given under two names: `cache` and a deprecated alias (`past_key_values`, `cache_params`)."""


class NeverRanWarning(UserWarning):
    """A `trace` block's key recorded nothing because its modules, which exist, never ran in the block's
    calls of the model (a fused path that skips them, or code compiled before the block); a block
    recorded nothing because it never called the model it traces; an `intervene` block edited nothing
    because none of its interventions' modules ran. Make it an
    error where an empty capture must fail a run: `warnings.simplefilter("error", NeverRanWarning)`, or
    pytest's `-W error::yamltrace.NeverRanWarning`."""


class UnverifiedReleaseWarning(UserWarning):
    """The installed transformers is newer than every release yamltrace is verified with (a warning, not
    an error: yamltrace follows the newest verified release's semantics for it)."""
