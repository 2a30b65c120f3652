"""Capture scopes: the parts of a model that keep their own captures, as transformers' decorated forwards do.

In transformers a base model's decorated forward (`capture_outputs`) opens its own collector: the
modules it runs record into it, a nested decorated forward shadows it, modules run outside any
decorated forward record nothing, and the last hidden state is tied at the decorated forward's exit
with that model's own setting. A *scope* is such a submodule, named by its dotted path ("" for the
root). `trace` records per scope and ties at each scope's *tie points*; this module says which
submodules are scopes and tie points, and how the captures of several scopes are named.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence

from torch import nn

from ._plan import own_output_map, plan_hooks
from ._recorder import normalized_tasks
from ._session import decorator_tie_last
from ._wrappers import unwrapped_modules

__all__ = [
    "decorated_paths",
    "is_under",
    "outermost",
    "tie_points",
    "exposed_names",
    "plain_owners",
    "scope_label",
    "scope_modules",
]


def decorated_paths(model: nn.Module) -> list[str]:
    """Dotted paths ("" for the root) of the modules whose forward carries a capture decorator
    (yamltrace's or transformers' `capture_outputs`), in `named_modules` order."""
    return [path for path, module in model.named_modules() if _is_decorated(type(module))]


def _is_decorated(cls: type) -> bool:
    """Whether the class's forward carries a capture decorator (memoised per class: a class's forward
    is not expected to change; a class whose forward an instance overrides is read from the class)."""
    decorated = _DECORATED.get(cls)
    if decorated is None:
        decorated = _DECORATED[cls] = decorator_tie_last(cls) is not None
    return decorated


_DECORATED: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def is_under(path: str, scope: str) -> bool:
    """Whether the module at `path` is `scope` or lies in its subtree."""
    return scope == "" or path == scope or path.startswith(scope + ".")


def outermost(paths: Iterable[str]) -> list[str]:
    """The paths that lie in no other path's subtree, in the given order."""
    paths = list(paths)
    return [p for p in paths if not any(q != p and is_under(p, q) for q in paths)]


def tie_points(scope: str, decorated: Sequence[str], scopes: Sequence[str]) -> list[str]:
    """Where a scope ties its last hidden state: the decorated modules of its subtree that are not
    inside a nested scope, else the scope module itself."""
    nested = [s for s in scopes if s != scope and is_under(s, scope)]
    points = [p for p in decorated if is_under(p, scope) and not any(is_under(p, s) for s in nested)]
    return points or [scope]


def scope_label(path: str, others: Iterable[str]) -> str:
    """The prefix a scope's keys get when several scopes record one key: the last component of its
    path (`encoder`), or the whole path with `_` for dots when that last component is not unique."""
    last = path.rpartition(".")[2]
    if sum(1 for other in others if other.rpartition(".")[2] == last) > 1:
        return path.replace(".", "_")
    return last


def plain_owners(model: nn.Module, scopes: Sequence[str], keys: Iterable[str]) -> dict[str, str]:
    """For each of `keys`, the one of several outermost `scopes` whose captures are the model's own.

    A composite's forward returns one part's captures under the plain key (a multimodal model's
    `hidden_states` are its language model's, not its vision tower's), as transformers' model outputs
    do. That part is, per key:
    1. the one scope holding modules that the traced model's own non-empty map hooks for the key (a
       Gemma3 or Mllama composite declares its language model's layer classes); else
    2. the one scope named `language_model`, transformers' convention for the language model of a
       multimodal composite (Llava, PaliGemma, Qwen2-VL and their kin declare no map of their own).
    A key left out (the map hooks several scopes or none, and no single `language_model`: an
    encoder-decoder, a dual encoder such as CLIP) is prefixed in every scope.
    """
    found: dict[str, set[str]] = {}
    own = own_output_map(model)
    if isinstance(own, Mapping) and own:
        for _, path, entries in plan_hooks(model, normalized_tasks(own), nested_maps=False):
            holders = {scope for scope in scopes if is_under(path[1:], scope)}
            for entry in entries:
                found.setdefault(entry.key, set()).update(holders)
    language = [scope for scope in scopes if scope.rpartition(".")[2] == "language_model"]
    owners = {}
    for key in keys:
        holders = found.get(key, set())
        if len(holders) == 1:
            owners[key] = next(iter(holders))
        elif len(language) == 1:
            owners[key] = language[0]
    return owners


def exposed_names(
    keys: Mapping[str, Sequence[str]], hooked: Mapping[str, set[str]], owners: Mapping[str, str] | None = None
) -> dict[tuple[str, str], str]:
    """The name each (scope, key) is exposed under, for the outermost scopes of a trace.

    `keys` maps each scope path to its output keys, `hooked` each scope path to the keys whose
    recorders hook at least one of its modules. A key of one scope keeps its name; a key several
    scopes declare keeps it for the one scope that hooks modules for it (the encoder of an
    encoder-decoder has no cross-attention modules: the decoder's are `cross_attentions`); a key
    several scopes hook keeps it for its owner in `owners` (see `plain_owners`) and is
    `<label>_<key>` for each other scope, or for each scope when it has no owner among them
    (`encoder_hidden_states`, `decoder_hidden_states`, as transformers names them in a
    sequence-to-sequence output). Keys no scope hooks are named after the first scope that declares them.
    """
    paths = list(keys)
    names: dict[tuple[str, str], str] = {}
    for key in dict.fromkeys(k for path in paths for k in keys[path]):
        declaring = [path for path in paths if key in keys[path]]
        hooking = [path for path in declaring if key in hooked.get(path, ())]
        if len(hooking) > 1:
            owner = (owners or {}).get(key)
            for path in hooking:
                names[(path, key)] = key if path == owner else f"{scope_label(path, paths)}_{key}"
        else:
            names[((hooking or declaring)[0], key)] = key
    return names


def scope_modules(model: nn.Module, scope: str, nested: Iterable[str]) -> list[tuple[str, nn.Module]]:
    """(path relative to the scope module with a leading dot, module) of a scope's subtree, nested
    scopes and wrappers (`_wrappers`) left out: the paths a recorder's `matches` sees."""
    module = model.get_submodule(scope)
    nested = [n for n in nested if n != scope and is_under(n, scope)]
    found = []
    for raw, path, child in unwrapped_modules(module):
        full = f"{scope}.{raw}" if scope and raw else (raw or scope)
        if not any(is_under(full, n) for n in nested):
            found.append((f".{path}" if path else "", child))
    return found
