"""The engine's tests go through its public seams: only `tests/unit/engine/internals/` (README there)
names a private engine module, so the engine can be rebuilt behind its face without rewriting them."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]
INTERNALS = TESTS / "unit" / "engine" / "internals"


def _private_engine_names(source: str) -> list[str]:
    """The `yamltrace.engine._*` modules (or private names of `yamltrace.engine`) a file's code or its
    string literals (scripts run in child processes) import."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("yamltrace.engine._"):
                found.append(node.module)
            elif node.module == "yamltrace.engine":
                found += [f"yamltrace.engine.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("yamltrace.engine._")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "yamltrace.engine" in node.value:
            try:
                found += _private_engine_names(node.value)
            except SyntaxError:
                continue
    return found


def test_only_the_internals_folder_imports_private_engine_modules() -> None:
    outside = {
        str(path.relative_to(TESTS)): names
        for path in sorted(TESTS.rglob("*.py"))
        if INTERNALS not in path.parents and "benchmarks" not in path.parts and path != Path(__file__).resolve()
        if (names := _private_engine_names(path.read_text(encoding="utf-8")))
    }
    assert outside == {}


def test_the_check_sees_an_import_in_code_and_in_a_child_process_script() -> None:
    code = "from yamltrace.engine._plan import PlanGuard\nscript = 'from yamltrace.engine import _intercept'\n"
    assert _private_engine_names(code) == ["yamltrace.engine._plan", "yamltrace.engine._intercept"]
