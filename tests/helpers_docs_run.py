"""Running a Markdown page's code blocks (tests/helpers_docs.py reads them): the runner of
tests/integration/test_docs.py, and of tests/vision/test_vision_docs.py for the pages that need the
vision environment.

One run per page: its Python blocks (shown and hidden) run in order in one namespace, in a temporary
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

__all__ = ["VISION_PAGES", "page_name", "run_page"]

# Pages whose examples need timm, torchvision or diffusers: run by `make test-vision`
# (tests/vision/test_vision_docs.py), not by the default suite.
VISION_PAGES = ("docs/vision.md",)


def page_name(page: Path) -> str:
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


def run_page(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run every block of `page` in `tmp_path` (a copy of `specs/` beside them)."""
    if not page.exists():
        pytest.fail(f"{page_name(page)} is missing")
    shutil.copytree(ROOT / "specs", tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    try:
        for block in blocks(page, page_name(page)):
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
