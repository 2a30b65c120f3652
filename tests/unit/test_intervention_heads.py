"""An intervention's `heads` split the last dimension by the head count `Captures.split_heads` uses:
the nearest module from the edited one up to the root that says (its `num_heads`, `head_dim`, or
config's `num_attention_heads`), taken at the call from the tensor's width."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

import yamltrace
from yamltrace import OutputRecorder, Spec, SpecError
from yamltrace.engine import Intervention

WIDTH = 8


class Tower(nn.Module):
    """A sub-model with its own config (2 heads), as a vision tower or a decoder has."""

    def __init__(self, heads: int | None) -> None:
        super().__init__()
        if heads is not None:
            self.config = SimpleNamespace(num_attention_heads=heads)
        self.proj = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class Composite(nn.Module):
    def __init__(self, root_heads: int | None, tower_heads: int | None) -> None:
        super().__init__()
        if root_heads is not None:
            self.config = SimpleNamespace(num_attention_heads=root_heads)
        self.tower = Tower(tower_heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.tower(x)


def _zero_head_0(model: nn.Module, **fields: object) -> Spec:
    edit = Intervention("ablate", OutputRecorder(class_name="tower.proj", input=0), "zero", heads=(0,), **fields)  # type: ignore[arg-type]
    return Spec(outputs={}, interventions=[edit])


def test_heads_split_by_the_towers_own_count_as_split_heads_does() -> None:
    torch.manual_seed(0)
    model, x = Composite(root_heads=4, tower_heads=2), torch.randn(1, 3, WIDTH)
    received: list[torch.Tensor] = []
    model.tower.proj.register_forward_hook(lambda m, args, out: received.append(args[0]))  # after the edit
    with torch.no_grad(), yamltrace.trace(model, {"heads": OutputRecorder(class_name="tower.proj", input=0)}) as captures:
        model(x)
    (split,) = captures.split_heads("heads")
    assert split.shape[-2:] == (2, 4)  # the tower's two heads of 4, not the root's four of 2
    with torch.no_grad(), yamltrace.intervene(model, _zero_head_0(model)):
        model(x)
    expected = x.clone()
    expected[..., :4] = 0  # head 0 of split_heads' split
    assert torch.equal(received[-1], expected)


def test_an_attention_modules_num_heads_is_nearest() -> None:
    model, x = Composite(root_heads=4, tower_heads=None), torch.randn(1, 3, WIDTH)
    model.tower.num_heads = 1  # e.g. an attention module's own count
    received: list[torch.Tensor] = []
    model.tower.proj.register_forward_hook(lambda m, args, out: received.append(args[0]))  # after the edit
    with torch.no_grad(), yamltrace.intervene(model, _zero_head_0(model)):
        model(x)
    assert torch.equal(received[-1], torch.zeros_like(x))  # one head: all of it


def test_no_head_count_anywhere_is_a_located_error_naming_head_dim() -> None:
    model = Composite(root_heads=None, tower_heads=None)
    with pytest.raises(
        SpecError, match=r"intervention 'ablate' selects heads, but neither module tower.proj nor any above it .*set head_dim"
    ):
        with yamltrace.intervene(model, _zero_head_0(model)):
            pass
    with torch.no_grad(), yamltrace.intervene(model, _zero_head_0(model, head_dim=2)):  # head_dim needs no count
        model(torch.randn(1, 3, WIDTH))


def test_a_head_dim_attribute_counts_by_the_width_at_the_call() -> None:
    model, x = Composite(root_heads=None, tower_heads=None), torch.randn(1, 3, WIDTH)
    model.tower.head_dim = 2  # four heads of 2 at this width
    received: list[torch.Tensor] = []
    model.tower.proj.register_forward_hook(lambda m, args, out: received.append(args[0]))  # after the edit
    with torch.no_grad(), yamltrace.intervene(model, _zero_head_0(model)):
        model(x)
    expected = x.clone()
    expected[..., :2] = 0
    assert torch.equal(received[-1], expected)
