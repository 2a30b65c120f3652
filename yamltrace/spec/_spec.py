"""`Spec`: a resolved, immutable capture spec (recorders per key, scopes, patch entries, options),
and `Spec.to_yaml`, which writes it back as a spec file `load_spec` reads to an equal `Spec`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import yaml

from .._recorder_fields import EDIT_FIELDS, RECORDER_FIELDS, RecorderField, default_index
from .._intervention import Intervention, RuntimeValue
from .._recorder import CaptureMap, OutputRecorder, normalize_output_map
from ..errors import SpecIssue, format_json_path
from ._registry import ClassRegistry, default_registry
from ._schema import SCHEMA_FILE
from ._walk import Section, section_path, sections

__all__ = ["PatchEntry", "Spec", "SpecScope"]

# Written by `_recorder_to_data` itself: the class references, and the index (whose default depends on the key).
_WRITTEN_APART = {"target_class", "index"}


@dataclass(frozen=True)
class PatchEntry:
    """One entry of a spec's patch mapping: modules whose class matches `pattern` become `replacement`.

    `pattern` is an exact class name or a regex (`re.search`), as written; `replace_with` is the
    replacement as written (kept for `to_yaml`); `device` limits the patch to a device type (`cuda`)
    or one device (`cuda:1`).
    """

    pattern: str
    replacement: type
    replace_with: str
    device: str | None = None


def _grouped(outputs: CaptureMap) -> Mapping[str, tuple[OutputRecorder, ...]]:
    """A `_can_record_outputs`-style map as a read-only map of key -> tuple of OutputRecorder."""
    grouped: dict[str, tuple[OutputRecorder, ...]] = {key: () for key in outputs}
    for key, recorder in normalize_output_map(outputs):
        grouped[key] += (recorder,)
    return MappingProxyType(grouped)


@dataclass(frozen=True, init=False)
class SpecScope:
    """The recorders of one submodule's subtree (a capture scope): they record into its own captures,
    tied at its exit with its options (see docs/spec-format.md, "Scopes")."""

    outputs: Mapping[str, tuple[OutputRecorder, ...]]
    options: Mapping[str, Any] = field(default_factory=dict)

    def __init__(self, outputs: CaptureMap, options: Mapping[str, Any] = MappingProxyType({})) -> None:
        object.__setattr__(self, "outputs", _grouped(outputs))
        object.__setattr__(self, "options", MappingProxyType(dict(options)))


@dataclass(frozen=True, init=False)
class Spec:
    """A resolved capture spec: output recorders per key, scopes, patch entries, options. Immutable.

    `outputs` accepts anything a `_can_record_outputs` map accepts and stores read-only tuples of
    `OutputRecorder`; they apply to the whole model (the root scope). `scopes` maps a submodule path
    (`model`, `model.encoder`) to the `SpecScope` of its subtree. `interventions` are the edits to
    apply, in declaration order (`engine.Intervention`; tensor values compare by value). `source` (the
    file it came from) and `locations` (where each recorder is written: `(scope path, key, position)`
    -> a `SpecIssue` without message) do not take part in equality. A Spec is hashable.
    """

    outputs: Mapping[str, tuple[OutputRecorder, ...]]
    patches: tuple[PatchEntry, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    source: str | None = field(default=None, compare=False)
    model: str | None = None
    imports: tuple[str, ...] = ()
    scopes: Mapping[str, SpecScope] = field(default_factory=dict)
    interventions: tuple[Intervention, ...] = ()
    locations: Mapping[tuple[str, str, int], SpecIssue] = field(default_factory=dict, compare=False, repr=False)

    def __init__(  # written out so that each argument accepts what is converted (any capture map, iterables)
        self,
        outputs: CaptureMap,
        patches: Iterable[PatchEntry] = (),
        options: Mapping[str, Any] = MappingProxyType({}),
        source: str | None = None,
        model: str | None = None,
        imports: Iterable[str] = (),
        scopes: Mapping[str, SpecScope | Mapping[str, Any]] = MappingProxyType({}),
        interventions: Iterable[Intervention] = (),
        locations: Mapping[tuple[str, str, int], SpecIssue] = MappingProxyType({}),
    ) -> None:
        converted = {path: s if isinstance(s, SpecScope) else SpecScope(**s) for path, s in scopes.items()}
        for name, value in (
            ("outputs", _grouped(outputs)),
            ("patches", tuple(patches)),
            ("options", MappingProxyType(dict(options))),
            ("source", source),
            ("model", model),
            ("imports", tuple(imports)),
            ("scopes", MappingProxyType(converted)),
            ("interventions", tuple(interventions)),
            ("locations", MappingProxyType(dict(locations))),
        ):
            object.__setattr__(self, name, value)

    def __hash__(self) -> int:
        # Over what equality compares, mappings by their items (recorders) or keys (options, scopes), so that
        # equal specs hash equal; an intervention's tensor value hashes by its dtype and shape.
        return hash((tuple(self.outputs.items()), self.patches, tuple(self.options), self.model, self.imports,
                     tuple(self.scopes), self.interventions))  # fmt: skip

    def where(self, scope: str, key: str, position: int) -> SpecIssue:
        """Where the recorder at `position` of `key` (in `scope`, "" for `outputs`) is written."""
        found = self.locations.get((scope, key, position))
        if found is not None:
            return found
        return SpecIssue("", format_json_path((*section_path(scope), key, position)), self.source)

    def sections(self) -> list[Section]:
        """The recorders by section: the root's (when it records something or there are no scopes),
        then each scope's; `Section.scope` is "" for the root."""
        return sections(self.outputs, {path: scope.outputs for path, scope in self.scopes.items()})

    def capture_map(self) -> dict[str, list[OutputRecorder]]:
        """The outputs as a fresh `_can_record_outputs`-style dict."""
        return {key: list(recorders) for key, recorders in self.outputs.items()}

    def to_yaml(self, *, registry: ClassRegistry | None = None, schema: str = SCHEMA_FILE) -> str:
        """The spec as YAML that `load_spec` reads back to an equal Spec; classes are written `module:Qualname`.

        The first line is a `# yaml-language-server: $schema=` modeline naming the schema file `schema`,
        relative to where the YAML is saved: by default `yamltrace-spec-v1.schema.json` beside it (a copy
        `yamltrace schema --output` writes), so the text is the same on every machine (checkpoints and
        extraction indexes store it); `schema=schema_path()` names the installed file; `""` no modeline.

        A class defined inside a function is written by its registered name; `ValueError` if it has none.
        A tensor value of an intervention is written as the `FILE.safetensors:NAME` it was read from, so
        the YAML reads back equal from a file in that folder; `ValueError` for a tensor read from no file.
        """
        registry = registry or default_registry
        document: dict[str, Any] = {"yamltrace": 1}
        if self.model is not None:
            document["model"] = self.model
        if self.imports:
            document["imports"] = list(self.imports)
        for section in self.sections():
            written = _outputs_to_data(section.outputs, registry)
            if not section.scope:
                document["outputs"] = written
                continue
            options = self.scopes[section.scope].options
            scopes = document.setdefault("scopes", {})
            scopes[section.scope] = {"outputs": written, **({"options": dict(options)} if options else {})}
        if self.options:
            document["options"] = dict(self.options)
        if self.patches:
            document["patches"] = {
                p.pattern: {"replace_with": p.replace_with, "device": p.device} if p.device else p.replace_with
                for p in self.patches
            }
        if self.interventions:
            document["interventions"] = {edit.name: _intervention_to_data(edit, registry) for edit in self.interventions}
        body = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120)
        return f"# yaml-language-server: $schema={schema}\n{body}" if schema else body


def _class_ref(cls: type, registry: ClassRegistry) -> str:
    """How a class is written in YAML: `module:Qualname`, or its registered name for a local class."""
    if "<locals>" not in cls.__qualname__:
        return f"{cls.__module__}:{cls.__qualname__}"
    name = registry.name_of(cls)
    if name is None:
        raise ValueError(
            f"Class {cls.__qualname__} is defined inside a function, so no spec can import it: register it "
            "with register_class() first, or move it to module level."
        )
    return name


def _outputs_to_data(outputs: Mapping[str, tuple[OutputRecorder, ...]], registry: ClassRegistry) -> dict[str, Any]:
    """An `outputs` section as YAML data (a single recorder is written without a list)."""
    data = {}
    for key, recorders in outputs.items():
        written = [_recorder_to_data(key, r, registry) for r in recorders]
        data[key] = written[0] if len(written) == 1 else written
    return data


def _target_to_data(recorder: OutputRecorder, registry: ClassRegistry) -> str | list[str]:
    """A recorder's target class as a class reference, a tuple of classes as a list of them."""
    if isinstance(recorder.target_class, tuple):
        return [_class_ref(cls, registry) for cls in recorder.target_class]
    return _class_ref(recorder.target_classes[0], registry)


def _recorder_to_data(key: str, recorder: OutputRecorder, registry: ClassRegistry) -> str | dict[str, Any]:
    """A recorder as YAML data: a bare class reference when every field has its default, else an object
    with the fields that differ from their defaults (`RECORDER_FIELDS`)."""
    if recorder.target_class is not None and recorder.class_name is None:
        target = _target_to_data(recorder, registry)
        if isinstance(target, str) and recorder == OutputRecorder(target_class=recorder.target_class, index=default_index(key)):
            return target
    return _selector_to_data(f"Output {key!r}", recorder, registry, RECORDER_FIELDS, default_index(key))


def _selector_to_data(
    label: str, recorder: OutputRecorder, registry: ClassRegistry, fields: tuple[RecorderField, ...], index: int
) -> dict[str, Any]:
    """A recorder mapping: its modules (target or class_name), its index (or input), then the `fields`
    that differ from their defaults; `ValueError` for a field set outside `fields` (no spec key holds it)."""
    if recorder.target_class is not None and recorder.class_name is not None:
        raise ValueError(
            f"{label}: a recorder with both target_class and class_name cannot be written to YAML; split it into two."
        )
    target = None if recorder.target_class is None else _target_to_data(recorder, registry)
    data: dict[str, Any] = {"target": target} if target is not None else {"class_name": recorder.class_name}
    if recorder.input is None:
        data["index"] = recorder.index
    elif recorder.index != index:
        raise ValueError(f"{label}: a recorder that records an input cannot also set index={recorder.index}.")
    for recorder_field in RECORDER_FIELDS:
        value = getattr(recorder, recorder_field.name)
        if recorder_field.name in _WRITTEN_APART or recorder_field.key in data or value == recorder_field.default:
            continue
        if recorder_field not in fields:
            raise ValueError(
                f"{label}: {recorder_field.key}={value!r} does not apply here, so YAML cannot hold it; leave it at its default."
            )
        data[recorder_field.key] = recorder_field.write(value)
    return data


def _intervention_to_data(edit: Intervention, registry: ClassRegistry) -> dict[str, Any]:
    """An intervention as YAML data: its selector, heads, then its one operation and value."""
    data = _selector_to_data(f"Intervention {edit.name!r}", edit.select, registry, EDIT_FIELDS, 0)
    if edit.heads is not None:
        data["heads"] = list(edit.heads)
    if edit.head_dim is not None:
        data["head_dim"] = edit.head_dim
    data[edit.operation] = _edit_value_to_data(edit)
    return data


def _edit_value_to_data(edit: Intervention) -> Any:
    """An operation's value as written in a spec (a tensor as the file reference it was read from)."""
    value = edit.value
    if edit.operation == "zero":
        return True
    if isinstance(value, RuntimeValue):
        return {"value": value.name}
    if isinstance(value, (tuple, list)):
        return list(value)
    if value is None or isinstance(value, (int, float)):
        return value
    if edit.reference is None:
        raise ValueError(
            f"Intervention {edit.name!r}: its tensor value was read from no file, so YAML cannot hold it; save it "
            "with safetensors beside the spec and write {tensor: FILE.safetensors:NAME}, or pass it with {value: NAME}."
        )
    return {"tensor": edit.reference}
