"""What every shipped kernel does to become a replacement: check the module it adopts, then share its state.

A replacement serves several families (Llama's, Qwen2's and Mistral's RMSNorm are the same code), so
the check is by structure (submodule names, attribute names, parameter shapes), not by class name.
A module that does not fit raises `UnsupportedModuleError` naming what is missing or unsupported,
before anything is built; `patch_model` reports it with the module's path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from torch import nn

from .._forwards import ignored_keywords_problem
from ..errors import UnsupportedModuleError

__all__ = ["UnsupportedModuleError", "adopt", "plain_linear", "refuse", "require"]

M = TypeVar("M", bound=nn.Module)


def adopt(cls: type[M], original: nn.Module) -> M:
    """A new `cls` instance holding `original`'s submodules, parameters, buffers and plain attributes.

    Nothing is copied: the tensors are the original's own objects. Hooks registered on the original
    are not carried over. A `cls` whose forward would silently ignore a keyword the original's forward
    names is refused (`yamltrace._forwards`).
    """
    problem = ignored_keywords_problem(type(original), cls)
    if problem is not None:
        raise UnsupportedModuleError(problem)
    new = cls.__new__(cls)
    nn.Module.__init__(new)
    for name, value in vars(original).items():
        if not name.startswith("_"):
            object.__setattr__(new, name, value)
    new._modules.update(original._modules)
    new._parameters.update(original._parameters)
    new._buffers.update(original._buffers)
    new._non_persistent_buffers_set.update(original._non_persistent_buffers_set)
    return new


def _describe(module: nn.Module) -> str:
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


def require(
    replacement: type,
    original: nn.Module,
    *,
    like: str,
    attributes: Iterable[str] = (),
    linears: Iterable[str] = (),
    allowed_children: Iterable[str] = (),
) -> None:
    """Raise `UnsupportedModuleError` unless `original` has every attribute and `nn.Linear` named.

    `allowed_children` (with `linears`) lists every submodule the replacement knows how to use: a
    submodule outside it would be silently skipped by the replacement's forward, so it is refused too.
    """
    linears = tuple(linears)
    missing = [name for name in (*attributes, *linears) if not hasattr(original, name)]
    not_linear = [name for name in linears if hasattr(original, name) and not isinstance(getattr(original, name), nn.Linear)]
    unknown = sorted(set(original._modules) - set(linears) - set(allowed_children))
    reasons = []
    if missing:
        reasons.append(f"it has no {', '.join(missing)}")
    if not_linear:
        reasons.append(f"{', '.join(not_linear)} {'is' if len(not_linear) == 1 else 'are'} not nn.Linear")
    if unknown:
        reasons.append(f"it has submodules the replacement would skip: {', '.join(unknown)}")
    if reasons:
        raise UnsupportedModuleError(
            f"{replacement.__qualname__} cannot replace {_describe(original)}: it is not shaped like {like} "
            f"({'; '.join(reasons)}). Keep the original class for it, or patch only the classes listed in docs/kernels.md."
        )


def refuse(replacement: type, original: nn.Module | str, why: str) -> UnsupportedModuleError:
    """The error for a module (or config) that has the right shape but uses something unsupported."""
    what = original if isinstance(original, str) else _describe(original)
    return UnsupportedModuleError(f"{replacement.__qualname__} cannot replace {what}: {why}")


def plain_linear(*modules: nn.Module) -> bool:
    """Whether calling `F.linear` on these `nn.Linear`s is the same as calling them: no hooks, no subclass forward."""
    for module in modules:
        if type(module).forward is not nn.Linear.forward or module._forward_hooks or module._forward_pre_hooks:
            return False
    return not (nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks)
