"""A validated document's `interventions:` -> `Intervention`s, in the order written.

Each intervention's selector is read as a recorder (through the resolver's `select`, so class names
follow the import registry and its consent rules); its value is a number, a vector, a `RuntimeValue`
or a tensor of a safetensors file in the spec's own folder. Tensor files are read under the
untrusted-folder rule (`_folder`): a bare file name, a regular file, no link out, the header checked
before any data is read, safetensors only (never a pickle), and the caps of `_limits`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from .. import specs
from .._folder import folder_file, names_folder, safetensors_header
from .._intervention import OPERATIONS, Intervention, RuntimeValue
from .._recorder import OutputRecorder
from ..errors import FolderError, did_you_mean
from ._limits import MAX_TENSOR_BYTES, MAX_TENSOR_FILE_BYTES, MAX_TENSOR_HEADER_BYTES, intervention_sites
from ._reader import SpecDocument
from ._load_cache import TensorRead
from ._tensor_file import DTYPES, all_finite, read_tensor
from ._walk import Site

__all__ = ["TENSOR_DTYPES", "InterventionReader", "tensor_file_names"]

# The safetensors dtypes a tensor value may have: floating point, as the activations it edits.
TENSOR_DTYPES = tuple(DTYPES)

Path = tuple[str | int, ...]


class InterventionReader:
    """Reads one document's interventions; `select` turns a site into its `OutputRecorder` (or None after
    recording why not), `fail(path, message)` records a located problem."""

    def __init__(
        self, document: SpecDocument, select: Callable[[Site], OutputRecorder | None], fail: Callable[[Path, str], None]
    ) -> None:
        self.document = document
        self.select = select
        self.fail = fail
        self.tensor_bytes = 0  # read so far, all files together (MAX_TENSOR_BYTES)
        self.files: dict[tuple[str, str], tuple[Any, dict[str, Any]]] = {}  # (folder, file) -> checked path, header
        self.reads: list[TensorRead] = []  # every tensor read, for the load cache to check again

    def interventions(self) -> tuple[Intervention, ...]:
        """Every intervention of the document that resolves, in declaration order."""
        found = (self.intervention(site) for site in intervention_sites(self.document.data))
        return tuple(i for i in found if i is not None)

    def intervention(self, site: Site) -> Intervention | None:
        """One intervention (the schema has checked its shape: one selector, exactly one operation)."""
        select = self.select(site)
        operation = next(op for op in OPERATIONS if op in site.value)
        value, reference = self.value((*site.path, operation), site.value[operation], operation)
        if select is None or value is _FAILED:
            return None
        heads = site.value.get("heads")
        return Intervention(
            name=site.key,
            select=select,
            operation=operation,
            value=value,
            heads=None if heads is None else tuple(heads),
            head_dim=site.value.get("head_dim"),
            where=self.document.issue(site.path, ""),
            reference=reference,
        )

    def value(self, path: Path, written: Any, operation: str) -> tuple[Any, str | None]:
        """An operation's value as the engine takes it, and the tensor reference it came from."""
        if operation == "zero":
            return None, None
        if operation == "clamp":
            return tuple(None if bound is None else float(bound) for bound in written), None
        if isinstance(written, list):
            return tuple(float(x) for x in written), None
        if not isinstance(written, Mapping):
            return float(written), None
        if "value" in written:
            return RuntimeValue(written["value"]), None
        reference = written["tensor"]
        tensor = self.tensor((*path, "tensor"), reference)
        return (_FAILED, None) if tensor is None else (tensor, reference)

    def folder(self, path: Path) -> str | None:
        """The folder tensor files are read from: that of the spec file that writes `path`."""
        folder = _writer_folder(self.document, path)
        if folder is None:
            self.fail(
                path,
                "a spec given as text or a mapping has no folder to read tensor files from: save the spec as a file "
                "beside the safetensors file, or pass the tensor at run time with {value: NAME}",
            )
        return folder

    def tensor(self, path: Path, reference: str) -> torch.Tensor | None:
        """The tensor `FILE.safetensors:NAME` of the spec's folder, or None after recording why not."""
        folder = self.folder(path)
        if folder is None:
            return None
        file, name = _split(reference)
        try:
            checked, header = self.header(folder, file)
        except FolderError as e:
            self.fail(path, str(e))
            return None
        entry = header.get(name) if name != "__metadata__" else None
        problem = _entry_problem(file, name, entry, header)
        if problem is None and isinstance(entry, Mapping):
            start, end = entry["data_offsets"]
            if self.tensor_bytes + (end - start) > MAX_TENSOR_BYTES:
                problem = (
                    f"the tensors of the interventions are over {MAX_TENSOR_BYTES:,} bytes together (MAX_TENSOR_BYTES) "
                    f"with {file}:{name}; use smaller tensors or pass them at run time with {{value: NAME}}"
                )
            self.tensor_bytes += end - start
        if problem is not None or not isinstance(entry, Mapping):
            self.fail(path, problem or f"{file}:{name} has no header entry")
            return None
        return self.read(checked, name, entry, path)

    def read(self, checked: Any, name: str, entry: Mapping[str, Any], path: Path) -> torch.Tensor | None:
        """Tensor `name` of a checked safetensors file (read by yamltrace, the header checked: never a
        pickle), or None after recording why not; what was read is kept for the load cache."""
        try:
            tensor, read = read_tensor(checked, name, entry)
        except (OSError, ValueError) as e:
            self.fail(path, f"{checked}: cannot read tensor {name!r} ({e}); it is not a safetensors file yamltrace can read")
            return None
        if not all_finite(tensor):
            self.fail(
                path,
                f"{checked}: tensor {name!r} holds values that are not finite (NaN or infinity); an edit takes finite values",
            )
            return None
        self.reads.append(read)
        return tensor

    def header(self, folder: str, file: str) -> tuple[Any, dict[str, Any]]:
        """The checked path and header of a tensor file (each file is checked and parsed once); FolderError if unsafe."""
        if (folder, file) not in self.files:
            checked = folder_file(folder, file, what="tensor file")
            size = checked.stat().st_size
            if size > MAX_TENSOR_FILE_BYTES:
                raise FolderError(
                    f"{checked}: the tensor file is {size:,} bytes, over the {MAX_TENSOR_FILE_BYTES:,}-byte limit "
                    "(MAX_TENSOR_FILE_BYTES); keep only the tensors the spec uses in it"
                )
            header = safetensors_header(folder, file, what="tensor file", max_header_bytes=MAX_TENSOR_HEADER_BYTES)
            self.files[(folder, file)] = (checked, header)
        return self.files[(folder, file)]


def _entry_problem(file: str, name: str, entry: Any, header: Mapping[str, Any]) -> str | None:
    """Why the header entry of tensor `name` cannot be an edit value, or None."""
    if not isinstance(entry, Mapping):
        names = [n for n in header if n != "__metadata__"]
        hint = did_you_mean(name, names) or f"; it holds: {', '.join(names[:10]) or 'no tensors'}"
        return f"{file} has no tensor {name!r}{hint}"
    if entry.get("dtype") not in TENSOR_DTYPES:
        return f"{file}:{name} is {entry.get('dtype')}; an edit value is floating point ({', '.join(TENSOR_DTYPES)})"
    offsets = entry.get("data_offsets")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
        return f"{file}:{name} has no valid data_offsets; it is not a safetensors file yamltrace can read"
    if not 0 <= offsets[0] <= offsets[1]:
        return f"{file}:{name} has data_offsets {offsets}; it is not a safetensors file yamltrace can read"
    return None


def _split(reference: str) -> tuple[str, str]:
    """`FILE.safetensors:NAME` -> (FILE.safetensors, NAME), split at the first colon."""
    file, _, name = reference.partition(":")
    return file, name


def _writer_folder(document: SpecDocument, path: Path) -> str | None:
    """The folder of the spec file that writes `path` (tensor files are named relative to it); None for
    text, a mapping or a shipped `builtin:` spec, which have none."""
    where = document.locate(path)
    file = None if where is None else where.file
    return None if file is None or file.startswith(specs.PREFIX) else names_folder(file)


def tensor_file_names(document: SpecDocument) -> list[tuple[str, str]]:
    """The tensor files a checked spec document's interventions read (`{tensor: FILE:NAME}`), as (folder
    of the spec file naming it, FILE), in declaration order, once each: what a spec's folder and those
    of its base files must hold (a Hub repository's, to download). Text and mappings name none."""
    names: list[tuple[str, str]] = []
    for site in intervention_sites(document.data):
        for operation in OPERATIONS:
            written = site.value.get(operation)
            if isinstance(written, Mapping) and isinstance(written.get("tensor"), str):
                folder = _writer_folder(document, (*site.path, operation, "tensor"))
                if folder is not None and (folder, _split(written["tensor"])[0]) not in names:
                    names.append((folder, _split(written["tensor"])[0]))
    return names


_FAILED = object()  # a value that could not be read (the problem is recorded)
