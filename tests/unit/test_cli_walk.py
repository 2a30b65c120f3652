"""`yamltrace validate DIR` walks a repository: YAML that is not a spec (no top-level `yamltrace:` key)
is skipped and counted in every format, a file named on the command line stays strict, and
`--exclude GLOB` leaves files and directories out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from yamltrace.cli import main

PRE_COMMIT = "repos:\n  - repo: local\n    hooks:\n      - id: x\n        entry: yamltrace validate\n"
SPEC = "yamltrace: 1\noutputs:\n  hidden_states: X\n"


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / ".pre-commit-config.yaml").write_text(PRE_COMMIT)
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "ci.yml").write_text("on: [push]\njobs: {}\n")
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "a.yaml").write_text(SPEC)
    (tmp_path / "specs" / "flow.yaml").write_text("{yamltrace: 1, outputs: {h: X}}\n")
    (tmp_path / "specs" / "broken.yaml").write_text("yamltrace: 1\noutputs:\n  h: {target: X, idx: 0}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    return status, capsys.readouterr().out


def test_walking_skips_yaml_without_a_yamltrace_key_and_says_how_many(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(capsys, "validate", ".")
    assert status == 1
    assert out.splitlines() == [
        "specs/broken.yaml:3:18: $.outputs.h.idx: unknown key 'idx'; did you mean 'index'?",
        "3 files, 1 invalid, 1 problem, 2 YAML files skipped (no top-level 'yamltrace:' key)",
    ]


def test_exclude_leaves_out_files_and_directories(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(capsys, "validate", ".", "--exclude", "broken.yaml", "--exclude", ".github")
    assert (status, out) == (0, "2 files, 0 invalid, 0 problems, 1 YAML file skipped (no top-level 'yamltrace:' key)\n")
    status, out = run(capsys, "validate", ".", "--format", "json", "--exclude", "specs/*", "--exclude", ".pre-commit-config.yaml")
    document = json.loads(out)
    assert status == 2
    assert [(f["file"], [i["message"] for i in f["issues"]]) for f in document["files"]] == [
        (".", ["no spec files (*.yaml, *.yml) in this directory; 1 YAML file without a top-level 'yamltrace:' key skipped"])
    ]
    assert document["skipped"] == ["./.github/workflows/ci.yml"]


def test_a_file_named_is_checked_even_without_the_key(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(capsys, "validate", ".pre-commit-config.yaml")
    assert status == 1
    assert out.splitlines()[0] == ".pre-commit-config.yaml:1:1: $: missing the format version: add 'yamltrace: 1'"


def test_json_and_github_say_what_was_skipped(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(capsys, "validate", "--format", "json", "--exclude", "broken.yaml", ".")
    document = json.loads(out)
    assert status == 0 and document["summary"]["files"] == 2
    assert sorted(document["skipped"]) == ["./.github/workflows/ci.yml", "./.pre-commit-config.yaml"]
    status, out = run(capsys, "validate", "--format", "github", "--exclude", "broken.yaml", ".")
    assert (status, out) == (0, "::notice title=yamltrace::2 YAML files skipped (no top-level 'yamltrace:' key)\n")


def test_a_directory_with_no_spec_says_what_it_skipped(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(capsys, "validate", ".github")
    assert status == 2
    assert out.splitlines()[0] == (
        ".github: $: no spec files (*.yaml, *.yml) in this directory; 1 YAML file without a top-level 'yamltrace:' key skipped"
    )
