"""An intervention's `layers` keep positions among the modules its selector matches, in module order,
and the edit applies to each call of those modules; where that differs from a capture's `layers`
(call order), because an edited module runs more than once in a forward, a located warning says so."""

from __future__ import annotations

import warnings

import torch
from torch import nn

import yamltrace
from yamltrace import OutputRecorder, Spec, load_spec

WIDTH = 4


class Block(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Looped(nn.Module):
    """Two blocks; the second runs twice per forward (a block shared between layers)."""

    def __init__(self, order: tuple[int, ...]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.order = order

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in self.order:
            x = self.blocks[i](x)
        return x


_CALL_LINE = Looped.forward.__code__.co_firstlineno + 2  # `x = self.blocks[i](x)`


SPEC = f"""yamltrace: 1
interventions:
  steer:
    target: {__name__}:Block
    layers: [1]
    add: 1.0
"""


def _run(model: nn.Module, forwards: int = 2) -> tuple[torch.Tensor, list[str]]:
    spec = load_spec(SPEC, trust_imports=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad(), yamltrace.intervene(model, spec) as edited:
            for _ in range(forwards):
                out = model(torch.ones(1, WIDTH))
    assert edited["steer"] == ("blocks.1",)  # module order: the second Block module
    said = [w for w in caught if "runs more than once" in str(w.message)]
    # Located at the model code that calls the module (`Looped.forward`), not inside yamltrace or torch.
    assert all((w.filename, w.lineno) == (__file__, _CALL_LINE) for w in said)
    return out, [str(w.message) for w in said]


def test_layers_count_modules_in_module_order_and_edit_each_call() -> None:
    out, said = _run(Looped((0, 1, 1)))
    assert torch.equal(out, torch.full((1, WIDTH), ((1 * 2) * 2 + 1) * 2 + 1.0))  # both calls of blocks.1 edited
    (message,) = said  # once per block, though two forwards each ran it twice
    assert "<string>:4:" in message and "$.interventions.steer" in message
    assert "intervention 'steer' (layers [1]) edits module blocks.1" in message and "module order" in message


def test_a_model_whose_modules_run_once_in_order_says_nothing() -> None:
    model = Looped((0, 1))
    out, said = _run(model)
    assert torch.equal(out, torch.full((1, WIDTH), 1 * 2 * 2 + 1.0)) and said == []


def test_a_module_seen_to_run_once_is_checked_again_in_a_later_block() -> None:
    model = Looped((0, 1))
    assert _run(model)[1] == []
    model.order = (0, 1, 1)  # (a loop whose count depends on the input or a setting)
    out, said = _run(model)
    assert torch.equal(out, torch.full((1, WIDTH), ((1 * 2) * 2 + 1) * 2 + 1.0)) and len(said) == 1


def test_a_persistent_handle_warns_once() -> None:
    model = Looped((0, 1, 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad(), yamltrace.apply_interventions(model, load_spec(SPEC, trust_imports=True)):
            for _ in range(3):
                model(torch.ones(1, WIDTH))
    assert sum("runs more than once" in str(w.message) for w in caught) == 1


def test_a_captures_layers_count_calls_where_an_edits_count_modules() -> None:
    model = Looped((0, 1, 1))
    with torch.no_grad(), yamltrace.trace(model, Spec(outputs={"x": [OutputRecorder(Block, index=0)]})) as captures:
        model(torch.ones(1, WIDTH))
    assert captures.paths("x") == ("blocks.0", "blocks.1", "blocks.1")  # three calls: three positions
