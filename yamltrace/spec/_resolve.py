"""Validated document -> `Spec`: `load_spec` resolves every class a spec names (see `_spec` for `Spec`).

`load_spec` is all or nothing: the document is schema-checked, every class it names is resolved through
the import registry (safe by default, see `_registry`), and every problem is gathered into one
`SpecError` with located issues before anything is returned.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from typing import Any

from torch import nn

from .. import specs
from .._recorder_fields import EDIT_FIELDS, RECORDER_FIELDS, default_index
from .._recorder import OutputRecorder
from .._folder import resolved_file
from ..errors import MAX_ISSUES, SpecError, SpecIssue
from ._interventions import InterventionReader
from ._load_cache import TensorRead, spec_loads
from ._reader import DEFAULT_MAX_BYTES, SpecDocument, names_file
from ._registry import ClassRegistry, ImportPolicy, default_registry, import_module
from ._schema import checked_document
from ._spec import PatchEntry, Spec, SpecScope
from ._walk import Section, Site, document_sections, sites

__all__ = ["load_spec", "model_factory"]


def _base_module(model_cls: type, model: Any) -> nn.Module | None:
    """The module at `base_model_prefix` of an instance (the `LlamaModel` of a `LlamaForCausalLM`), if any."""
    prefix = getattr(model_cls, "base_model_prefix", None)
    base = getattr(model, prefix, None) if model is not None and isinstance(prefix, str) and prefix else None
    return base if isinstance(base, nn.Module) and base is not model else None


def model_factory(reference: str) -> Any:
    """The function a spec's `model: module:name` names when it is a model factory (timm's
    `timm.models.vision_transformer:vit_tiny_patch16_224`, torchvision's `torchvision.models:resnet18`),
    else None (a class, a bare name, or a module not imported: nothing is imported here)."""
    module_name, sep, qualname = reference.partition(":")
    if not sep:
        return None
    value: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        value = getattr(value, part, None)
    return value if callable(value) and not isinstance(value, type) else None


def _base_model_names(model_cls: type, model: Any) -> set[str]:
    """Class names of the base model a task model is built on: the module at `base_model_prefix` of an
    instance, and for a transformers class, the base model class its config's `model_type` maps to."""
    names: set[str] = set()
    base = _base_module(model_cls, model)
    if base is not None:
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
        self.tensor_reads: list[TensorRead] = []  # what the interventions read of tensor files

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

    def spec(self, *, partial: bool = False) -> Spec:
        """The resolved Spec, or one SpecError listing every problem; with `partial`, the Spec of what
        resolved (what did not left out), the problems in `issues`."""
        data = self.document.data
        self.check_model(data.get("model"))
        self.import_modules(data.get("imports", []))
        resolved = {section.scope: self.outputs(section) for section in document_sections(data)}
        outputs = resolved.get("", {})
        scopes = {path: SpecScope(resolved[path], value.get("options", {})) for path, value in data.get("scopes", {}).items()}
        patches = [self.patch(pattern, value) for pattern, value in data.get("patches", {}).items()]
        reader = InterventionReader(self.document, self.selector, self.fail)
        interventions = reader.interventions()
        self.tensor_reads = reader.reads
        if self.issues and not partial:
            raise SpecError(self.issues)
        return Spec(
            outputs=outputs,
            patches=tuple(p for p in patches if p is not None),
            options=dict(data.get("options", {})),
            source=self.document.file,
            model=data.get("model"),
            imports=tuple(data.get("imports", [])),
            scopes=scopes,
            interventions=interventions,
            locations=self.locations,
        )

    def check_model(self, model: str | None) -> None:
        """The `model:` key must name the class of `for_model`, one of its bases, or its base model (the
        `LlamaModel` inside a `LlamaForCausalLM`), compared by class name; or a factory (`model_factory`)."""
        if model is None or self.model_cls is None or model_factory(model) is not None:
            return  # a factory's model is of whatever class it returns
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

    def outputs(self, section: Section) -> dict[str, tuple[OutputRecorder, ...]]:
        """The recorders of one `outputs` section; remembers where each is written."""
        found: dict[str, list[OutputRecorder]] = {key: [] for key in section.outputs}
        for site in sites(section):
            recorder = self.recorder(site)
            if recorder is not None:
                self.locations[(site.scope, site.key, len(found[site.key]))] = self.document.issue(site.path, "")
                found[site.key].append(recorder)
        return {key: tuple(recorders) for key, recorders in found.items()}

    def targets(self, site: Site) -> type | tuple[type, ...] | None:
        """The class a recorder's `target` names, or the tuple of classes its list names (None if one fails)."""
        target = site.value if isinstance(site.value, str) else site.value.get("target")
        if target is None:
            return None
        if isinstance(target, str):
            return self.resolve(target, site.path if isinstance(site.value, str) else (*site.path, "target"))
        classes = [self.resolve(t, (*site.path, "target", i)) for i, t in enumerate(target)]
        return tuple(c for c in classes if c is not None) if all(classes) else None

    def recorder(self, site: Site, *, edit: bool = False) -> OutputRecorder | None:
        """A class reference (default index for its key) or a recorder mapping, as an OutputRecorder; with
        `edit`, an intervention's selector (its fields only, index 0 by default)."""
        value = site.value if isinstance(site.value, Mapping) else {"target": site.value}
        target = self.targets(site)
        if target is None and "target" in value:
            return None
        table = EDIT_FIELDS if edit else RECORDER_FIELDS
        fields = {f.name: value[f.key] for f in table if f.key in value and f.name != "target_class"}
        index = 0 if edit else default_index(site.key)
        try:
            return OutputRecorder(target_class=target, **{"index": index, **fields})
        except (TypeError, ValueError) as e:
            self.fail(site.path, str(e))
            return None

    def selector(self, site: Site) -> OutputRecorder | None:
        """An intervention's selector, as the recorder that would capture what it edits."""
        return self.recorder(site, edit=True)

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

    Returns the immutable `Spec` (`outputs`: key -> tuple of `OutputRecorder`; `scopes`; `patches`;
    `interventions`, whose `{tensor: FILE.safetensors:NAME}` values are read from the spec file's folder).
    A file or `builtin:` name is read and resolved once per content: a later load with the same
    arguments returns the same `Spec` while its files, and the tensors its interventions read, hold the
    same bytes (`_load_cache`); its tensors are shared by those loads, so change them only through the file.
    Raises `SpecError` with every problem (schema, unknown classes with the closest names, imports
    refused without `trust_imports`, bad patterns, a `model:` mismatch, tensor files missing, unsafe or
    over their caps), each located.
    """
    if isinstance(source, Spec):
        return source
    registry = registry or default_registry
    key = _load_key(source, trust_imports, for_model, max_bytes, registry)
    if key is not None:
        kept = spec_loads.get(key)
        if kept is not None:
            return kept  # type: ignore[no-any-return]
    if isinstance(source, str) and source.startswith(specs.PREFIX):
        # A shipped spec (yamltrace's own file): the transformers modules it names may be imported.
        source, trust_imports = specs.path(source), True
    document, issues = checked_document(source, max_bytes=max_bytes)
    policy = ImportPolicy.for_model(for_model, trust=trust_imports)
    resolver = _Resolver(document, registry, policy, for_model)
    resolver.issues.extend(issues)  # reserved keys, recorder fields, patch keys: reported with the rest
    spec = resolver.spec()
    if key is not None:
        spec_loads.put(key, document, spec, _classes(spec), refers_to=registry, tensors=resolver.tensor_reads)
    return spec


def resolved_part(source: str | os.PathLike[str], *, trust_imports: bool = False, for_model: Any = None) -> Spec | None:
    """The Spec of what a spec file that `load_spec` refuses does resolve: its recorders, patches and
    interventions whose classes resolve, the others left out; None where the file does not validate.
    For `yamltrace check`, which goes on checking the rest of a spec one of whose classes is wrong, so
    one run reports every problem. Never cached."""
    try:
        document, issues = checked_document(source, max_bytes=DEFAULT_MAX_BYTES)
    except SpecError:
        return None
    resolver = _Resolver(document, default_registry, ImportPolicy.for_model(for_model, trust=trust_imports), for_model)
    resolver.issues.extend(issues)
    return resolver.spec(partial=True)


def _load_key(source: Any, trust_imports: bool, for_model: Any, max_bytes: int, registry: ClassRegistry) -> Any:
    """What a load of a spec file (a path or `builtin:NAME`) depends on besides the files it reads
    (`_load_cache`): what the name resolves to now (the file's real path and the folder its relative
    names are read from, `names_folder`), import consent, the model's class and base model, the byte cap and the
    registry's state. None for other sources (text, bytes, a mapping), which are not kept."""
    if isinstance(source, str):
        if not (source.startswith(specs.PREFIX) or names_file(source)):
            return None
        name = source
    elif isinstance(source, os.PathLike):
        name = os.fsdecode(os.fspath(source))
    else:
        return None
    # What the name leads to now: a re-pointed link or another working directory is another spec.
    file = name if name.startswith(specs.PREFIX) else resolved_file(name)
    model: Any = None
    if for_model is not None:
        model_cls = for_model if isinstance(for_model, type) else type(for_model)
        base = None if isinstance(for_model, type) else _base_module(model_cls, for_model)
        model = (model_cls, None if base is None else type(base))
    return (file, trust_imports, model, max_bytes, id(registry), registry.version)


def _classes(spec: Spec) -> list[type]:
    """Every class a resolved spec names: recorder targets (root, scopes, interventions) and patch replacements."""
    found = [cls for section in spec.sections() for rs in section.outputs.values() for r in rs for cls in r.target_classes]
    edited = [cls for iv in spec.interventions for cls in iv.select.target_classes]
    return found + edited + [entry.replacement for entry in spec.patches]
