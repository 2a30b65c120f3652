"""Validated document -> `Spec`: a resolved, immutable capture spec; `load_spec`, `Spec.to_yaml`.

`load_spec` is all or nothing: the document is schema-checked, every class it names is resolved through
the import registry (safe by default, see `yamltrace.registry`), and every problem is gathered into one
`SpecError` with located issues before anything is returned.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import yaml
from torch import nn

from .. import specs
from ..engine import CAPTURE_DTYPES, CaptureMap, OutputRecorder, default_index, normalize_output_map
from ..errors import MAX_ISSUES, SpecError, SpecIssue, format_json_path
from ._reader import DEFAULT_MAX_BYTES, SpecDocument
from ._registry import ClassRegistry, ImportPolicy, default_registry, import_module
from ._schema import SCHEMA_ID, checked_document

__all__ = ["PatchEntry", "Spec", "SpecScope", "load_spec"]

_DEFAULT_LAYERS_KEY = OutputRecorder.__dataclass_fields__["num_hidden_layers_key"].default
_DEFAULT_SEQ_DIM = OutputRecorder.__dataclass_fields__["seq_dim"].default
_DTYPE_NAMES = {dtype: name for name, dtype in CAPTURE_DTYPES.items()}


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
    (`model`, `model.encoder`) to the `SpecScope` of its subtree. `source` (the file it came from) and
    `locations` (where each recorder is written: `(scope path, key, position)` -> a `SpecIssue`
    without message) do not take part in equality.
    """

    outputs: Mapping[str, tuple[OutputRecorder, ...]]
    patches: tuple[PatchEntry, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    source: str | None = field(default=None, compare=False)
    model: str | None = None
    imports: tuple[str, ...] = ()
    scopes: Mapping[str, SpecScope] = field(default_factory=dict)
    locations: Mapping[tuple[str, str, int], SpecIssue] = field(default_factory=dict, compare=False, repr=False)

    def __init__(  # written out so that each argument accepts what is converted (any capture map, iterables)
        self, outputs: CaptureMap, patches: Iterable[PatchEntry] = (), options: Mapping[str, Any] = MappingProxyType({}),
        source: str | None = None, model: str | None = None, imports: Iterable[str] = (),
        scopes: Mapping[str, SpecScope | Mapping[str, Any]] = MappingProxyType({}),
        locations: Mapping[tuple[str, str, int], SpecIssue] = MappingProxyType({}),
    ) -> None:
        converted = {path: s if isinstance(s, SpecScope) else SpecScope(**s) for path, s in scopes.items()}
        for name, value in (
            ("outputs", _grouped(outputs)), ("patches", tuple(patches)), ("options", MappingProxyType(dict(options))),
            ("source", source), ("model", model), ("imports", tuple(imports)),
            ("scopes", MappingProxyType(converted)), ("locations", MappingProxyType(dict(locations))),
        ):
            object.__setattr__(self, name, value)

    def where(self, scope: str, key: str, position: int) -> SpecIssue:
        """Where the recorder at `position` of `key` (in `scope`, "" for `outputs`) is written."""
        found = self.locations.get((scope, key, position))
        if found is not None:
            return found
        prefix = ("scopes", scope) if scope else ()
        return SpecIssue("", format_json_path((*prefix, "outputs", key, position)), self.source)

    def capture_map(self) -> dict[str, list[OutputRecorder]]:
        """The outputs as a fresh `_can_record_outputs`-style dict."""
        return {key: list(recorders) for key, recorders in self.outputs.items()}

    def to_yaml(self, *, registry: ClassRegistry | None = None) -> str:
        """The spec as YAML that `load_spec` reads back to an equal Spec; classes are written `module:Qualname`.

        A class defined inside a function is written by its registered name; `ValueError` if it has none.
        """
        registry = registry or default_registry
        document: dict[str, Any] = {"yamltrace": 1}
        if self.model is not None:
            document["model"] = self.model
        if self.imports:
            document["imports"] = list(self.imports)
        if self.outputs or not self.scopes:
            document["outputs"] = _outputs_to_data(self.outputs, registry)
        if self.scopes:
            document["scopes"] = {
                path: {"outputs": _outputs_to_data(scope.outputs, registry), **({"options": dict(scope.options)} if scope.options else {})}
                for path, scope in self.scopes.items()
            }
        if self.options:
            document["options"] = dict(self.options)
        if self.patches:
            document["patches"] = {
                p.pattern: {"replace_with": p.replace_with, "device": p.device} if p.device else p.replace_with
                for p in self.patches
            }
        body = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=120)
        return f"# yaml-language-server: $schema={SCHEMA_ID}\n{body}"


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


def _recorder_to_data(key: str, recorder: OutputRecorder, registry: ClassRegistry) -> str | dict[str, Any]:
    """A recorder as YAML data: a bare class reference when every field has its default, else an object."""
    if recorder.target_class is not None and recorder.class_name is not None:
        raise ValueError(
            f"Output {key!r}: a recorder with both target_class and class_name cannot be written to YAML; "
            "split it into two recorders."
        )
    target = None if recorder.target_class is None else _class_ref(recorder.target_class, registry)
    if target is not None and recorder == OutputRecorder(target_class=recorder.target_class, index=default_index(key)):
        return target
    data: dict[str, Any] = {"target": target} if target is not None else {"class_name": recorder.class_name}
    if recorder.input is None:
        data["index"] = recorder.index
    elif recorder.index != default_index(key):
        raise ValueError(f"Output {key!r}: a recorder that records an input cannot also set index={recorder.index}.")
    else:
        data["input"] = recorder.input
    if recorder.layer_name is not None:
        data["layer_name"] = recorder.layer_name
    if not recorder.capture_initial_hidden_state:
        data["capture_initial_hidden_state"] = False
    if recorder.num_hidden_layers_key != _DEFAULT_LAYERS_KEY:
        data["num_hidden_layers_key"] = recorder.num_hidden_layers_key
    if recorder.layers is not None:
        data["layers"] = list(recorder.layers)
    if recorder.detach:
        data["detach"] = True
    if recorder.to is not None:
        data["to"] = recorder.to
    if recorder.dtype is not None:
        data["dtype"] = _DTYPE_NAMES[recorder.dtype]
    if recorder.positions is not None:
        data["positions"] = recorder.positions if isinstance(recorder.positions, str) else list(recorder.positions)
    if recorder.seq_dim != _DEFAULT_SEQ_DIM:
        data["seq_dim"] = recorder.seq_dim
    if recorder.optional:
        data["optional"] = True
    return data


def _base_model_names(model_cls: type, model: Any) -> set[str]:
    """Class names of the base model a task model is built on: the module at `base_model_prefix` of an
    instance, and for a transformers class, the base model class its config's `model_type` maps to."""
    names: set[str] = set()
    prefix = getattr(model_cls, "base_model_prefix", None)
    base = getattr(model, prefix, None) if model is not None and isinstance(prefix, str) and prefix else None
    if isinstance(base, nn.Module) and base is not model:
        names.update(c.__name__ for c in type(base).__mro__)
    model_type = getattr(getattr(model_cls, "config_class", None), "model_type", None)
    if model_cls.__module__.startswith("transformers.") and isinstance(model_type, str):
        from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

        mapped = MODEL_MAPPING_NAMES.get(model_type, ())
        names.update((mapped,) if isinstance(mapped, str) else mapped)
    return names


class _Resolver:
    """Turns one validated document into a Spec, collecting every problem as a located issue."""

    def __init__(self, document: SpecDocument, registry: ClassRegistry, policy: ImportPolicy, for_model: Any) -> None:
        self.document = document
        self.registry = registry
        self.policy = policy
        self.model_cls = None if for_model is None else (for_model if isinstance(for_model, type) else type(for_model))
        self.model_instance = None if isinstance(for_model, type) else for_model
        self.issues: list[SpecIssue] = []
        self.imports: tuple[str, ...] = ()
        self.locations: dict[tuple[str, str, int], SpecIssue] = {}

    def fail(self, path: tuple[str | int, ...], message: str, *, at_key: bool = False) -> None:
        """Record a problem located at the YAML node of `path` (its key with `at_key`)."""
        self.issues.append(self.document.issue(path, message, at_key=at_key))

    def resolve(self, reference: str, path: tuple[str | int, ...]) -> type | None:
        """The nn.Module subclass `reference` names, or None after recording why not."""
        try:
            return self.registry.resolve(
                reference,
                imports=self.imports,
                policy=self.policy,
                model_module=None if self.model_cls is None else self.model_cls.__module__,
                subclass_of=nn.Module,
                hints=len(self.issues) < MAX_ISSUES,
            )
        except SpecError as e:
            for issue in e.issues:
                self.fail(path, issue.message)
            return None

    def spec(self) -> Spec:
        """The resolved Spec, or one SpecError listing every problem."""
        data = self.document.data
        self.check_model(data.get("model"))
        self.import_modules(data.get("imports", []))
        outputs = self.outputs(data.get("outputs", {}), ())
        scopes = {
            path: SpecScope(self.outputs(value.get("outputs", {}), ("scopes", path)), value.get("options", {}))
            for path, value in data.get("scopes", {}).items()
        }
        patches = [self.patch(pattern, value) for pattern, value in data.get("patches", {}).items()]
        if self.issues:
            raise SpecError(self.issues)
        return Spec(
            outputs=outputs,
            patches=tuple(p for p in patches if p is not None),
            options=dict(data.get("options", {})),
            source=self.document.file,
            model=data.get("model"),
            imports=tuple(data.get("imports", [])),
            scopes=scopes,
            locations=self.locations,
        )

    def check_model(self, model: str | None) -> None:
        """The `model:` key must name the class of `for_model`, one of its bases, or its base model (the
        `LlamaModel` inside a `LlamaForCausalLM`), compared by class name."""
        if model is None or self.model_cls is None:
            return
        name = re.split(r"[:.]", model)[-1]
        if name in {c.__name__ for c in self.model_cls.__mro__} or name in _base_model_names(self.model_cls, self.model_instance):
            return
        applied = self.model_cls.__name__
        self.fail(
            ("model",),
            f"this spec is for {model!r}, but it is applied to {applied}, which is neither that class, a subclass "
            f"of it, nor a model built on it; write 'model: {applied}' if the spec fits it, or remove the model key.",
        )

    def import_modules(self, modules: list[str]) -> None:
        """Import the spec's `imports` (with consent); bare names are then searched in those that loaded."""
        loaded = []
        for i, module in enumerate(modules):
            try:
                import_module(module, self.policy)
                loaded.append(module)
            except SpecError as e:
                self.fail(("imports", i), e.issues[0].message)
        self.imports = tuple(loaded)

    def outputs(self, section: Mapping[str, Any], prefix: tuple[str, ...]) -> dict[str, tuple[OutputRecorder, ...]]:
        """The recorders of an `outputs` section (top level, or of the scope `prefix` names)."""
        return {key: self.recorders(key, value, prefix) for key, value in section.items()}

    def recorders(self, key: str, value: Any, prefix: tuple[str, ...] = ()) -> tuple[OutputRecorder, ...]:
        """The recorders of one output key (one recorder or a list of them); remembers where each is written."""
        located: list[tuple[tuple[str | int, ...], Any]]
        if isinstance(value, list):
            located = [((*prefix, "outputs", key, i), v) for i, v in enumerate(value)]
        else:
            located = [((*prefix, "outputs", key), value)]
        found: list[OutputRecorder] = []
        scope = str(prefix[1]) if prefix else ""
        for path, v in located:
            recorder = self.recorder(key, v, path)
            if recorder is not None:
                self.locations[(scope, key, len(found))] = self.document.issue(path, "")
                found.append(recorder)
        return tuple(found)

    def recorder(self, key: str, value: str | dict[str, Any], path: tuple[str | int, ...]) -> OutputRecorder | None:
        """A class reference (default index for `key`) or a recorder mapping, as an OutputRecorder."""
        if isinstance(value, str):
            target = self.resolve(value, path)
            return None if target is None else OutputRecorder(target_class=target, index=default_index(key))
        target = None
        if "target" in value:
            target = self.resolve(value["target"], (*path, "target"))
            if target is None:
                return None
        layers = value.get("layers")
        try:
            return OutputRecorder(
                target_class=target,
                index=value.get("index", default_index(key)),
                layer_name=value.get("layer_name"),
                class_name=value.get("class_name"),
                capture_initial_hidden_state=value.get("capture_initial_hidden_state", True),
                num_hidden_layers_key=value.get("num_hidden_layers_key", _DEFAULT_LAYERS_KEY),
                layers=None if layers is None else tuple(layers),
                detach=value.get("detach", False),
                to=value.get("to"),
                dtype=value.get("dtype"),
                input=value.get("input"),
                positions=value.get("positions"),
                seq_dim=value.get("seq_dim", _DEFAULT_SEQ_DIM),
                optional=value.get("optional", False),
            )
        except (TypeError, ValueError) as e:
            self.fail(path, str(e))
            return None

    def patch(self, pattern: str, value: str | dict[str, Any]) -> PatchEntry | None:
        """One patch entry: the replacement must be an nn.Module subclass (patterns are checked with the schema)."""
        replace_with = value if isinstance(value, str) else value["replace_with"]
        path = ("patches", pattern) if isinstance(value, str) else ("patches", pattern, "replace_with")
        replacement = self.resolve(replace_with, path)
        if replacement is None:
            return None
        device = None if isinstance(value, str) else value.get("device")
        return PatchEntry(pattern, replacement, replace_with, device)


def load_spec(
    source: str | os.PathLike[str] | bytes | Mapping[str, Any] | Spec,
    *,
    trust_imports: bool = False,
    for_model: Any = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    registry: ClassRegistry | None = None,
) -> Spec:
    """Read, validate and resolve a spec; raises one `SpecError` listing every problem, located.

    Args:
        source: a path, YAML text or bytes, a mapping, a `Spec` (returned as is), or `"builtin:<name>"`
            for a spec of the library (`yamltrace.specs.list()`).
        trust_imports: allow importing any module the spec names. Without it, only modules already
            imported, under torch or yamltrace, or under `for_model`'s top-level package are imported.
        for_model: the model class or instance the spec will be applied to; its package becomes an
            allowed import root, its module is searched for bare class names, and a `model:` key in the
            spec must name its class (or a base class).
        max_bytes: the largest spec file accepted.
        registry: the class registry to resolve names with (default: the default registry).

    Returns the immutable `Spec` (`outputs`: key -> tuple of `OutputRecorder`; `scopes`; `patches`).
    Raises `SpecError` with every problem (schema, unknown classes with the closest names, imports
    refused without `trust_imports`, bad patterns, a `model:` mismatch), each located.
    """
    if isinstance(source, Spec):
        return source
    if isinstance(source, str) and source.startswith(specs.PREFIX):
        # A shipped spec (yamltrace's own file): the transformers modules it names may be imported.
        source, trust_imports = specs.path(source), True
    document, issues = checked_document(source, max_bytes=max_bytes)
    policy = ImportPolicy.for_model(for_model, trust=trust_imports)
    resolver = _Resolver(document, registry or default_registry, policy, for_model)
    resolver.issues.extend(issues)  # reserved keys, recorder fields, patch keys: reported with the rest
    return resolver.spec()
