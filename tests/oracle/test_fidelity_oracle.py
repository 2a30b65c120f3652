"""Oracle: on tiny random models of popular transformers classes (heads, encoder-decoders, composites),
`trace(model)` and `trace(model, <spec exported from the class, through YAML>)` equal the model's own
`output_hidden_states` / `output_attentions` tuples, torch.equal per tensor."""

from __future__ import annotations

import pytest
import torch
import transformers
from fidelity_models import MODELS, build, expected_captures, expected_outputs

from helpers import assert_same
from yamltrace.spec import load_spec, spec_from_model
from yamltrace.tracing import trace

pytestmark = pytest.mark.oracle


@pytest.fixture(scope="module", params=list(MODELS))
def case(request):
    transformers.logging.set_verbosity_error()
    model, inputs = build(request.param)
    return model, inputs, expected_captures(expected_outputs(model, inputs))


@pytest.mark.parametrize("variant", ["own-maps", "exported-spec"])
def test_trace_equals_the_models_own_outputs(case, variant: str) -> None:
    model, inputs, expected = case
    spec = None if variant == "own-maps" else load_spec(spec_from_model(type(model)).to_yaml(), for_model=model)
    with torch.no_grad(), trace(model, spec) as captures:
        torch.manual_seed(0)
        model(**inputs)
    assert expected, "the model returned no captures to compare"
    # Every tuple the output holds is traced under its name; traced keys the output lacks are empty
    # (e.g. cross-attention of a model built without it).
    assert set(expected) <= set(captures)
    assert all(captures[key] == () for key in set(captures) - set(expected))
    for key, value in expected.items():
        assert_same(captures[key], value, key)
