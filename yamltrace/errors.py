"""SpecError and its structured issues: every problem in a spec, located, rendered late.

An issue is data (file, line, column, JSON path, message); `SpecError` carries all of them and renders
each as `file:line:column: $.json.path: message`, so text, JSON and CI annotations share one source.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["SpecIssue", "SpecError"]


@dataclass(frozen=True)
class SpecIssue:
    """One problem in a spec: what is wrong, and where (1-based line and column when known)."""

    message: str
    json_path: str = "$"
    file: str | None = None
    line: int | None = None
    column: int | None = None

    def render(self) -> str:
        """`file:line:column: $.json.path: message`, leaving out what is unknown."""
        where = [self.file or "<string>"]
        if self.line is not None:
            where.append(str(self.line))
            if self.column is not None:
                where.append(str(self.column))
        return f"{':'.join(where)}: {self.json_path}: {self.message}"


class SpecError(ValueError):
    """A spec that cannot be used; `issues` lists every problem found, in file order."""

    def __init__(self, issues: Iterable[SpecIssue]) -> None:
        self.issues = tuple(sorted(issues, key=lambda i: (i.file or "", i.line or 0, i.column or 0)))
        if not self.issues:
            raise ValueError("SpecError needs at least one issue.")
        super().__init__("\n".join(issue.render() for issue in self.issues))

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
