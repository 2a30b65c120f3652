"""A replacement holds the original's parameter and buffer names, checked where it is made (built in
place of the original before any weight loads, or made from a built module by `patch_model`), or
declares the renaming (`RenamedState`), which loading then follows."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import yamltrace
import yamltrace.examples.tiny
from yamltrace.checkpoint import save_pretrained
from yamltrace.errors import PatchError
from yamltrace.examples.tiny import TinyConfig, TinyMLP, TinyModel
from yamltrace.patch import RenamedState, apply_patches, patch_model


class FusedMLP(nn.Module):
    """TinyMLP with one fused gate-and-up projection: other parameter names."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.gate_up_proj = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        out: torch.Tensor = self.down_proj(nn.functional.silu(gate) * up)
        return out

    @classmethod
    def from_module(cls, original: TinyMLP) -> FusedMLP:
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.gate_up_proj = nn.Linear(original.gate_proj.in_features, 2 * original.gate_proj.out_features, bias=False)
        with torch.no_grad():
            new.gate_up_proj.weight.copy_(torch.cat([original.gate_proj.weight, original.up_proj.weight]))
        new.down_proj = original.down_proj
        return new


class RenamedMLP(RenamedState):
    """TinyMLP's computation under other names, declared."""

    renamed_state = {"gate_proj.weight": "w_gate.weight", "up_proj.weight": "w_up.weight", "down_proj.weight": "w_down.weight"}

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        size, inner = config.hidden_size, config.intermediate_size
        self.w_gate, self.w_up = nn.Linear(size, inner, bias=False), nn.Linear(size, inner, bias=False)
        self.w_down = nn.Linear(inner, size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.w_down(nn.functional.silu(self.w_gate(x)) * self.w_up(x))
        return out

    @classmethod
    def from_module(cls, original: TinyMLP) -> RenamedMLP:
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.w_gate, new.w_up, new.w_down = original.gate_proj, original.up_proj, original.down_proj
        return new


NAMES = (
    r"yamltrace\.examples\.tiny\.TinyMLP: test_state_names\.FusedMLP cannot take the state of "
    r"yamltrace\.examples\.tiny\.TinyMLP by name: yamltrace\.examples\.tiny\.TinyMLP has gate_proj\.weight, "
    r"up_proj\.weight, which test_state_names\.FusedMLP lacks; test_state_names\.FusedMLP has gate_up_proj\.weight, "
    r"which yamltrace\.examples\.tiny\.TinyMLP lacks\. Checkpoints load by name: give the replacement the original's "
    r"parameter and buffer names, or declare the renaming: inherit yamltrace\.patch\.RenamedState"
)


def test_a_load_refuses_a_replacement_named_otherwise_before_loading_weights(tiny: TinyModel, tmp_path: Path) -> None:
    folder = save_pretrained(tiny, tmp_path / "ckpt")
    with pytest.raises(PatchError, match=NAMES):
        yamltrace.from_pretrained(TinyModel, folder, overrides={"patches": {"TinyMLP": f"{__name__}:FusedMLP"}})
    assert yamltrace.examples.tiny.TinyMLP is TinyMLP


def test_apply_patches_checks_each_instance_built_and_puts_the_constructor_back() -> None:
    init = vars(FusedMLP)["__init__"]
    with pytest.raises(PatchError, match=NAMES):
        with apply_patches({"TinyMLP": FusedMLP}, modules=TinyModel):
            TinyModel(TinyConfig())
    assert vars(FusedMLP)["__init__"] is init and yamltrace.examples.tiny.TinyMLP is TinyMLP
    FusedMLP(TinyConfig())  # outside a block, built as usual


def test_a_declared_renaming_loads_the_original_checkpoint(tiny: TinyModel, tmp_path: Path, input_ids) -> None:
    folder = save_pretrained(tiny, tmp_path / "ckpt")
    loaded = yamltrace.from_pretrained(TinyModel, folder, overrides={"patches": {"TinyMLP": f"{__name__}:RenamedMLP"}})
    assert all(type(layer.mlp) is RenamedMLP for layer in loaded.layers)
    assert torch.equal(loaded.layers[0].mlp.w_gate.weight, tiny.layers[0].mlp.gate_proj.weight)
    with torch.no_grad():
        assert torch.equal(loaded.eval()(input_ids).last_hidden_state, tiny(input_ids).last_hidden_state)
    again = RenamedMLP(TinyConfig())
    again.load_state_dict(tiny.layers[1].mlp.state_dict())  # the original's names
    assert torch.equal(again.w_down.weight, tiny.layers[1].mlp.down_proj.weight)


def test_patch_model_refuses_a_from_module_named_otherwise_and_changes_nothing(tiny: TinyModel) -> None:
    mlp = tiny.layers[0].mlp
    with pytest.raises(PatchError, match=r"^layers\.0\.mlp: test_state_names\.FusedMLP cannot take the state of"):
        patch_model(tiny, {"TinyMLP": FusedMLP})
    assert tiny.layers[0].mlp is mlp and all(type(layer.mlp) is TinyMLP for layer in tiny.layers)


def test_patch_model_takes_a_declared_renaming(tiny: TinyModel, input_ids) -> None:
    with torch.no_grad():
        expected = tiny(input_ids).last_hidden_state
        with patch_model(tiny, {"TinyMLP": RenamedMLP}):
            assert torch.equal(tiny(input_ids).last_hidden_state, expected)
