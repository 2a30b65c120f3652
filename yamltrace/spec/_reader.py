"""Spec source -> `SpecDocument`: plain data with node locations, `extends` merged, ready for the schema.

A source is a path, YAML text or bytes (read by `_yaml`), or a Python mapping (copied as plain data).
A spec may `extends` a base file; the base's entries merge under the extending file's (see
`MERGED_SECTIONS`), and every issue keeps the location, in its own file, where it was written.

`extends` is confined: a base is named by a relative path and must lie, symlinks resolved, inside the
directory of the spec that was read first (for a checkpoint: its folder; for text or a mapping: the
current directory), and a chain holds at most `MAX_EXTENDS_DEPTH` files. The byte and node budgets
(`_limits.Budget`) count the whole chain, so extending does not multiply what a spec may cost.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from .. import specs
from .._folder import inside_folder, is_inside, names_folder
from ..errors import FolderError, SpecError, SpecIssue, YamltraceError, format_json_path
from ._limits import MAX_EXTENDS_DEPTH, MAX_NODES, Budget
from ._yaml import ALLOWED, DEFAULT_MAX_BYTES, MAX_DEPTH, Location, Part, Path_, read_file, read_text

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_DEPTH",
    "MERGED_SECTIONS",
    "FetchBase",
    "Location",
    "SpecDocument",
    "names_file",
    "read_spec_document",
]

# Brings a base file into the spec's folder before it is read: called with its path relative to that
# folder (`/`-separated, inside it) and the bytes the chain has left; may raise a YamltraceError.
FetchBase = Callable[[str, int], None]

# Top-level sections that `extends` merges per key; every other key is replaced by the extending file.
MERGED_SECTIONS = ("outputs", "options", "patches", "scopes", "interventions")
# Sections whose order is meaningful and follows the base: interventions apply in the order written, so
# the base's come first (one the extending file redefines keeps its place), then the extending file's new ones.
BASE_ORDER_SECTIONS = ("interventions",)


@dataclass(frozen=True)
class SpecDocument:
    """A spec as plain JSON-compatible data (`extends` merged and removed), with where each node came from.

    `files` lists every file read, the top one first. `issue(path, message)` builds a SpecIssue located
    at the YAML node of `path` (or its nearest located ancestor), in the file that defined it. `read`
    says, for each file read in order, the path it was named by, its real path and the bytes parsed,
    and `folder` the real folder `extends` resolved against (None for text or a mapping): what the
    load cache compares (`_load_cache`).
    """

    data: dict[str, Any]
    file: str | None
    files: tuple[str, ...] = ()
    values: Mapping[Path_, Location] = field(default_factory=dict, repr=False, compare=False)
    keys: Mapping[Path_, Location] = field(default_factory=dict, repr=False, compare=False)
    read: tuple[tuple[str, str, bytes], ...] = field(default=(), repr=False, compare=False)
    folder: str | None = field(default=None, repr=False, compare=False)

    def locate(self, path: Sequence[str | int], *, at_key: bool = False) -> Location | None:
        """The location of the node at `path` (its key when `at_key`), else of its nearest located ancestor."""
        path = tuple(path)
        if at_key and path in self.keys:
            return self.keys[path]
        while path not in self.values and path:
            path = path[:-1]
        return self.values.get(path)

    def issue(self, path: Sequence[str | int], message: str, *, at_key: bool = False) -> SpecIssue:
        """A SpecIssue for the node at `path`, located when the document came from YAML."""
        where = self.locate(path, at_key=at_key)
        json_path = format_json_path(path)
        if where is None:
            return SpecIssue(message, json_path, self.file or ("<mapping>" if not self.values else None))
        return where.issue(message, json_path)


def _plain(value: Any, path: Path_, issues: list[SpecIssue], budget: Budget) -> Any:
    """A copy of a Python mapping source as plain data; keys must be text, values YAML-like."""
    if len(path) > MAX_DEPTH:
        issues.append(SpecIssue(f"nesting is deeper than {MAX_DEPTH} levels", format_json_path(path), "<mapping>"))
        return None
    budget.nodes -= 1
    if budget.nodes < 0:
        if budget.nodes == -1:
            issues.append(SpecIssue(f"the spec has more than {MAX_NODES} nodes (MAX_NODES)", format_json_path(path), "<mapping>"))
        return None
    if isinstance(value, Mapping):
        result = {}
        for key, item in value.items():
            if isinstance(key, str):
                result[key] = _plain(item, (*path, key), issues, budget)
            else:
                issues.append(
                    SpecIssue(f"mapping keys must be text, got {_short_repr(key)}", format_json_path(path), "<mapping>")
                )
        return result
    if isinstance(value, (list, tuple)):
        return [_plain(item, (*path, i), issues, budget) for i, item in enumerate(value)]
    if value is None or isinstance(value, (str, int, float)):
        return value
    issues.append(SpecIssue(f"{type(value).__name__} is not allowed; {ALLOWED}", format_json_path(path), "<mapping>"))
    return None


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _merge(base: Part, child: Part) -> Part:
    """`child` over `base`: MERGED_SECTIONS merge per entry (the child's entries first), other keys are replaced."""
    merged = Part(child.file, child.chain)

    def merges(key: object) -> TypeGuard[str]:
        return (
            isinstance(key, str)
            and key in MERGED_SECTIONS
            and isinstance(child.data.get(key), dict)
            and isinstance(base.data.get(key), dict)
        )

    for key in [*child.data, *(k for k in base.data if k not in child.data)]:
        if merges(key):
            ours = child.data[key]
            if key in BASE_ORDER_SECTIONS:
                merged.data[key] = {**base.data[key], **ours}
            else:
                merged.data[key] = {**ours, **{k: v for k, v in base.data[key].items() if k not in ours}}
        else:
            merged.data[key] = (child if key in child.data else base).data[key]

    def owner(path: Path_) -> Part:
        if not path or path[0] in child.data and not (merges(path[0]) and len(path) > 1):
            return child
        if merges(path[0]):
            return child if path[1] in child.data[path[0]] else base
        return base

    for part in (child, base):
        for table, merged_table in ((part.values, merged.values), (part.keys, merged.keys)):
            for path, where in table.items():
                if (not path or path[0] in merged.data) and owner(path) is part:
                    merged_table[path] = where
    return merged


@dataclass(frozen=True)
class _Chain:
    """What every file of one `extends` chain shares: the folder it is confined to, and the budgets."""

    root: str
    max_bytes: int
    budget: Budget
    read: list[tuple[str, str, bytes]] = field(default_factory=list)  # (path as named, real path, bytes) of each file
    fetch: FetchBase | None = None


def _extend(part: Part, base_dir: str, seen: frozenset[str], chain: _Chain) -> Part:
    """Read `part`'s `extends` base (iteratively, refusing cycles, escapes and long chains) and merge `part` over it."""
    parts = [part]
    while "extends" in part.data:
        ref = part.data.pop("extends")
        where = part.values.get(("extends",))

        def fail(message: str, part: Part = part, where: Location | None = where) -> SpecError:
            issue = where.issue(message, "$.extends") if where else SpecIssue(message, "$.extends", part.file or "<mapping>")
            return SpecError([issue])

        if not isinstance(ref, str) or not ref.strip():
            raise fail("extends must be the path of a base spec file, relative to this one")
        if len(parts) >= MAX_EXTENDS_DEPTH:
            raise fail(f"the extends chain is longer than {MAX_EXTENDS_DEPTH} files (MAX_EXTENDS_DEPTH); merge some of them")
        builtin = ref.startswith(specs.PREFIX)
        if not builtin and ("\0" in ref or os.path.isabs(ref) or ref.startswith("~")):
            raise fail(f"extends {_short_repr(ref)} must be a path relative to this file, inside {chain.root}, or builtin:NAME")
        try:
            # A shipped spec (`builtin:NAME`) is yamltrace's own file: it may be extended from any folder.
            target = str(specs.path(ref)) if builtin else os.path.join(base_dir, ref)
            real = os.path.realpath(target)
        except SpecError as e:
            raise fail(f"extends {_short_repr(ref)}: {e.issues[0].message}") from None
        except (OSError, ValueError):
            raise fail(f"{_short_repr(ref)} is not a usable path") from None
        display = ref if builtin else os.path.normpath(os.path.join(os.path.dirname(part.file), ref) if part.file else ref)
        # Named inside the folder (`..` resolved, links not): the Hub cache's `blobs/` is reached only
        # through a link of the snapshot, never by a name such as `../../blobs/<hash>`.
        if not builtin and not (is_inside(os.path.normpath(target), chain.root) and inside_folder(real, chain.root)):
            raise fail(
                f"extends {_short_repr(ref)} leaves the spec's folder {chain.root} (paths and symlinks are "
                "resolved); a base spec must lie inside it"
            )
        if real in seen:
            raise fail(f"extends cycle: {' -> '.join((*part.chain, display))}; remove one of these extends")
        if not builtin and chain.fetch is not None:
            try:
                real = _fetch(chain.fetch, chain.root, target, chain.budget.bytes)
            except YamltraceError as e:
                raise fail(f"extends {_short_repr(ref)}: {e}") from None
        if not os.path.exists(real):
            raise fail(f"base spec {_short_repr(ref)} not found (looked for {display})")
        part = read_file(real, display, chain.max_bytes, (*part.chain, display), chain.budget)
        chain.read.append((target, real, part.raw or b""))
        parts.append(part)
        base_dir, seen = names_folder(target), seen | {real}
    merged = parts.pop()
    while parts:
        merged = _merge(merged, parts.pop())
    return merged


def _fetch(fetch: FetchBase, root: str, target: str, left: int) -> str:
    """Ask `fetch` for the base file `target` by its path inside the chain's folder `root` (a path that
    reaches it only through `..`, the Hub cache's `blobs/`, is never asked for); its real path after,
    which must still lie inside the folder (a FolderError otherwise)."""
    relative = os.path.relpath(os.path.normpath(target), root)
    if relative.split(os.sep)[0] != os.pardir and not os.path.isabs(relative):
        fetch(relative.replace(os.sep, "/"), left)
    real = os.path.realpath(target)
    if os.path.lexists(target) and not inside_folder(real, root):
        raise FolderError(f"the fetched base spec links out of the spec's folder {root} (to {real}); it is not read")
    return real


def names_file(text: str) -> bool:
    """A string is a path when it has no newline and ends with .yaml/.yml or names an existing file."""
    return "\n" not in text and "\r" not in text and (text.endswith((".yaml", ".yml")) or os.path.isfile(text))


def read_spec_document(
    source: str | bytes | os.PathLike[str] | Mapping[str, Any],
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    lenient: bool = False,
    fetch: FetchBase | None = None,
) -> SpecDocument:
    """Read a spec safely into plain data with node locations, `extends` merged; SpecError for every problem.

    `source` is a path (`os.PathLike`, or a one-line string ending in .yaml/.yml or naming an existing
    file), YAML text, UTF-8 bytes, or a mapping. `extends` is resolved relative to the file (to the
    current directory for text and mappings). Nothing is imported and the schema is not checked here.
    `lenient` reads past anchors, aliases and tabs of `source` itself (an alias as null, never expanded;
    a tab as a space): only to find the document's other problems after a strict read refused one.
    `fetch` brings each base file (not a `builtin:` one) into the folder first, once it has passed the
    checks above (a Hub repository's, see `checkpoint._hub`); a problem it raises is located at the `extends`.
    """
    budget = Budget(bytes=max_bytes)
    seen: frozenset[str]
    read: list[tuple[str, str, bytes]] = []
    folder = None
    if isinstance(source, Mapping):
        issues: list[SpecIssue] = []
        part = Part(None, ("<mapping>",), data=_plain(source, (), issues, budget))
        if issues:
            raise SpecError(issues)
        base_dir, seen = os.path.realpath(os.getcwd()), frozenset()
    elif isinstance(source, os.PathLike) or isinstance(source, str) and names_file(source):
        display = os.fsdecode(os.fspath(source))
        part = read_file(display, display, max_bytes, (display,), budget, lenient)
        folder = base_dir = names_folder(display)
        read.append((display, os.path.realpath(display), part.raw or b""))
        seen = frozenset({read[0][1]})
    elif isinstance(source, (str, bytes)):
        part = read_text(source, max_bytes, None, ("<string>",), budget, lenient)
        base_dir, seen = os.path.realpath(os.getcwd()), frozenset()
    else:
        raise SpecError.single(f"cannot read a spec from {type(source).__name__}; pass a path, YAML text, bytes or a mapping")
    part = _extend(part, base_dir, seen, _Chain(os.path.realpath(base_dir), max_bytes, budget, read, fetch))
    files = tuple(dict.fromkeys(where.file for where in part.values.values() if where.file))
    found = files or ((part.file,) if part.file else ())
    return SpecDocument(part.data, part.file, found, part.values, part.keys, tuple(read), folder)
