"""The command line as a process: directories, --version, a closed pipe, schema --output, one summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

import yamltrace
from yamltrace.spec import SCHEMA_FILE, SCHEMA_ID

SHIPPED = sorted(p.name for p in (ROOT / "specs").glob("*.yaml"))
WRONG_TYPES = ROOT / "tests" / "data" / "invalid" / "wrong-types.yaml"


def yamltrace_cli(*argv: str, cwd: Path = ROOT, **streams: object) -> subprocess.CompletedProcess[str]:
    """`python -m yamltrace ARGV` from `cwd`, with this checkout's package first on the path.

    stdout and stderr are captured unless `streams` gives them."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **streams}
    return subprocess.run(
        [sys.executable, "-m", "yamltrace", *argv],
        cwd=cwd,
        env=env,
        text=True,
        timeout=120,
        **streams,  # type: ignore[call-overload]
    )


def test_version() -> None:
    result = yamltrace_cli("--version")
    assert (result.returncode, result.stdout, result.stderr) == (0, f"yamltrace {yamltrace.__version__}\n", "")


def test_a_directory_is_walked_for_yaml_files_in_name_order(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "nested.yml").write_text((ROOT / "specs" / "tiny.yaml").read_text())
    (tmp_path / "a.yaml").write_text(WRONG_TYPES.read_text())
    (tmp_path / "notes.txt").write_text("not a spec")
    (tmp_path / "c.json").write_text("{}")
    result = yamltrace_cli("validate", "--format", "json", str(tmp_path))
    assert result.returncode == 1, result.stderr
    document = json.loads(result.stdout)
    assert [(f["file"], f["status"]) for f in document["files"]] == [
        (str(tmp_path / "a.yaml"), "invalid"),
        (str(tmp_path / "b" / "nested.yml"), "valid"),
    ]


def test_the_shipped_specs_directory_is_valid_with_one_summary_line() -> None:
    result = yamltrace_cli("validate", "specs/", "specs/tiny.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == f"{len(SHIPPED) + 1} files, 0 invalid, 0 problems\n"


def test_symlink_loops_non_regular_files_and_broken_links_are_reported_not_followed(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    (specs / "inner").mkdir(parents=True)
    (specs / "inner" / "tiny.yaml").write_text((ROOT / "specs" / "tiny.yaml").read_text())
    (specs / "inner" / "loop").symlink_to(specs, target_is_directory=True)
    (specs / "linked").symlink_to(specs / "inner", target_is_directory=True)  # a second path to inner: passed over
    os.mkfifo(specs / "pipe.yaml")
    (specs / "gone.yaml").symlink_to(tmp_path / "nowhere.yaml")
    result = yamltrace_cli("validate", str(specs))
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        f"{specs}/gone.yaml: $: broken symbolic link to '{tmp_path}/nowhere.yaml'",
        f"{specs}/inner/loop: $: symbolic link loop back to {specs}; not followed",
        f"{specs}/pipe.yaml: $: not a regular file; a spec must be a YAML file",
        "4 files, 0 invalid, 3 unreadable, 3 problems",
    ]


def test_a_directory_without_specs_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("no specs here")
    result = yamltrace_cli("validate", str(tmp_path))
    assert result.returncode == 2
    assert result.stdout.splitlines() == [
        f"{tmp_path}: $: no spec files (*.yaml, *.yml) in this directory",
        "1 file, 0 invalid, 1 unreadable, 1 problem",
    ]


@pytest.mark.parametrize("argv", [["validate", "--format", "json", "specs"], ["validate", "specs"], ["schema"]])
def test_a_closed_pipe_ends_quietly(argv: list[str]) -> None:
    # The reading end is closed before the process starts: its first write fails (EPIPE), as in `... | head`.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = yamltrace_cli(*argv, stdout=write_end)
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (141, "")


def test_schema_output_writes_the_packaged_file(tmp_path: Path) -> None:
    target = tmp_path / "editor" / SCHEMA_FILE
    target.parent.mkdir()
    result = yamltrace_cli("schema", "--output", str(target))
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    assert target.read_bytes() == (ROOT / "yamltrace" / "schemas" / SCHEMA_FILE).read_bytes()
    assert json.loads(target.read_text())["$id"] == SCHEMA_ID


def test_schema_output_to_a_missing_directory_says_so(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "schema.json"
    result = yamltrace_cli("schema", "-o", str(target))
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"yamltrace schema: cannot write {target}: No such file or directory\n"
