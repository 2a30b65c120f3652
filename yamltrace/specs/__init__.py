"""The spec library: verified specs for mainstream transformers families, shipped as package data.

`load_spec("builtin:llama")` reads `llama.yaml` from this package; `yamltrace.specs.list()` names
every shipped spec; `yamltrace specs` prints them. Each file's header names the transformers version
it was verified with and the model classes it applies to; the keys follow docs/vocabulary.md. The
shipped files are yamltrace's own, so the transformers modules they name may be imported without
`trust_imports` (nothing a user wrote is imported this way: a name must be one of `list()`).

Reading the library imports neither torch nor transformers.
"""

from __future__ import annotations

import builtins
from importlib import resources
from pathlib import Path

from ..errors import SpecError, did_you_mean

__all__ = ["PREFIX", "list", "path", "header"]

# How a spec source names a library spec: "builtin:<name>".
PREFIX = "builtin:"


def list() -> builtins.list[str]:  # noqa: A001 - the registry's verb, as in timm
    """The names of the shipped specs, sorted (`builtin:<name>` loads one)."""
    return sorted(entry.name[: -len(".yaml")] for entry in resources.files(__name__).iterdir() if entry.name.endswith(".yaml"))


def path(name: str) -> Path:
    """The file of the shipped spec `name` (with or without the `builtin:` prefix); SpecError if none."""
    name = name[len(PREFIX) :] if name.startswith(PREFIX) else name
    names = list()
    if name not in names:
        raise SpecError.single(f"no shipped spec {name!r}{did_you_mean(name, names)}; shipped: {', '.join(names)}")
    return Path(str(resources.files(__name__).joinpath(f"{name}.yaml")))


def header(name: str) -> str:
    """The comment lines at the top of a shipped spec (what it applies to, what it was verified with)."""
    lines = []
    for line in path(name).read_text(encoding="utf-8").splitlines()[1:]:
        if not line.startswith("#"):
            break
        lines.append(line[1:].strip())
    return " ".join(lines)
