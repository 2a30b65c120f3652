"""Capture under `torch.compile`: what works today, and what is refused (with the error users see).

Dynamo behaviour is what matters here, so the models are compiled with `backend="eager"` (no C++
toolchain, seconds instead of minutes); inductor sees the same graphs and graph breaks.

Findings (torch 2.13, transformers 5.23):
- `trace(model)` around a compiled model returns the same tensors as eager, whether its first
  compiled call happens inside the block or before it: yamltrace's hooks are interceptors set as the
  instance's `forward`, which dynamo guards on, so code compiled before the block is recompiled once
  to include them (forward hooks added later would be skipped: `skip_nnmodule_hook_guards`).
- `fullgraph=True` works with `trace` (interceptors installed before compilation; while dynamo traces
  them the gate is a plain flag, not a ContextVar), on an undecorated model, on a yamltrace-decorated
  one with capture off, and on transformers' own model. The decorator asked to capture under
  `fullgraph=True` is refused with an error that names `yamltrace.trace(model)` (it sets up its
  hooks per forward, inside the traced region); without fullgraph it captures after a graph break.
- transformers, first call compiled with `fullgraph=True` and capture requested: "Dynamo does not
  know how to enter a `lock` context manager" (`_hook_installation_lock` in
  `maybe_install_capturing_hooks`); once its hooks were installed eagerly it compiles, because its
  `CompileableContextVar` turns into a plain global while dynamo traces.
"""

from __future__ import annotations

import pytest
import torch
from harness import input_ids, llama_config, llama_variants

FLAGS = {"output_hidden_states": True, "output_attentions": True}

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture
def models():
    torch._dynamo.reset()
    yield llama_variants(2)
    torch._dynamo.reset()


def _eager_captures(model):
    import yamltrace

    with torch.inference_mode(), yamltrace.trace(model) as captures:
        model(input_ids=input_ids())
    return captures


def _assert_same(captures, reference) -> None:
    assert {k: len(captures[k]) for k in captures} == {k: len(reference[k]) for k in reference}
    for key in reference:
        for got, expected in zip(captures[key], reference[key]):
            torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_trace_compiled_inside_block_matches_eager(models) -> None:
    import yamltrace

    model = models["plain"]
    reference = _eager_captures(model)
    compiled = torch.compile(model, backend="eager")
    with torch.inference_mode(), yamltrace.trace(model) as captures:
        compiled(input_ids=input_ids())
    _assert_same(captures, reference)


def test_trace_compiled_before_block_matches_eager(models) -> None:
    import yamltrace

    model = models["plain"]
    reference = _eager_captures(model)
    compiled = torch.compile(model, backend="eager")
    with torch.inference_mode():
        compiled(input_ids=input_ids())
        with yamltrace.trace(model) as captures:
            compiled(input_ids=input_ids())
    _assert_same(captures, reference)


@pytest.mark.parametrize("variant", ["plain", "yamltrace", "transformers"])
def test_trace_fullgraph(models, variant) -> None:
    import yamltrace

    model = models[variant]
    reference = _eager_captures(model)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with torch.inference_mode(), yamltrace.trace(model) as captures:
        compiled(input_ids=input_ids())
    _assert_same(captures, reference)


def test_decorator_compiled_matches_eager(models) -> None:
    model = models["yamltrace"]
    with torch.inference_mode():
        expected = model(input_ids=input_ids(), **FLAGS)
        got = torch.compile(model, backend="eager")(input_ids=input_ids(), **FLAGS)
    for key in FLAGS:
        key = key.removeprefix("output_")
        assert len(got[key]) == len(expected[key])
        for a, b in zip(got[key], expected[key]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_decorator_fullgraph_is_refused_naming_trace(models) -> None:
    model = models["yamltrace"]
    with torch.inference_mode(), pytest.raises(torch._dynamo.exc.Unsupported, match=r"yamltrace\.trace\(model\)"):
        torch.compile(model, backend="eager", fullgraph=True)(input_ids=input_ids(), **FLAGS)


def test_transformers_fullgraph_fails_on_its_lock() -> None:
    """The reference: transformers' first compiled call that requests capture enters a threading lock."""
    from transformers import LlamaModel

    torch._dynamo.reset()
    model = LlamaModel(llama_config(2)).eval()
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    with pytest.raises(torch._dynamo.exc.Unsupported, match="enter a `lock` context manager"):
        with torch.inference_mode():
            compiled(input_ids=input_ids(), output_hidden_states=True)
    torch._dynamo.reset()
