"""`forward_from`: a replacement class from a forward-only kernel layer (the Hugging Face `kernels` hub contract).

A hub layer (`kernels.get_kernel(repo).layers.X`) is an `nn.Module` class with a `forward` and no
`__init__`: it computes with the attributes of the module it replaces (`weight`,
`variance_epsilon`, ...), which it declares as class annotations. `forward_from` turns one into a
class a spec can name:

- with `base` (the class it replaces): a subclass of `base` whose forward is the layer's. It has the
  original's constructor, so `apply_patches`/`from_pretrained` build it, and it adds no state, so
  `patch_model` swaps built modules by reassigning their class (nothing copied).
- without `base`: a class whose `from_module` adopts any module that has the layer's declared
  attributes (shared, not copied); it has no constructor of the original's, so it serves
  `patch_model` only.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ._adopt import adopt, require

__all__ = ["forward_from"]


def _declared(layer: type) -> tuple[str, ...]:
    """The attributes a hub layer reads, from its class annotations (its own and its bases' below nn.Module)."""
    names: dict[str, None] = {}
    for cls in reversed(layer.__mro__):
        if cls is not nn.Module and issubclass(cls, nn.Module):
            names.update(dict.fromkeys(getattr(cls, "__annotations__", {})))
    return tuple(names)


def forward_from(
    layer: type[nn.Module], base: type[nn.Module] | None = None, *, name: str | None = None, module: str | None = None
) -> type[nn.Module]:
    """A replacement class running `layer.forward` on the state of the module it replaces.

    `name` (default: the layer's name, with `For<Base>` when `base` is given) and `module` (default:
    the layer's module) name the class; assign it to a module-level name of your module, and pass
    that module's `__name__`, so a spec can name it (`mymodule:Name`) and errors show where it is.
    """
    if not (isinstance(layer, type) and issubclass(layer, nn.Module)) or "forward" not in vars(layer):
        raise TypeError(f"forward_from takes an nn.Module class that defines forward, got {layer!r}.")
    if "__init__" in vars(layer):
        raise TypeError(f"{layer.__qualname__} defines __init__: a hub layer computes with the replaced module's state only.")
    attributes = _declared(layer)
    namespace: dict[str, Any] = {"forward": layer.forward, "__module__": module or layer.__module__, "__doc__": layer.__doc__}
    if base is not None:
        return type(name or f"{layer.__name__}For{base.__name__}", (base,), namespace)

    def from_module(cls: type[nn.Module], original: nn.Module) -> nn.Module:
        require(
            cls,
            original,
            like=f"what {layer.__qualname__} reads",
            attributes=attributes,
            allowed_children=tuple(original._modules),
        )
        return adopt(cls, original)

    namespace["from_module"] = classmethod(from_module)
    return type(name or layer.__name__, (nn.Module,), namespace)
