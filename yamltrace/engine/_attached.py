"""What `from_pretrained` attaches to a model it loaded: the spec, and the handle of its persistent
interventions; one attribute each, written and read here only."""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["attach_interventions", "attach_spec", "attached_spec"]

_ATTRIBUTE = "yamltrace_spec"
_INTERVENTIONS = "yamltrace_interventions"


def attach_spec(model: nn.Module, spec: Any) -> None:
    """Attach `spec` (a `Spec`) to `model`: `trace(model)` and the decorated forwards then follow it."""
    setattr(model, _ATTRIBUTE, spec)  # setattr: nn.Module's __setattr__ is typed for modules and tensors only


def attached_spec(model: nn.Module) -> Any:
    """The `Spec` attached to `model` by `attach_spec`, or None.

    Read from the instance's `__dict__`, where `attach_spec` puts it: no `nn.Module.__getattr__`
    (which raises and catches for a missing name), so a decorated forward can read it on every call.
    """
    return model.__dict__.get(_ATTRIBUTE)


def attach_interventions(model: nn.Module, handle: Any) -> None:
    """Attach the handle (an `InterventionHandle`) of the interventions a load put on `model`, as
    `model.yamltrace_interventions`: its `remove()` takes them off."""
    setattr(model, _INTERVENTIONS, handle)
