"""The GitHub reporter escapes a message's control characters, commas and colons in its annotation
(a message the command line cannot produce one character at a time)."""

from __future__ import annotations

import io

from yamltrace.cli._report import FileResult, GitHubReporter
from yamltrace.errors import SpecIssue


def test_github_escaping() -> None:
    issue = SpecIssue("50% sure\r\nnext line: a, b", "$.outputs['a:b']", "dir/a,b:c%.yaml", 3, 7)
    stream = io.StringIO()
    GitHubReporter(stream).report([FileResult("dir/a,b:c%.yaml", "invalid", (issue,))])
    assert stream.getvalue() == (
        "::error file=dir/a%2Cb%3Ac%25.yaml,line=3,col=7,title=yamltrace::$.outputs['a:b']: 50%25 sure%0D%0Anext line: a, b\n"
    )
