"""Names -> classes: registered names, plugin entry points, and imports the user consented to.

A spec is data that may arrive with a downloaded checkpoint, so naming a module in it must not run that
module's code. `ClassRegistry.resolve` imports a module only when an `ImportPolicy` allows it: the
module is already imported, lies under an allowed root package (torch, yamltrace, the model's own
package), or the user passed `trust_imports=True`. Registered names and installed plugins (entry points
in group `yamltrace.classes`) need no import consent: registering or installing them is the consent.
"""

from __future__ import annotations

import builtins  # `list` in annotations inside ClassRegistry means its method
import fnmatch
import importlib
import itertools
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from types import ModuleType
from typing import Any, TypeVar, overload

from ..errors import MAX_HINT_CHOICES, SpecError, did_you_mean

__all__ = [
    "ENTRY_POINT_GROUP",
    "ALWAYS_ALLOWED_ROOTS",
    "ImportPolicy",
    "import_module",
    "ClassRegistry",
    "default_registry",
    "register_class",
    "unregister_class",
    "resolve_class",
    "list_classes",
]

ENTRY_POINT_GROUP = "yamltrace.classes"
# Packages whose modules a spec may import without consent: torch, and yamltrace itself.
ALWAYS_ALLOWED_ROOTS = frozenset({"torch", "yamltrace"})

_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_QUALNAME = _MODULE_NAME

C = TypeVar("C", bound=type)


@dataclass(frozen=True)
class ImportPolicy:
    """Which modules a resolution may import: already imported ones, those under `roots`, or all if `trust`."""

    roots: frozenset[str] = ALWAYS_ALLOWED_ROOTS
    trust: bool = False

    @classmethod
    def for_model(cls, model: Any = None, *, trust: bool = False) -> ImportPolicy:
        """The policy for a spec applied to `model` (a class or an instance): its top-level package is allowed."""
        roots = set(ALWAYS_ALLOWED_ROOTS)
        if model is not None:
            model_cls = model if isinstance(model, type) else type(model)
            roots.add(model_cls.__module__.partition(".")[0])
        return cls(frozenset(roots), trust)

    def allows(self, module: str) -> bool:
        """Whether `module` may be imported (or is imported already)."""
        return self.trust or module in sys.modules or module.partition(".")[0] in self.roots

    def refusal(self, module: str) -> str:
        """The message for a module this policy does not allow."""
        return (
            f"module {module!r} is not imported yet, and importing it would run its code: a spec may import only "
            f"modules under {', '.join(sorted(self.roots))} or modules already imported. Import it yourself, "
            "register the class with register_class(), or, if you trust this spec, pass trust_imports=True to the "
            "function that reads it (load_spec, patch_model, from_pretrained; trace and intervene take the Spec that "
            "load_spec returns)."
        )


class ClassRegistry:
    """Named classes for specs, plus lazy plugins from an entry-point group; resolves spec class references.

    Resolution order for a name: registered names (and plugins); `module:Qualname` and `module.Class`
    paths; bare names searched in the given `imports` in order, then in the model's own module.
    Successful resolutions are cached until the registry changes (or the class's module leaves `sys.modules`).
    """

    def __init__(self, entry_point_group: str | None = ENTRY_POINT_GROUP) -> None:
        self.entry_point_group = entry_point_group
        self._classes: dict[str, type] = {}
        self._plugins: dict[str, list[EntryPoint]] | None = None
        self._cache: dict[tuple[Any, ...], type] = {}
        self.version = 0  # bumped by every registration change, for caches of what was resolved with it

    # -- registration ---------------------------------------------------------------------------------

    def register(self, name: str, cls: type) -> type:
        """Register `cls` under `name`; returns `cls`. `ValueError` if the name is taken (also by a plugin)."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"A registered class name must be a non-empty string, got {name!r}.")
        if not isinstance(cls, type):
            raise TypeError(f"register({name!r}, ...) needs a class, got {cls!r}.")
        if name in self._classes or name in self._plugin_entries():
            taken_by = self._classes.get(name) or f"plugin {self._plugin_entries()[name][0].value}"
            raise ValueError(f"Class name {name!r} is already registered ({taken_by}); unregister it first.")
        self._classes[name] = cls
        self._changed()
        return cls

    def unregister(self, name: str) -> type:
        """Remove a registered name; returns its class. `ValueError` if it is not registered."""
        if name not in self._classes:
            raise ValueError(f"Class name {name!r} is not registered (registered: {sorted(self._classes)}).")
        cls = self._classes.pop(name)
        self._changed()
        return cls

    def _changed(self) -> None:
        self._cache.clear()
        self.version += 1

    def get(self, name: str) -> type | None:
        """The class registered (or provided by a plugin) under `name`, or `None`."""
        if name in self._classes:
            return self._classes[name]
        plugins = self._plugin_entries().get(name)
        if not plugins:
            return None
        return self._load_plugin(name, plugins)

    def list(self, filter: str | Iterable[str] = "") -> list[str]:
        """Sorted registered and plugin names, optionally only those matching fnmatch pattern(s) `filter`."""
        names = set(self._classes) | set(self._plugin_entries())
        patterns = [filter] if isinstance(filter, str) else list(filter)
        patterns = [p for p in patterns if p]
        if patterns:
            names = {n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)}
        return sorted(names)

    def name_of(self, cls: type) -> str | None:
        """The first name (sorted) `cls` is explicitly registered under, or `None`; plugins are not loaded."""
        return next((name for name in sorted(self._classes) if self._classes[name] is cls), None)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._classes or name in self._plugin_entries())

    # -- plugins -----------------------------------------------------------------------------------------

    def _plugin_entries(self) -> dict[str, builtins.list[EntryPoint]]:
        """Entry points by name, discovered once on first use (nothing is imported until a name is used)."""
        if self._plugins is None:
            found: dict[str, builtins.list[EntryPoint]] = {}
            if self.entry_point_group:
                for ep in entry_points(group=self.entry_point_group):
                    if all(ep.value != other.value for other in found.get(ep.name, [])):
                        found.setdefault(ep.name, []).append(ep)
            self._plugins = found
        return self._plugins

    def _load_plugin(self, name: str, plugins: builtins.list[EntryPoint]) -> type:
        if len(plugins) > 1:
            raise SpecError.single(
                f"Class name {name!r} is provided by several plugins ({', '.join(ep.value for ep in plugins)}); "
                "uninstall one, or name the class by its module path."
            )
        try:
            cls = plugins[0].load()
        except Exception as e:
            raise SpecError.single(f"plugin class {name!r} ({plugins[0].value}) failed to load: {e}") from e
        if not isinstance(cls, type):
            raise SpecError.single(f"plugin {name!r} ({plugins[0].value}) is {_describe(cls)}, not a class.")
        return cls

    # -- resolution ----------------------------------------------------------------------------------------

    def resolve(
        self,
        name: str,
        *,
        imports: Iterable[str] = (),
        policy: ImportPolicy = ImportPolicy(),
        model_module: str | None = None,
        subclass_of: type | None = None,
        hints: bool = True,
    ) -> type:
        """The class `name` refers to; `SpecError` if it cannot be found, is not allowed, or is not a class.

        Args:
            name: a registered name, `module:Qualname`, `module.Class`, or a bare class name.
            imports: modules searched in order for a bare name.
            policy: which modules may be imported.
            model_module: the module of the model the spec is applied to, searched last for a bare name.
            subclass_of: the base class the result must derive from (checked on the resolved object).
            hints: whether an error may suggest close names (off once a spec has many errors: the work
                of finding them is bounded per spec, not only per name).
        """
        key = (name, tuple(imports), policy, model_module)
        cls = self._cache.get(key)
        if cls is None or cls.__module__ not in sys.modules:  # a forgotten module is resolved (and consented) again
            cls = self._resolve(name, key[1], policy, model_module, hints)
            self._cache[key] = cls
        if subclass_of is not None and not issubclass(cls, subclass_of):
            raise SpecError.single(
                f"{name!r} resolves to {_describe(cls)}, which is not a subclass of "
                f"{subclass_of.__module__}.{subclass_of.__qualname__}."
            )
        return cls

    def _resolve(self, name: str, imports: tuple[str, ...], policy: ImportPolicy, model_module: str | None, hints: bool) -> type:
        registered = self.get(name)
        if registered is not None:
            return registered
        if ":" in name:
            module_name, _, qualname = name.partition(":")
            return self._from_path(name, module_name, qualname, policy, hints)
        if "." in name:
            module_name, _, qualname = name.rpartition(".")
            return self._from_path(name, module_name, qualname, policy, hints)
        return self._from_imports(name, imports, policy, model_module, hints)

    def _hint(self, word: str, modules: Iterable[ModuleType], hints: bool) -> str:
        """A did-you-mean over registered names and the modules' classes, the candidates bounded."""
        if not hints:
            return ""
        names = itertools.chain(self.list(), (n for module in modules for n in _class_names(module)))
        return did_you_mean(word, itertools.islice(names, MAX_HINT_CHOICES), n=3)

    def _from_path(self, name: str, module_name: str, qualname: str, policy: ImportPolicy, hints: bool) -> type:
        if not _MODULE_NAME.fullmatch(module_name) or not _QUALNAME.fullmatch(qualname):
            raise SpecError.single(f"{name!r} is not a class reference: use 'package.module:ClassName'.")
        module = import_module(module_name, policy)
        obj: Any = module
        for part in qualname.split("."):
            if not hasattr(obj, part):
                hint = self._hint(part, [module], hints) or "."
                raise SpecError.single(f"module {module_name!r} has no attribute {qualname!r}{hint}")
            obj = getattr(obj, part)
        return _require_class(name, obj)

    def _from_imports(
        self, name: str, imports: tuple[str, ...], policy: ImportPolicy, model_module: str | None, hints: bool
    ) -> type:
        if not _QUALNAME.fullmatch(name):
            raise SpecError.single(f"{name!r} is not a class name.")
        search_order = list(dict.fromkeys([*imports, *([model_module] if model_module else [])]))
        searched: list[ModuleType] = []
        for module_name in search_order:
            module = import_module(module_name, policy)
            searched.append(module)
            if hasattr(module, name):
                return _require_class(name, getattr(module, name))
        where = ", ".join(repr(m) for m in search_order) or "no modules (add the class's module to `imports`)"
        raise SpecError.single(
            f"class {name!r} not found; searched the registered names and modules {where}{self._hint(name, searched, hints) or '.'}"
        )


def import_module(module_name: str, policy: ImportPolicy) -> ModuleType:
    """Import `module_name` if `policy` allows it; `SpecError` otherwise or if the import fails.

    A `__main__` module is never imported (importing one runs a program, which may exit the process),
    and anything the import raises, `SystemExit` included, becomes a SpecError; only KeyboardInterrupt
    passes through.
    """
    if not _MODULE_NAME.fullmatch(module_name):
        raise SpecError.single(f"{module_name[:100]!r} is not a module name.")
    if "__main__" in module_name.split("."):
        raise SpecError.single(
            f"{module_name!r} is a __main__ module: importing it runs a program; a spec may import only library modules."
        )
    if not policy.allows(module_name):
        raise SpecError.single(policy.refusal(module_name))
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise SpecError.single(f"cannot import module {module_name!r}: {e}.") from e
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - SystemExit & co. from a module's import-time code
        raise SpecError.single(f"importing module {module_name!r} failed: {type(e).__name__}: {e}") from e


def _require_class(name: str, obj: Any) -> type:
    if not isinstance(obj, type):
        raise SpecError.single(f"{name!r} is {_describe(obj)}, not a class; a spec may name classes only.")
    return obj


def _describe(obj: Any) -> str:
    if isinstance(obj, type):
        return f"class {obj.__module__}.{obj.__qualname__}"
    if callable(obj) and hasattr(obj, "__qualname__"):
        return f"the function {getattr(obj, '__module__', '?')}.{obj.__qualname__}"
    return f"an instance of {type(obj).__qualname__}"


def _class_names(module: ModuleType) -> Iterator[str]:
    return (n for n, v in list(vars(module).items()) if isinstance(v, type) and not n.startswith("_"))


default_registry = ClassRegistry()


@overload
def register_class(name: C, cls: None = None) -> C: ...
@overload
def register_class(name: str, cls: None = None) -> Callable[[C], C]: ...
@overload
def register_class(name: str, cls: C) -> C: ...
def register_class(name: Any, cls: Any = None) -> Any:
    """Register a class for specs in the default registry: `register_class("Name", cls)`, or as a decorator.

    `@register_class` registers under the class's `__name__`; `@register_class("Name")` under "Name".
    A spec may then name the class as `Name` without importing anything (registering is consent).

    Args:
        name: the name specs use, or the class itself (decorator without arguments).
        cls: the class (an `nn.Module` subclass for recorders and patches).

    Returns:
        The class (so it works as a decorator), or a decorator when only a name is given.

    Raises:
        ValueError: the name is already registered (`unregister_class` it first).
    """
    if isinstance(name, type) and cls is None:
        return default_registry.register(name.__name__, name)
    if cls is None:
        return lambda c: default_registry.register(name, c)
    return default_registry.register(name, cls)


def unregister_class(name: str) -> type:
    """Remove `name` from the default registry; returns its class."""
    return default_registry.unregister(name)


def resolve_class(name: str, **kwargs: Any) -> type:
    """Resolve a class reference with the default registry (see `ClassRegistry.resolve`)."""
    return default_registry.resolve(name, **kwargs)


def list_classes(filter: str | Iterable[str] = "") -> list[str]:
    """Names in the default registry, optionally filtered by fnmatch pattern(s)."""
    return default_registry.list(filter)
