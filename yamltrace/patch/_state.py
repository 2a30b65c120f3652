"""A replacement holds the original's parameter and buffer names, or declares how it adopts the original's state.

A checkpoint is loaded by name: a replacement whose weights are named otherwise (a fused
`gate_up_proj` for `gate_proj` and `up_proj`) loads with random weights, and only the loader's
report says MISSING / UNEXPECTED. So the names are compared where the replacement is made:

- built in place of the original (`apply_patches(..., modules=...)`, hence `from_pretrained` with a
  spec), each replacement instance is compared, right after its constructor returns and before any
  weight is loaded, with the original built from the same arguments on the `meta` device (no memory,
  no random numbers drawn): for the block, in its context only, the replacement's `__init__` is
  wrapped to do so;
- made from a built module (`patch_model`, `from_module`), the new module is compared with the module
  it replaces.

A replacement whose names differ on purpose declares the renaming: it inherits `RenamedState` and
lists `renamed_state = {original name: its name}`; `load_state_dict` then takes a state dict with the
original's names (its `_load_from_state_dict` renames them), and the names are compared through the
mapping. transformers' `from_pretrained` sets tensors by name without calling `_load_from_state_dict`,
so for a transformers model a renamed replacement is refused even when declared.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType
from typing import Any, ClassVar

import torch
from torch import nn

from ..errors import PatchError, PatchProblem

__all__ = [
    "RENAMED_STATE",
    "RenamedState",
    "checked_construction",
    "renames_not_honoured",
    "state_problem",
    "with_renamed_state",
]

RENAMED_STATE = "renamed_state"

# Whether the load under way honours `RenamedState` (False while transformers' loader builds the model).
_renames_honoured: contextvars.ContextVar[bool] = contextvars.ContextVar("yamltrace_renames_honoured", default=True)
# True while an original is built to compare names with: replacements built inside it are not checked again.
_comparing: contextvars.ContextVar[bool] = contextvars.ContextVar("yamltrace_comparing_state", default=False)


class RenamedState(nn.Module):
    """Mixin for a replacement whose parameter or buffer names differ from the original's on purpose.

    `renamed_state` maps each original name (relative to the module, such as `"w.weight"`) to the
    replacement's. `load_state_dict` of a state dict holding the original's names loads them under
    the replacement's; a state dict holding the replacement's names loads as usual.
    """

    renamed_state: ClassVar[Mapping[str, str]] = {}

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any) -> None:
        # Renamed before this module and its children read their entries (torch builds each child's
        # entries from this dict after this call).
        for old, new in self.renamed_state.items():
            if prefix + old in state_dict and prefix + new not in state_dict:
                state_dict[prefix + new] = state_dict.pop(prefix + old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def _names(module: nn.Module) -> list[str]:
    """The names `load_state_dict` reads for `module`: its parameters and persistent buffers, with its children's."""
    return list(module.state_dict(keep_vars=True))


def _declared(replacement: type) -> Mapping[str, str] | None:
    """The renaming `replacement` declares, when it inherits `RenamedState`'s loading; else None."""
    renames = getattr(replacement, RENAMED_STATE, None)
    if not isinstance(renames, Mapping) or not renames or not issubclass(replacement, RenamedState):
        return None
    return renames


def _described(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def state_problem(original: nn.Module, replacement: nn.Module, *, renames_honoured: bool = True) -> str | None:
    """Why `replacement` cannot take `original`'s state by name (names missing or extra), or None."""
    renames = _declared(type(replacement))
    expected = _names(original)
    if renames is not None and renames_honoured:
        expected = [renames.get(name, name) for name in expected]
    actual = _names(replacement)
    missing = [name for name in expected if name not in set(actual)]
    extra = [name for name in actual if name not in set(expected)]
    if not missing and not extra:
        return None
    theirs, ours = _described(type(original)), _described(type(replacement))
    parts = []
    if missing:
        parts.append(f"{theirs} has {', '.join(missing)}, which {ours} lacks")
    if extra:
        parts.append(f"{ours} has {', '.join(extra)}, which {theirs} lacks")
    if renames is not None and not renames_honoured:
        fix = (
            f"{ours} declares `{RENAMED_STATE}`, but transformers' from_pretrained sets weights by name without "
            "`_load_from_state_dict`: give it the original's parameter and buffer names"
        )
    else:
        fix = (
            "give the replacement the original's parameter and buffer names, or declare the renaming: inherit "
            f"yamltrace.patch.RenamedState and list `{RENAMED_STATE} = {{original name: replacement name}}`"
        )
    return f"{ours} cannot take the state of {theirs} by name: {'; '.join(parts)}. Checkpoints load by name: {fix}."


def with_renamed_state(model: nn.Module, state: Mapping[str, Any]) -> dict[str, Any]:
    """`state` (a state dict of the original modules' names) with the names every `RenamedState`
    module of `model` declares renamed to its own: what `load_state_dict` will read."""
    renamed = dict(state)
    for path, module in model.named_modules():
        renames = _declared(type(module))
        prefix = f"{path}." if path else ""
        for old, new in (renames or {}).items():
            if prefix + old in renamed and prefix + new not in renamed:
                renamed[prefix + new] = renamed.pop(prefix + old)
    return renamed


@contextlib.contextmanager
def renames_not_honoured() -> Iterator[None]:
    """Within the block, a declared `renamed_state` does not excuse different names (a loader that
    does not call `_load_from_state_dict`)."""
    token = _renames_honoured.set(False)
    try:
        yield
    finally:
        _renames_honoured.reset(token)


@contextlib.contextmanager
def checked_construction(plan: Sequence[tuple[ModuleType, str, type, type]]) -> Iterator[None]:
    """Within the block, in this context, each replacement of `plan` ((module, attribute, original,
    replacement), as `apply_patches` swaps them) built is checked, as its constructor returns, against
    the original built from the same arguments on `meta` (PatchError naming the module attribute).

    The replacement's `__init__` is wrapped for the block and put back after it; the class set in the
    model's module stays the replacement itself. Other threads and contexts are not checked."""
    originals: dict[type, list[tuple[type, str]]] = {}
    for module, name, original, replacement in plan:
        originals.setdefault(replacement, []).append((original, f"{module.__name__}.{name}"))
    undo: list[tuple[type, Any]] = []
    token = _checking.set(True)
    try:
        for replacement, sources in originals.items():
            undo.append((replacement, vars(replacement).get("__init__", _INHERITED)))
            type.__setattr__(replacement, "__init__", _checking_init(replacement, sources))
        yield
    finally:
        _checking.reset(token)
        for replacement, init in reversed(undo):
            if init is _INHERITED:
                type.__delattr__(replacement, "__init__")
            else:
                type.__setattr__(replacement, "__init__", init)


_INHERITED = object()  # a class without an `__init__` of its own
# True in the context of an `apply_patches(..., modules=...)` block: what `_checking_init` checks.
_checking: contextvars.ContextVar[bool] = contextvars.ContextVar("yamltrace_checking_state", default=False)


def _checking_init(replacement: type, sources: list[tuple[type, str]]) -> Any:
    """`replacement.__init__`, followed (for an instance of exactly `replacement`, in a checking
    context) by the comparison with each original it replaces: the first that matches passes."""
    init: Any = getattr(replacement, "__init__")

    @functools.wraps(init)
    def __init__(self: nn.Module, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if type(self) is not replacement or not _checking.get() or _comparing.get():
            return
        problems = []
        for original, where in sources:
            token = _comparing.set(True)
            try:
                with torch.device("meta"):
                    reference = original(*args, **kwargs)
            except Exception:  # an original that cannot be built on meta: nothing to compare with
                return
            finally:
                _comparing.reset(token)
            problem = state_problem(reference, self, renames_honoured=_renames_honoured.get())
            if problem is None:
                return
            problems.append(PatchProblem(f"{where}: {problem}", where))
        raise PatchError(problems[:1])

    return __init__
