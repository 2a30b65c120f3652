"""The command line: exact output in every format, exit statuses, `python -m`, no torch, the hook."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import ROOT

from yamltrace.cli import main
from yamltrace.spec import SCHEMA_FILE

INVALID = sorted((ROOT / "tests" / "data" / "invalid").glob("*.yaml"))
SHIPPED = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "specs").glob("*.yaml"))
WRONG_TYPES = "tests/data/invalid/wrong-types.yaml"


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    return status, capsys.readouterr().out


def expected_lines(path: str) -> list[str]:
    return Path(path).with_suffix(".expected").read_text(encoding="utf-8").splitlines()


# validate --format text


def test_valid_specs_print_only_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "validate", "specs/tiny.yaml") == (0, "1 file, 0 invalid, 0 problems\n")


@pytest.mark.parametrize("path", INVALID, ids=lambda p: p.stem)
def test_invalid_fixture_prints_its_expected_messages(capsys: pytest.CaptureFixture[str], path: Path) -> None:
    relative = str(path.relative_to(ROOT))
    lines = expected_lines(relative)
    status, out = run(capsys, "validate", relative)
    assert status == 1
    assert out.splitlines() == [*lines, f"1 file, 1 invalid, {len(lines)} problem{'' if len(lines) == 1 else 's'}"]


def test_files_are_reported_in_order_with_one_summary(capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(capsys, "validate", "specs/tiny.yaml", WRONG_TYPES, "tests/data/invalid/empty.yaml")
    assert status == 1
    lines = expected_lines(WRONG_TYPES) + expected_lines("tests/data/invalid/empty.yaml")
    assert out.splitlines() == [*lines, f"3 files, 2 invalid, {len(lines)} problems"]


@pytest.mark.slow  # a FIFO
def test_unreadable_files_are_issues_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    status, out = run(capsys, "validate", "missing.yaml", str(fifo), WRONG_TYPES)
    assert status == 2
    lines = out.splitlines()
    assert lines[:2] == [
        "missing.yaml: $: file not found",
        f"{fifo}: $: not a regular file; a spec must be a YAML file",
    ]
    assert lines[2:-1] == expected_lines(WRONG_TYPES)
    assert lines[-1] == "3 files, 1 invalid, 2 unreadable, 10 problems"


def test_max_bytes_caps_each_file(capsys: pytest.CaptureFixture[str]) -> None:
    size = Path("specs/tiny.yaml").stat().st_size
    assert run(capsys, "validate", "--max-bytes", str(size), "specs/tiny.yaml")[0] == 0
    status, out = run(capsys, "validate", "--max-bytes", str(size - 1), "specs/tiny.yaml")
    assert status == 1
    assert out.splitlines()[0] == (
        f"specs/tiny.yaml: $: the spec is larger than {size - 1} bytes; pass a larger max_bytes= to read it"
    )


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["validate"],
        ["validate", "--format", "xml", "specs/tiny.yaml"],
        ["validate", "--max-bytes", "0", "specs/tiny.yaml"],
        ["validate", "--max-bytes", "lots", "specs/tiny.yaml"],
        ["frobnicate"],
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage: yamltrace" in captured.err


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "--help"]) == 0
    assert "--max-bytes N" in capsys.readouterr().out


# validate --format json


def test_json_is_one_document_with_per_file_results(capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(capsys, "validate", "--format", "json", "specs/tiny.yaml", WRONG_TYPES, "missing.yaml")
    assert status == 2
    document = json.loads(out)
    assert document["valid"] is False
    assert document["summary"] == {"files": 3, "invalid": 1, "unreadable": 1, "problems": 9}
    assert [(f["file"], f["status"]) for f in document["files"]] == [
        ("specs/tiny.yaml", "valid"),
        (WRONG_TYPES, "invalid"),
        ("missing.yaml", "unreadable"),
    ]
    assert document["files"][0]["issues"] == []
    assert document["files"][1]["issues"][1] == {
        "file": WRONG_TYPES,
        "line": 4,
        "column": 47,
        "json_path": "$.outputs.attentions.index",
        "message": "'one' is not of type 'integer'",
    }
    assert len(document["files"][1]["issues"]) == len(expected_lines(WRONG_TYPES))
    assert document["files"][2]["issues"] == [
        {"file": "missing.yaml", "line": None, "column": None, "json_path": "$", "message": "file not found"}
    ]


def test_json_for_valid_specs(capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(capsys, "validate", "--format", "json", *SHIPPED)
    assert status == 0
    document = json.loads(out)
    assert document["valid"] is True
    assert document["summary"] == {"files": len(SHIPPED), "invalid": 0, "unreadable": 0, "problems": 0}


# validate --format github


def test_github_lines(capsys: pytest.CaptureFixture[str]) -> None:
    status, out = run(capsys, "validate", "--format", "github", "specs/tiny.yaml", WRONG_TYPES, "missing.yaml")
    assert status == 2
    lines = out.splitlines()
    assert len(lines) == len(expected_lines(WRONG_TYPES)) + 1
    assert lines[1] == (
        f"::error file={WRONG_TYPES},line=4,col=47,title=yamltrace::$.outputs.attentions.index: 'one' is not of type 'integer'"
    )
    assert lines[-1] == "::error file=missing.yaml,title=yamltrace::$: file not found"


def test_github_valid_specs_print_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "validate", "--format", "github", *SHIPPED) == (0, "")


def test_github_escapes_a_real_file_name(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "odd,name:100%.yaml"
    path.write_text("yamltrace: 2\n", encoding="utf-8")
    status, out = run(capsys, "validate", "--format", "github", str(path))
    assert status == 1
    escaped = str(path).replace("%", "%25").replace(":", "%3A").replace(",", "%2C")
    assert out.startswith(f"::error file={escaped},line=1,col=12,title=yamltrace::$.yamltrace: ")


# schema


def test_schema_prints_the_packaged_file_exactly(capsys: pytest.CaptureFixture[str]) -> None:
    packaged = (ROOT / "yamltrace" / "schemas" / SCHEMA_FILE).read_text(encoding="utf-8")
    assert run(capsys, "schema") == (0, packaged)


# python -m yamltrace, and what the commands import


def test_python_dash_m_runs_the_command_line() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "yamltrace", "validate", "specs/tiny.yaml", WRONG_TYPES],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    lines = expected_lines(str(ROOT / WRONG_TYPES))
    assert result.stdout.splitlines() == [*lines, f"2 files, 1 invalid, {len(lines)} problems"]


def test_commands_never_import_torch() -> None:
    code = (
        "import sys\n"
        "from yamltrace.cli import main\n"
        f"statuses = [main(['validate', '--format', f, *{SHIPPED!r}]) for f in ('text', 'json', 'github')]\n"
        f"statuses.append(main(['validate', {WRONG_TYPES!r}]))\n"
        "statuses.append(main(['schema']))\n"
        "print(statuses, 'torch' in sys.modules, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "[0, 0, 0, 1, 0] False"


# The pre-commit hook


def test_pre_commit_hook_definition() -> None:
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    assert hook["id"] == "yamltrace-validate"
    assert hook["entry"] == "yamltrace validate"
    assert hook["language"] == "python"
    assert hook["types"] == ["yaml"]
    files = re.compile(hook["files"])
    for path in [*SHIPPED, "yamltrace.yaml", "checkpoints/llama/yamltrace.yml", "configs/specs/llama.yaml"]:
        assert files.search(path), path
    for path in [".github/workflows/ci.yml", "config.yaml", "my-yamltrace.yaml", "specs/readme.md"]:
        assert not files.search(path), path


def test_the_yamltrace_console_script_is_installed() -> None:
    from importlib.metadata import entry_points

    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("yamltrace") == "yamltrace.cli:main"
