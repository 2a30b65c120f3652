"""Reading the code blocks of a Markdown page, and running them as tests/integration/test_docs.py does.

The conventions (CONTRIBUTING.md, "Code blocks in the docs") in short:

- ```python blocks run in page order, in one namespace per page, in a temporary directory that holds a
  copy of the repository's `specs/`;
- ```yaml blocks are specs: validated, then loaded (class names resolved);
- ```sh / ```console blocks are `yamltrace ...` commands, run in-process (`yamltrace.cli.main`);
- ```json and ```toml blocks must parse; blocks in any other language, or none, are shown text;
- a marker comment on the line before a fence changes that: `<!-- docs-test: skip REASON -->`,
  `config` (YAML that is not a spec: parsed only), `fragment` (part of a spec: `yamltrace: 1` is
  added), `validate-only` (checked against the schema, names not resolved), `file=PATH` (also written
  to PATH), `exit=N` (the commands' expected status), `output` (a text block that must equal what the
  previous Python or shell block printed);
- hidden Python, run at its place in the page and invisible when rendered:
  `<!-- docs-test: python` on its own line, the code, then `-->`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

RUN = {
    "python": "python",
    "py": "python",
    "yaml": "yaml",
    "yml": "yaml",
    "sh": "shell",
    "bash": "shell",
    "shell": "shell",
    "console": "shell",
    "json": "json",
    "toml": "toml",
}
FLAGS = {"skip", "config", "fragment", "validate-only", "output"}

_MARKER = re.compile(r"<!--\s*docs-test:(?P<body>.*?)-->", re.DOTALL)
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+)(?P<info>[^\n`]*)$")


@dataclass
class Block:
    """One thing to check on a page: a fenced block, or hidden Python from a marker comment."""

    page: str
    line: int  # 1-based line of the first line of code
    kind: str  # python | yaml | shell | json | toml | text
    code: str
    flags: set[str] = field(default_factory=set)
    reason: str = ""
    file: str | None = None
    exit: int = 0
    hidden: bool = False

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _options(page: str, line: int, body: str) -> tuple[set[str], str, str | None, int]:
    flags: set[str] = set()
    reason, file, status = "", None, 0
    words = body.split()
    for i, word in enumerate(words):
        if word == "skip":
            flags.add("skip")
            reason = " ".join(words[i + 1 :])
            break
        if word.startswith("file="):
            file = word[len("file=") :]
        elif word.startswith("exit="):
            status = int(word[len("exit=") :])
        elif word in FLAGS:
            flags.add(word)
        else:
            raise ValueError(f"{page}:{line}: unknown docs-test option {word!r}; known: {sorted(FLAGS)}, file=, exit=")
    if "skip" in flags and not reason:
        raise ValueError(f"{page}:{line}: `docs-test: skip` needs a reason")
    return flags, reason, file, status


def blocks(path: Path, name: str) -> list[Block]:
    """Every fenced block and hidden Python block of the page, in order, with its markers applied."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    pending: tuple[set[str], str, str | None, int] | None = None
    i = 0
    while i < len(lines):
        text = lines[i]
        stripped = text.strip()
        if stripped.startswith("<!--") and "docs-test:" in stripped:
            end = i
            while "-->" not in lines[end]:
                end += 1
            comment = "\n".join(lines[i : end + 1])
            body = _MARKER.search(comment)
            if body is None:
                raise ValueError(f"{name}:{i + 1}: malformed docs-test comment")
            head, _, rest = body.group("body").partition("\n")
            if head.strip() == "python":
                found.append(Block(name, i + 2, "python", rest, hidden=True))
            else:
                pending = _options(name, i + 1, body.group("body"))
            i = end + 1
            continue
        fence = _FENCE.match(text)
        if fence:
            indent, ticks = fence.group("indent"), fence.group("fence")
            language = fence.group("info").strip().split(" ")[0].lower()
            end = i + 1
            while end < len(lines) and lines[end].strip() != ticks:
                end += 1
            code = "\n".join(line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : end])
            flags, reason, file, status = pending or (set(), "", None, 0)
            found.append(Block(name, i + 2, RUN.get(language, "text"), code + "\n", flags, reason, file, status))
            pending = None
            i = end + 1
            continue
        if stripped and pending is not None:
            raise ValueError(f"{name}:{i + 1}: a docs-test marker must be followed by a code block")
        i += 1
    return found


def commands(block: Block) -> list[list[str]]:
    """The commands of a shell block: `\\` continuations joined, comments and console output dropped."""
    text = block.code.replace("\\\n", " ")
    argvs = []
    for line in text.splitlines():
        line = line.strip()
        if block.code.lstrip().startswith("$ "):  # console transcript: only `$ ` lines are commands
            if not line.startswith("$ "):
                continue
            line = line[2:]
        if not line or line.startswith("#"):
            continue
        argvs.append(shlex.split(line, comments=True))
    return argvs
