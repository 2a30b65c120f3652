"""The two libraries behind the parity suite, as one namespace each: transformers and yamltrace.

A parity test takes the `lib` fixture (parametrised over both) and asserts what transformers
documents; code written for transformers runs on yamltrace with only the import changed, so the
same assertions must hold for both. A transformers release that changes a behaviour fails the
`transformers` case beside a passing `yamltrace` case (or the other way round).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

LIBRARIES = ("transformers", "yamltrace")


def library(name: str) -> SimpleNamespace:
    """The patch-mapping and output-capturing API of `name`, imported the way its users import it."""
    if name == "transformers":
        from transformers import PretrainedConfig, PreTrainedModel
        from transformers.modeling_outputs import BaseModelOutputWithPast
        from transformers.monkey_patching import (
            apply_patches,
            clear_patch_mapping,
            get_patch_mapping,
            patch_output_recorders,
            register_patch_mapping,
            unregister_patch_mapping,
        )
        from transformers.utils.generic import merge_with_config_defaults
        from transformers.utils.output_capturing import OutputRecorder, capture_outputs

        config: Any = PretrainedConfig
    else:
        from yamltrace import (
            OutputRecorder,
            PreTrainedModel,
            apply_patches,
            capture_outputs,
            clear_patch_mapping,
            get_patch_mapping,
            merge_with_config_defaults,
            patch_output_recorders,
            register_patch_mapping,
            unregister_patch_mapping,
        )
        from yamltrace.modeling import BaseModelOutputWithPast, Config

        config = Config
    return SimpleNamespace(
        name=name,
        Config=config,
        PreTrainedModel=PreTrainedModel,
        BaseModelOutputWithPast=BaseModelOutputWithPast,
        OutputRecorder=OutputRecorder,
        capture_outputs=capture_outputs,
        merge_with_config_defaults=merge_with_config_defaults,
        register_patch_mapping=register_patch_mapping,
        unregister_patch_mapping=unregister_patch_mapping,
        get_patch_mapping=get_patch_mapping,
        clear_patch_mapping=clear_patch_mapping,
        apply_patches=apply_patches,
        patch_output_recorders=patch_output_recorders,
    )


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
