"""The light install: `pip install yamltrace` (PyYAML + jsonschema, no torch) validates specs, in a fresh
virtual environment and through the pre-commit hook exactly as a user's `.pre-commit-config.yaml` runs it.

Both build an environment (a few seconds, ~20 s for pre-commit), so they are marked slow; they stay in
the default suite and CI. Dependencies come from pip's configured index or cache; torch is never installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

pytestmark = pytest.mark.slow

SHIPPED = sorted((ROOT / "specs").glob("*.yaml"))
CORE_SITE_PACKAGES_LIMIT = 50 * 2**20


def _run(argv: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return result


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding only `pip install yamltrace` (the wheel of this checkout, no extras)."""
    work = tmp_path_factory.mktemp("core")
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "yamltrace", source / "yamltrace", ignore=shutil.ignore_patterns("__pycache__"))
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", work / "wheels", source], work)
    assert built.returncode == 0, built.stderr
    (wheel,) = (work / "wheels").glob("yamltrace-*.whl")
    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv], work)
    assert made.returncode == 0, made.stderr
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q"]
    installed = _run([*pip, "-c", ROOT / "constraints.txt", wheel], work)
    assert installed.returncode == 0, installed.stderr
    return venv


def test_the_core_install_is_small_and_has_no_torch(core_venv: Path) -> None:
    (site_packages,) = (core_venv / "lib").glob("python*/site-packages")
    assert _size(site_packages) < CORE_SITE_PACKAGES_LIMIT
    names = {p.name.lower() for p in site_packages.iterdir()}
    assert {"yaml", "jsonschema", "yamltrace"} <= names
    assert not names & {"torch", "safetensors", "transformers", "numpy"}


def test_the_core_install_validates_the_shipped_specs(core_venv: Path, tmp_path: Path) -> None:
    # From another directory, so the installed package (not this checkout) runs.
    result = _run([core_venv / "bin" / "yamltrace", "validate", ROOT / "specs"], tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"{len(SHIPPED)} files, 0 invalid, 0 problems\n", "")
    schema = _run([core_venv / "bin" / "yamltrace", "schema"], tmp_path)
    assert schema.returncode == 0 and schema.stdout == (ROOT / "yamltrace" / "schemas" / "yamltrace-spec-v1.schema.json").read_text()


def test_a_torch_name_without_torch_names_the_extra(core_venv: Path, tmp_path: Path) -> None:
    code = "import yamltrace\nprint(yamltrace.__file__)\nfrom yamltrace import trace\n"
    result = _run([core_venv / "bin" / "python", "-c", code], tmp_path)
    assert result.returncode == 1
    assert result.stdout.startswith(str(core_venv))
    assert result.stderr.splitlines()[-1] == (
        "ImportError: yamltrace.trace needs torch, which is not installed: pip install 'yamltrace[torch]' "
        "(or install torch yourself). The core install only validates specs and prints the schema."
    )


def test_the_pre_commit_hook_runs_as_users_configure_it(tmp_path: Path) -> None:
    """`pre-commit try-repo` on a clone of this repository, over a project with a valid and an invalid spec."""
    pre_commit = shutil.which("pre-commit", path=str(Path(sys.executable).parent))
    assert pre_commit is not None, "pre-commit is a test dependency (pyproject [test])"
    clone = tmp_path / "yamltrace"
    cloned = _run(["git", "clone", "-q", ROOT, clone], tmp_path)
    assert cloned.returncode == 0, cloned.stderr
    project = tmp_path / "project"
    (project / "specs").mkdir(parents=True)
    shutil.copy(ROOT / "specs" / "tiny.yaml", project / "specs" / "tiny.yaml")
    (project / "specs" / "broken.yaml").write_text("yamltrace: 1\noutputs:\n  hidden_states: {index: 0}\n")
    (project / "ci.yaml").write_text("not: [a, spec]\n")  # outside the hook's `files` pattern
    for argv in (["git", "init", "-q"], ["git", "add", "-A"]):
        assert _run(argv, project).returncode == 0
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")}
    result = _run([pre_commit, "try-repo", clone, "yamltrace-validate", "--all-files"], project, env)
    assert result.returncode == 1, result.stdout + result.stderr
    output = result.stdout.splitlines()
    start = output.index("- exit code: 1")
    assert [line for line in output[start + 1 :] if line] == [
        "specs/broken.yaml:3:18: $.outputs.hidden_states: give exactly one of 'target' (a class) or 'class_name' (a module path suffix)",
        "2 files, 1 invalid, 1 problem",
    ]
