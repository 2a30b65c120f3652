"""Every code block of every page under docs/ and of the README and CHANGELOG runs (tests/helpers_docs.py).

One test per page: its Python blocks (shown and hidden) run in order in one namespace, in a temporary
directory holding a copy of `specs/`; its YAML blocks are specs that validate and load; its shell blocks
are `yamltrace` commands run in-process, each expected to exit 0 (or the status its marker gives).
Blocks marked `skip` say why (a network, a GPU, a package yamltrace does not depend on).
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from helpers import ROOT
from helpers_docs import Block, blocks, commands

from yamltrace import load_spec, validate_spec
from yamltrace.cli import main

PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _python(block: Block, namespace: dict[str, Any]) -> None:
    # Padded so a traceback's line numbers are the page's, and linecache shows the page's lines.
    source = "\n" * (block.line - 1) + block.code
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, str(ROOT / block.page), "exec"), namespace)
    if not block.hidden:
        namespace["last_output"] = out.getvalue()


def _yaml(block: Block, namespace: dict[str, Any]) -> None:
    if "config" in block.flags:
        assert yaml.safe_load(block.code) is not None, f"{block.where}: empty YAML"
        return
    text = ("yamltrace: 1\n" + block.code) if "fragment" in block.flags else block.code
    source: Any = Path(block.file) if block.file and "fragment" not in block.flags else text
    validate_spec(source)
    if "validate-only" not in block.flags:
        # The docs are trusted: resolving checks that every class they name exists.
        load_spec(source, trust_imports=True)


def _shell(block: Block, namespace: dict[str, Any]) -> None:
    argvs = commands(block)
    assert argvs, f"{block.where}: a shell block with no command"
    out = io.StringIO()
    for argv in argvs:
        if argv[:1] == ["yamltrace"]:
            args = argv[1:]
        elif argv[:3] == ["python", "-m", "yamltrace"]:
            args = argv[3:]
        else:
            pytest.fail(
                f"{block.where}: {argv[0]!r} is not a yamltrace command; the docs runner runs only those. "
                "Mark the block `<!-- docs-test: skip REASON -->` if it needs a network, a GPU or a build."
            )
        start = out.tell()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            status = main(args)
        assert status == block.exit, f"{block.where}: `{' '.join(argv)}` exited {status}:\n{out.getvalue()[start:]}"
    namespace["last_output"] = out.getvalue()


def _json(block: Block, namespace: dict[str, Any]) -> None:
    json.loads(block.code)


def _toml(block: Block, namespace: dict[str, Any]) -> None:
    tomllib.loads(block.code)


def _output(block: Block, namespace: dict[str, Any]) -> None:
    shown = [line.rstrip() for line in block.code.strip("\n").splitlines()]
    printed = [line.rstrip() for line in namespace.get("last_output", "").strip("\n").splitlines()]
    assert shown == printed, f"{block.where}: the page shows\n{block.code}\nbut the block before it printed\n" + "\n".join(
        printed
    )


RUNNERS = {"python": _python, "yaml": _yaml, "shell": _shell, "json": _json, "toml": _toml}


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_every_block_of_the_page_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not page.exists():
        pytest.fail(f"{_name(page)} is missing")
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    try:
        for block in blocks(page, _name(page)):
            if "skip" in block.flags:
                continue
            if "output" in block.flags:
                _output(block, namespace)
                continue
            if block.kind == "text":
                continue
            if block.file:
                target = tmp_path / block.file
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(block.code, encoding="utf-8")
            RUNNERS[block.kind](block, namespace)
    finally:
        torch.set_num_threads(threads)


def test_the_runner_reads_markers_and_hidden_blocks(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Intro.\n\n<!-- docs-test: python\nx = 1\n-->\n\n```python\ny = x + 1\n```\n\n"
        "<!-- docs-test: skip needs a GPU -->\n```python\nboom\n```\n\n"
        "<!-- docs-test: file=a/s.yaml fragment validate-only -->\n```yaml\noutputs: {h: X}\n```\n\n"
        "<!-- docs-test: exit=1 -->\n```sh\nyamltrace validate \\\n  bad.yaml  # a comment\n```\n\n"
        "```console\n$ yamltrace specs\nbuiltin:bert\n```\n\n```\nshown output\n```\n",
        encoding="utf-8",
    )
    found = blocks(page, "page.md")
    assert [(b.kind, b.line) for b in found] == [
        ("python", 4),
        ("python", 8),
        ("python", 13),
        ("yaml", 18),
        ("shell", 23),
        ("shell", 28),
        ("text", 33),
    ]
    assert found[0].code.strip() == "x = 1" and found[1].code == "y = x + 1\n"
    assert found[2].flags == {"skip"} and found[2].reason == "needs a GPU"
    assert found[3].flags == {"fragment", "validate-only"} and found[3].file == "a/s.yaml"
    assert found[4].exit == 1 and commands(found[4]) == [["yamltrace", "validate", "bad.yaml"]]
    assert commands(found[5]) == [["yamltrace", "specs"]]


@pytest.mark.parametrize(
    "text, message",
    [
        ("<!-- docs-test: skip -->\n```python\nx\n```\n", "needs a reason"),
        ("<!-- docs-test: sikp now -->\n```python\nx\n```\n", "unknown docs-test option 'sikp'"),
        ("<!-- docs-test: config -->\n\nSome text.\n```yaml\na: 1\n```\n", "must be followed by a code block"),
    ],
)
def test_the_runner_refuses_a_bad_marker(tmp_path: Path, text: str, message: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        blocks(page, "page.md")
