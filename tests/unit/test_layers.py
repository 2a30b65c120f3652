"""The package's layers: module-level imports form no cycle and flow one way along the data flow.

errors -> spec reading -> engine -> spec resolution -> capture/trace -> patch -> checkpoint ->
modeling -> examples, kernels, cli. Imports inside functions and under `TYPE_CHECKING` do not count:
only what runs when a module is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import yamltrace

PACKAGE = Path(yamltrace.__file__).parent

# Layer of each module (a name ending in "." covers a subpackage). A module may import its own
# layer or lower ones, never a higher one.
LAYERS = [
    (
        "yamltrace.errors",
        "yamltrace._lazy",
        "yamltrace.specs",
        "yamltrace._folder",
        "yamltrace._recorder_fields",
        "yamltrace._versions",
        "yamltrace._forwards",
        "yamltrace._vocabulary",
    ),
    ("yamltrace._recorder", "yamltrace._intervention"),  # the plain data types a spec resolves to
    (
        "yamltrace.spec._limits",
        "yamltrace.spec._walk",
        "yamltrace.spec._patterns",
        "yamltrace.spec._yaml",
        "yamltrace.spec._reader",
        "yamltrace.spec._load_cache",
        "yamltrace.spec._schema",
        "yamltrace.spec._registry",
        "yamltrace.spec",
    ),
    (
        "yamltrace.spec._spec",
        "yamltrace.spec._tensor_file",
        "yamltrace.spec._interventions",
        "yamltrace.spec._resolve",
        "yamltrace.spec._patch_rule",
    ),
    ("yamltrace.engine.", "yamltrace.engine"),
    (
        "yamltrace.spec._export",  # a model's own maps -> Spec: walks the model with the engine
        "yamltrace.capture",
        "yamltrace._captures",
        "yamltrace._trace_checks",
        "yamltrace._spec_arg",
        "yamltrace._run_values",
        "yamltrace.intervening",
        "yamltrace.tracing",
    ),
    ("yamltrace.patch.", "yamltrace.patch"),
    ("yamltrace.checkpoint.", "yamltrace.checkpoint"),
    ("yamltrace.modeling.", "yamltrace.modeling"),
    (
        "yamltrace.examples.",
        "yamltrace.examples",
        "yamltrace.kernels.",
        "yamltrace.kernels",
        "yamltrace.extraction.",
        "yamltrace.extraction",
        "yamltrace.cli.",
        "yamltrace.cli",
        "yamltrace.__main__",
        "yamltrace",
    ),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    for rank, names in enumerate(LAYERS):
        if module in names or any(n.endswith(".") and module.startswith(n) for n in names):
            return rank
    raise AssertionError(f"{module} is in no layer: add it to LAYERS")


def top_level_imports(module: str) -> set[str]:
    """yamltrace modules that `module` imports when it is imported."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.If, ast.Try)):
                visit(node.body + node.orelse + getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name.startswith("yamltrace"))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                if not base.startswith("yamltrace"):
                    continue
                for alias in node.names:
                    candidate = f"{base}.{alias.name}"
                    found.add(candidate if candidate in MODULES else base)

    visit(ast.parse(path.read_text(encoding="utf-8")).body)
    found.discard(module)
    return found


GRAPH = {module: top_level_imports(module) for module in MODULES}


def test_every_module_is_placed_in_a_layer() -> None:
    for module in MODULES:
        layer(module)


def test_module_level_imports_form_no_cycle() -> None:
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(GRAPH.get(module, ())):
            if state.get(target) == "open":
                cycle = path[path.index(target) :] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in MODULES:
        if module not in state:
            visit(module, [module])


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_flow_one_way(module: str) -> None:
    upward = sorted(t for t in GRAPH[module] if layer(t) > layer(module))
    assert not upward, f"{module} (layer {layer(module)}) imports a later layer: {upward}"


def test_the_checker_sees_relative_imports() -> None:
    assert "yamltrace.engine" in GRAPH["yamltrace.capture"]
    assert "yamltrace.spec._reader" in GRAPH["yamltrace.spec._schema"]
    assert "yamltrace.errors" in GRAPH["yamltrace.engine._collector"]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_is_longer_than_the_review_ceiling(module: str) -> None:
    """One concept per module; ~700 lines is where a module is too long to review as one piece."""
    lines = MODULES[module].read_text(encoding="utf-8").count("\n")
    assert lines <= 700, f"{module} has {lines} lines; split it along what it does"
