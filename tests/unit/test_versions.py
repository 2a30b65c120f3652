"""A transformers release newer than the verified ones: the warning a user sees on import and on the
command line."""

from __future__ import annotations

import subprocess
import sys


NEWER = "import importlib.metadata as m; m.version = lambda name: '5.26.0'\n"


def _run_newer(tmp_path, code: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "user.py"
    script.write_text(NEWER + code, encoding="utf-8")
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)


def test_the_newer_release_warning_on_import_names_the_users_import_line(tmp_path) -> None:
    result = _run_newer(tmp_path, "import warnings\nwarnings.simplefilter('always')\nimport yamltrace.modeling\n")
    assert result.returncode == 0, result.stderr
    first = result.stderr.splitlines()[0]
    assert first.startswith(f"{tmp_path / 'user.py'}:4: UnverifiedReleaseWarning: transformers 5.26.0 is newer"), result.stderr


def test_the_command_line_prints_the_newer_release_warning_on_one_line(tmp_path) -> None:
    from helpers import ROOT

    argv = ["check", str(ROOT / "specs" / "tiny.yaml"), "--model", "yamltrace.examples.tiny:NoSuch"]
    result = _run_newer(tmp_path, f"import sys\nfrom yamltrace.cli import main\nsys.exit(main({argv!r}))\n")
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and len(lines) == 2, result.stderr
    assert lines[0].startswith("yamltrace: warning: transformers 5.26.0 is newer than the releases"), result.stderr
    assert lines[0].endswith("or install transformers<5.26."), result.stderr
    assert lines[1] == "yamltrace check: --model 'yamltrace.examples.tiny:NoSuch': yamltrace.examples.tiny has no NoSuch."
