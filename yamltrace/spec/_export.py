"""Model class -> `Spec`: export the capture map a model declares, as a spec file would write it."""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from ..engine import CaptureMap, decorator_tie_last
from ._resolve import Spec

__all__ = ["spec_from_model"]


def spec_from_model(cls_or_model: type[nn.Module] | nn.Module) -> Spec:
    """Export a model's `_can_record_outputs` (yamltrace's or transformers') as a Spec.

    The capture decorator's `tie_last_hidden_states=False` on the model's `forward` becomes the option
    `tie_last_hidden_states: false`.
    """
    model_cls = cls_or_model if isinstance(cls_or_model, type) else type(cls_or_model)
    output_map: CaptureMap | None = getattr(cls_or_model, "_can_record_outputs", None)
    if not isinstance(output_map, Mapping) or not output_map:
        raise ValueError(f"{model_cls.__name__} declares no _can_record_outputs, so there is no spec to export.")
    options = {"tie_last_hidden_states": False} if decorator_tie_last(model_cls) is False else {}
    return Spec(outputs=output_map, options=options, model=model_cls.__name__)
