"""Tests go through the package's public seams: only a folder named `internals` (a README there says
what it holds) names a private module (`yamltrace._folder`, `yamltrace.spec._limits`, ...) or a
private name of a module, so what sits behind a public face can be rebuilt without rewriting them."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
INTERNALS = "internals"


def _is_private(dotted: str) -> bool:
    """Whether a dotted name inside yamltrace has a private part (`yamltrace.spec._limits`, `yamltrace._folder`)."""
    parts = dotted.split(".")
    return parts[0] == "yamltrace" and any(part.startswith("_") and not part.startswith("__") for part in parts[1:])


def _private_names(source: str) -> list[str]:
    """The private yamltrace modules (or private names of yamltrace modules) a file's code or its string
    literals (scripts run in child processes) import."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _is_private(node.module):
                found.append(node.module)
            elif node.module.split(".")[0] == "yamltrace":
                found += [f"{node.module}.{a.name}" for a in node.names if _is_private(f"{node.module}.{a.name}")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if _is_private(a.name)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "yamltrace" in node.value:
            try:
                found += _private_names(node.value)
            except SyntaxError:
                continue
    return found


def test_only_internals_folders_import_private_modules() -> None:
    outside = {
        str(path.relative_to(TESTS)): names
        for path in sorted(TESTS.rglob("*.py"))
        if INTERNALS not in path.relative_to(TESTS).parts[:-1] and "benchmarks" not in path.parts
        if path != Path(__file__).resolve()
        if (names := _private_names(path.read_text(encoding="utf-8")))
    }
    assert outside == {}


def test_every_internals_folder_says_what_it_holds() -> None:
    folders = sorted({p.parent for p in TESTS.rglob("*.py") if p.parent.name == INTERNALS})
    assert folders, "no internals folder found: the check above would see nothing to allow"
    assert [str(f.relative_to(TESTS)) for f in folders if not (f / "README.md").is_file()] == []


def test_the_check_sees_an_import_in_code_and_in_a_child_process_script() -> None:
    code = (
        "from yamltrace.engine._plan import PlanGuard\n"
        "import yamltrace._folder\n"
        "from yamltrace.modeling import _cache_field\n"
        "from yamltrace.spec import load_spec\n"
        "script = 'from yamltrace.engine import _intercept'\n"
    )
    assert _private_names(code) == [
        "yamltrace.engine._plan",
        "yamltrace._folder",
        "yamltrace.modeling._cache_field",
        "yamltrace.engine._intercept",
    ]
