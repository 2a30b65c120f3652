"""Model class or instance -> `Spec`: the capture maps a model declares, as a spec file would write them.

A model whose forward carries the capture decorator exports its own map as the top-level `outputs`.
A model that holds decorated models (a task head over its base model, an encoder-decoder, a
composite of towers) exports one scope per decorated submodule, so the spec captures what
`trace(model)` captures. A recorder that matches no module of the exported model is written
`optional: true`: it exists only in some configurations (cross-attention, an optional tower).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..engine import (
    CAPTURE_MAP_ATTRIBUTE,
    OutputRecorder,
    decorated_paths,
    decorator_tie_last,
    is_under,
    normalize_output_map,
    own_output_map,
    plan_hooks,
    scope_modules,
)
from ._spec import Spec, SpecScope

__all__ = ["spec_from_model"]


def _own_map(module: nn.Module | type) -> Mapping[str, Any]:
    output_map = own_output_map(module) if isinstance(module, nn.Module) else getattr(module, CAPTURE_MAP_ATTRIBUTE, None)
    return output_map if isinstance(output_map, Mapping) else {}


def _options(module: nn.Module | type) -> dict[str, Any]:
    return {"tie_last_hidden_states": False} if decorator_tie_last(module) is False else {}


def _on_meta(cls: type[nn.Module]) -> nn.Module | None:
    """`cls` built from its default config on the meta device (no weight memory), or None if it cannot be."""
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        return None
    try:
        with torch.device("meta"):
            return cls(config_class())
    except Exception:  # a class whose default config does not build: exported from the class alone
        return None


def _marked(model: nn.Module, scope: str, scopes: list[str], output_map: Mapping[str, Any]) -> dict[str, list[OutputRecorder]]:
    """The scope's recorders, each marked optional when it matches no module of its subtree."""
    modules = scope_modules(model, scope, scopes)
    marked: dict[str, list[OutputRecorder]] = {}
    for key, recorder in normalize_output_map(output_map):
        if not any(recorder.matches(module, path) for path, module in modules):
            recorder = dataclasses.replace(recorder, optional=True)
        marked.setdefault(key, []).append(recorder)
    return marked


def spec_from_model(cls_or_model: type[nn.Module] | nn.Module) -> Spec:
    """Export the capture maps of a model (yamltrace's or transformers') as a Spec.

    Given a class, the model is built from its default config on the meta device to find its
    decorated submodules; given an instance, that instance's structure (and configuration) is used.
    The capture decorator's `tie_last_hidden_states=False` becomes the option
    `tie_last_hidden_states: false` (of the scope it belongs to). Scopes inherit the top-level
    options, so under a top-level `false` a scope that ties is written `tie_last_hidden_states: true`;
    a root that records nothing (its map is empty) writes no options.

    Args:
        cls_or_model: a model class (built from its default config on the meta device) or instance.

    Returns:
        A `Spec` that captures what the model's own maps capture; `spec.to_yaml()` writes it.

    Raises:
        ValueError: the model has no capture map and no decorated submodule to export, or a submodule
            switches to a map of its own without a capture decorator (a spec would hook other modules
            than the model's own maps: checked on the built model).
    """
    model_cls = cls_or_model if isinstance(cls_or_model, type) else type(cls_or_model)
    model = cls_or_model if isinstance(cls_or_model, nn.Module) else _on_meta(model_cls)
    if model is None:
        # Without an instance only a decorated class's own map is known to be what trace captures.
        if not _own_map(model_cls):
            raise ValueError(
                f"{model_cls.__name__} declares no _can_record_outputs, so there is no spec to export (if it holds "
                "models that do, pass an instance: spec_from_model(model))."
            )
        if decorator_tie_last(model_cls) is None:
            raise ValueError(
                f"{model_cls.__name__} cannot be built from its default config on the meta device, and its forward "
                "has no capture decorator, so the models it holds are unknown; pass an instance: spec_from_model(model)."
            )
        return Spec(outputs=_own_map(model_cls), options=_options(model_cls), model=model_cls.__name__)
    scopes = decorated_paths(model) or [""]
    outputs: dict[str, list[OutputRecorder]] = {}
    options: dict[str, Any] = {}
    parts: dict[str, tuple[dict[str, list[OutputRecorder]], dict[str, Any]]] = {}
    for path in scopes:
        module = model.get_submodule(path)
        recorders = _marked(model, path, scopes, _own_map(module))
        if path == "":
            outputs, options = recorders, _options(module) if recorders else {}
        else:
            parts[path] = (recorders, _options(module))
    # A scope inherits the top-level options: under a top-level `false`, one that ties says so.
    inherited = {"tie_last_hidden_states": True} if options else {}
    sections = {path: SpecScope(recorders, inherited | own) for path, (recorders, own) in parts.items()}
    if not outputs and not any(scope.outputs for scope in sections.values()):
        raise ValueError(f"{model_cls.__name__} declares no _can_record_outputs, so there is no spec to export.")
    spec = Spec(outputs=outputs, options=options, model=model_cls.__name__, scopes=sections)
    _check_same_hooks(model, spec, scopes)
    return spec


def _hooked(
    model: nn.Module, scopes: list[str], tasks_of: Mapping[str, tuple[Any, ...]], nested_maps: bool
) -> set[tuple[str, str]]:
    """(module path, key) for every module a scope's tasks hook, nested scopes left out."""
    found: set[tuple[str, str]] = set()
    for scope in scopes:
        nested = [n for n in scopes if n != scope and is_under(n, scope)]
        keys = {key for key, _ in tasks_of[scope]}
        for _, path, entries in plan_hooks(model.get_submodule(scope), tasks_of[scope], nested_maps=nested_maps):
            full = f"{scope}{path}" if scope else path[1:]
            if not any(is_under(full, n) for n in nested):
                found.update((full, entry[0]) for entry in entries if entry[0] in keys)
    return found


def _check_same_hooks(model: nn.Module, spec: Spec, scopes: list[str]) -> None:
    """Raise when the exported spec would hook other modules than the model's own maps do.

    Under its own maps, a submodule that declares `_can_record_outputs` without a capture decorator
    switches its subtree to that map (transformers' rule); a spec has no way to say so, and would
    silently capture more (or other) modules than `trace(model)`.
    """
    own = {path: tuple(normalize_output_map(_own_map(model.get_submodule(path)))) for path in scopes}
    outputs = {path: spec.outputs if path == "" else spec.scopes[path].outputs for path in scopes}
    written = {path: tuple((key, r) for key, rs in outputs[path].items() for r in rs) for path in scopes}
    expected, exported = _hooked(model, scopes, own, True), _hooked(model, scopes, written, False)
    if expected != exported:
        extra, missing = sorted(exported - expected), sorted(expected - exported)
        where = ", ".join(f"{path or '<root>'} ({key})" for path, key in (extra or missing)[:4])
        raise ValueError(
            f"{type(model).__name__} switches capture maps inside its subtree (a submodule declares its own "
            "_can_record_outputs without a capture decorator), which a spec cannot express: the exported spec "
            f"would {'also hook' if extra else 'miss'} {len(extra or missing)} module(s) its own maps "
            f"{'leave out' if extra else 'hook'}, e.g. {where}. Use trace(model) without a spec for this model."
        )
