"""A `positions` capture is a copy beside the forward: the loss has no gradient with respect to it. The
documented recipe (capture the whole tensor, index the gradient after) gives the gradient with respect to
those positions of the activation itself."""

from __future__ import annotations

import pytest
import torch
from helpers import ROOT

from yamltrace.engine import OutputRecorder
from yamltrace.examples.tiny import TinyMLP
from yamltrace.tracing import trace


def _perturbed_gradient(tiny, input_ids, layer: int) -> torch.Tensor:
    """The loss's gradient with respect to layer `layer`'s MLP output, taken through a zero added to it."""
    zero = torch.zeros(*input_ids.shape, tiny.config.hidden_size, requires_grad=True)
    handle = tiny.layers[layer].mlp.register_forward_hook(lambda module, args, output: output + zero)
    try:
        loss = tiny(input_ids).last_hidden_state[:, -1].norm()
    finally:
        handle.remove()
    (gradient,) = torch.autograd.grad(loss, zero)
    return gradient


def test_the_full_capture_gives_the_gradient_of_the_selected_positions(tiny, input_ids) -> None:
    spec = {"full": OutputRecorder(TinyMLP, index=0), "last": OutputRecorder(TinyMLP, index=0, positions=[-1])}
    with trace(tiny, spec) as cap:
        loss = tiny(input_ids).last_hidden_state[:, -1].norm()
    grads = torch.autograd.grad(loss, cap["full"], retain_graph=True)
    for layer, gradient in enumerate(grads):
        expected = _perturbed_gradient(tiny, input_ids, layer)
        torch.testing.assert_close(gradient[:, -1:], expected[:, -1:])
        assert gradient[:, -1:].abs().sum() > 0
    with pytest.raises(RuntimeError, match="not have been used in the graph"):
        torch.autograd.grad(loss, cap["last"], retain_graph=True)
    assert torch.autograd.grad(loss, cap["last"], allow_unused=True, retain_graph=True) == (None,) * len(cap["last"])
    cap["last"][0].sum().backward()  # gradients still flow through the copy, to the weights
    assert tiny.layers[0].mlp.down_proj.weight.grad is not None


def test_the_docs_say_where_positions_are_documented_and_give_the_recipe() -> None:
    capture = (ROOT / "docs" / "capture.md").read_text(encoding="utf-8")
    row = next(line for line in capture.splitlines() if line.startswith("| `positions` |"))
    assert "there is no gradient *with respect to* it" in row
    section = capture[capture.index("**Gradients with respect to a capture.**") :]
    assert "torch.autograd.grad(loss, cap[" in section and "g[:, -1:]" in section  # run by tests/integration/test_docs.py
