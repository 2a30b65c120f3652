"""Wrapper modules that a capture sees through: distribution, compilation and activation checkpointing.

`DistributedDataParallel` (and `DataParallel`) keep the model at `.module`, `torch.compile` at
`._orig_mod`, FSDP (`FullyShardedDataParallel`) at `._fsdp_wrapped_module`, and the activation
checkpoint wrappers at `._checkpoint_wrapped_module`. None of them changes what the model computes, so
none may change what a capture records: `unwrap` finds the model a wrapper holds (where its capture
map and decorated forwards are), and the walk gives a module wrapped anywhere in a model the path it
would have without the wrapper, so `class_name` and `layer_name` match the same modules. A wrapper
itself is never hooked: its wrapped module records, once.

`fully_shard` (FSDP2) adds no wrapper: it changes the module's class to a subclass of the original,
so `isinstance` and paths already hold.

Wrapper classes are recognised only once their module is imported (`sys.modules`): an instance of a
class whose module was never imported cannot exist, so nothing is imported here.
"""

from __future__ import annotations

import sys
from typing import cast

from torch import nn

__all__ = ["WRAPPERS", "wrapped_attribute", "unwrap", "child_path", "logical_path"]

# (module, class, attribute holding the wrapped module) of each wrapper seen through.
WRAPPERS: tuple[tuple[str, str, str], ...] = (
    ("torch.nn.parallel.distributed", "DistributedDataParallel", "module"),
    ("torch.nn.parallel.data_parallel", "DataParallel", "module"),
    ("torch._dynamo.eval_frame", "OptimizedModule", "_orig_mod"),
    ("torch.distributed.fsdp.fully_sharded_data_parallel", "FullyShardedDataParallel", "_fsdp_wrapped_module"),
    ("torch.distributed.algorithms._checkpoint.checkpoint_wrapper", "ActivationWrapper", "_checkpoint_wrapped_module"),
)

# The wrapped attribute of each class seen ("" for a class that wraps nothing). A plain dict: read for
# every module of a walk and every block, where a weak key costs a new reference per lookup.
_ATTRIBUTES: dict[type, str] = {}


def wrapped_attribute(module: nn.Module) -> str | None:
    """The name of the child that a wrapper module holds its model in, or None for other modules."""
    cls = type(module)
    attribute = _ATTRIBUTES.get(cls)
    if attribute is None:
        attribute = _ATTRIBUTES[cls] = _attribute_of(cls)
    return attribute if attribute and module._modules.get(attribute) is not None else None


def _attribute_of(cls: type) -> str:
    for module_name, class_name, attribute in WRAPPERS:
        wrapper = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(wrapper, type) and issubclass(cls, wrapper):
            return attribute
    return ""


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside any chain of wrappers around `model` (`model` itself when it is no wrapper)."""
    attribute = wrapped_attribute(model)
    while attribute is not None:
        inner = model._modules[attribute]
        if inner is None:
            break
        model = inner
        attribute = wrapped_attribute(model)
    return model


def child_path(path: str, name: str, wrapped: str | None) -> str:
    """The path of the child `name` of the module at `path`, whose `wrapped_attribute` is `wrapped`:
    the wrapped child of a wrapper takes the wrapper's own path, any other child `path.name`."""
    return path if name == wrapped else f"{path}.{name}"


def logical_path(root: nn.Module, path: str) -> str:
    """`path` (a dotted name in `root.named_modules()`) without the segments of wrapped attributes."""
    if not path:
        return path
    module, kept = root, []
    for name in path.split("."):
        if name != wrapped_attribute(module):
            kept.append(name)
        module = cast(nn.Module, module._modules[name])  # a path of named_modules: never an empty slot
    return ".".join(kept)
