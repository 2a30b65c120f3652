"""The two libraries behind the parity suite, as one namespace each: transformers and yamltrace.

A parity test takes the `lib` fixture (parametrised over both) and asserts what transformers
documents; code written for transformers runs on yamltrace with only the import changed, so the
same assertions must hold for both. A transformers release that changes a behaviour fails the
`transformers` case beside a passing `yamltrace` case (or the other way round).
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

LIBRARIES = ("transformers", "yamltrace")

# Each name of the API -> where transformers' users import it from, and where yamltrace's do.
API = {
    "PreTrainedModel": ("transformers", "yamltrace"),
    "Config": ("transformers:PretrainedConfig", "yamltrace.modeling"),
    "BaseModelOutputWithPast": ("transformers.modeling_outputs", "yamltrace.modeling"),
    "OutputRecorder": ("transformers.utils.output_capturing", "yamltrace"),
    "capture_outputs": ("transformers.utils.output_capturing", "yamltrace"),
    "merge_with_config_defaults": ("transformers.utils.generic", "yamltrace"),
    **{
        name: ("transformers.monkey_patching", "yamltrace")
        for name in ("register_patch_mapping", "unregister_patch_mapping", "get_patch_mapping", "clear_patch_mapping",
                     "apply_patches", "patch_output_recorders")
    },
}  # fmt: skip


def library(name: str) -> SimpleNamespace:
    """The patch-mapping and output-capturing API of `name`, imported the way its users import it."""
    api: dict[str, Any] = {"name": name}
    for attribute, places in API.items():
        module, _, spelled = places[LIBRARIES.index(name)].partition(":")
        api[attribute] = getattr(importlib.import_module(module), spelled or attribute)
    return SimpleNamespace(**api)


@pytest.fixture(params=LIBRARIES)
def lib(request: pytest.FixtureRequest) -> Any:
    """One library's API, with its process-wide patch registry empty before and after the test."""
    api = library(request.param)
    api.clear_patch_mapping()
    yield api
    api.clear_patch_mapping()


def my_model(lib: SimpleNamespace) -> SimpleNamespace:
    """The MyPreTrainedModel / MyModel pattern, written against `lib`: returns its classes."""

    class MyConfig(lib.Config):  # type: ignore[misc, name-defined]
        model_type = "my"

        def __init__(self, hidden_size: int = 8, num_hidden_layers: int = 3, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.hidden_size = hidden_size
            self.num_hidden_layers = num_hidden_layers

    class Attention(nn.Module):
        def __init__(self, config: Any) -> None:
            super().__init__()
            self.proj = nn.Linear(config.hidden_size, config.hidden_size)

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            weights = torch.softmax(x @ x.transpose(-1, -2), dim=-1)
            return self.proj(weights @ x), weights

    class DecoderLayer(nn.Module):
        def __init__(self, config: Any) -> None:
            super().__init__()
            self.attn = Attention(config)
            self.crossattention = Attention(config)

        def forward(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
            x = x + self.attn(x)[0]
            return x + self.crossattention(x)[0]

    class MyPreTrainedModel(lib.PreTrainedModel):  # type: ignore[misc, name-defined]
        config_class = MyConfig
        base_model_prefix = "model"
        _can_record_outputs = {
            "hidden_states": DecoderLayer,
            "attentions": lib.OutputRecorder(Attention, index=1, layer_name="attn"),
            "cross_attentions": lib.OutputRecorder(Attention, index=1, layer_name="crossattention"),
        }

    class MyModel(MyPreTrainedModel):
        def __init__(self, config: Any) -> None:
            super().__init__(config)
            self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
            self.norm = nn.LayerNorm(config.hidden_size)
            self.post_init()

        @lib.merge_with_config_defaults
        @lib.capture_outputs
        def forward(self, inputs_embeds: torch.Tensor, use_cache: bool | None = None, **kwargs: Any) -> Any:
            x = inputs_embeds
            for layer in self.layers:
                x = layer(x, **kwargs)
            return lib.BaseModelOutputWithPast(last_hidden_state=self.norm(x))

    return SimpleNamespace(MyConfig=MyConfig, Attention=Attention, DecoderLayer=DecoderLayer, MyModel=MyModel)
