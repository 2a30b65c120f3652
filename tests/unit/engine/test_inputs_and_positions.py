"""Recorders that take a module's input (`input`) and keep only some token positions (`positions`)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from yamltrace import CaptureError, load_spec
from yamltrace.capture import capture_outputs
from yamltrace.engine import OutputRecorder
from yamltrace.examples.tiny import TinyAttention, TinyDecoderLayer, TinyMLP
from yamltrace.tracing import trace


def rms(layer_name: str, **fields) -> OutputRecorder:
    return OutputRecorder(nn.RMSNorm, layer_name=layer_name, **fields)


def test_input_of_the_post_attention_norm_is_the_residual_between_attention_and_mlp(tiny, input_ids) -> None:
    spec = {
        "hidden_states": TinyDecoderLayer,
        "resid_mid": rms("post_attention_layernorm", input=0),
        "attention_outputs": OutputRecorder(TinyAttention, index=0),
        "mlp_outputs": OutputRecorder(TinyMLP, index=0),
    }
    with trace(tiny, spec) as captures:
        tiny(input_ids)
    hidden, mid = captures["hidden_states"], captures["resid_mid"]
    assert len(mid) == tiny.config.num_hidden_layers
    for i, resid_mid in enumerate(mid):
        torch.testing.assert_close(resid_mid, hidden[i] + captures["attention_outputs"][i], rtol=0, atol=0)
        if i + 1 < len(mid):  # the last hidden state is tied to the final norm's output
            torch.testing.assert_close(hidden[i + 1], resid_mid + captures["mlp_outputs"][i], rtol=0, atol=0)


def test_input_by_keyword_name_uses_the_target_signature_when_called_positionally(tiny, input_ids) -> None:
    by_name = OutputRecorder(nn.Linear, layer_name="down_proj", input="input")
    by_index = OutputRecorder(nn.Linear, layer_name="down_proj", input=0)
    with trace(tiny, {"by_name": by_name, "by_index": by_index}) as captures:
        tiny(input_ids)
    assert len(captures["by_name"]) == tiny.config.num_hidden_layers
    for a, b in zip(captures["by_name"], captures["by_index"]):
        assert a is b
        assert a.shape == (2, 7, tiny.config.intermediate_size)


def test_input_by_keyword_name_reads_keyword_arguments() -> None:
    class Scale(nn.Module):
        def forward(self, x: torch.Tensor, *, factor: torch.Tensor) -> torch.Tensor:
            return x * factor

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = Scale()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.scale(x, factor=x + 1)

    net, x = Net(), torch.ones(2, 3)
    with trace(net, {"factor": OutputRecorder(class_name="scale", input="factor")}) as captures:
        net(x)
    assert torch.equal(captures["factor"][0], x + 1)


def test_a_missing_input_is_an_error_naming_the_module_and_what_it_got(tiny, input_ids) -> None:
    spec = {"missing": OutputRecorder(TinyDecoderLayer, input=3)}
    with pytest.raises(CaptureError, match=r"'missing'.*layers\.0 was called with 1 positional argument"):
        with trace(tiny, spec):
            tiny(input_ids)


def test_input_recorders_work_in_a_decorated_model_map(input_ids) -> None:
    from yamltrace.examples.tiny import TinyConfig, TinyModel

    class WithResidMid(TinyModel):
        _can_record_outputs = {**TinyModel._can_record_outputs, "resid_mid": rms("post_attention_layernorm", input=0)}

    torch.manual_seed(0)
    model = WithResidMid(TinyConfig()).eval()
    out = model(input_ids, output_resid_mid=True, output_hidden_states=True)
    with trace(model, {"resid_mid": rms("post_attention_layernorm", input=0)}) as captures:
        model(input_ids)
    assert len(out.resid_mid) == model.config.num_hidden_layers
    for a, b in zip(out.resid_mid, captures["resid_mid"]):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("positions", "expected"),
    [
        ([-1], [6]),
        (-1, [6]),
        ([0, 3], [0, 3]),
        ([2], [2]),
        ("-3:", [4, 5, 6]),
        (":2", [0, 1]),
        ("0:7:3", [0, 3, 6]),
        (slice(1, 3), [1, 2]),
    ],
)
def test_positions_keep_the_selected_tokens_along_the_sequence(tiny, input_ids, positions, expected) -> None:
    spec = {"full": TinyDecoderLayer, "kept": OutputRecorder(TinyDecoderLayer, index=0, positions=positions)}
    with trace(tiny, spec) as captures:
        tiny(input_ids)
    assert len(captures["kept"]) == len(captures["full"]) == tiny.config.num_hidden_layers
    for full, kept in zip(captures["full"], captures["kept"]):
        assert torch.equal(kept, full[:, expected])


def test_positions_are_copied_out_so_the_full_tensor_is_not_retained(tiny, input_ids) -> None:
    with trace(tiny, {"hidden_states": OutputRecorder(TinyDecoderLayer, index=0, positions="-1:")}) as captures:
        out = tiny(input_ids)
    kept = captures["hidden_states"]
    assert len(kept) == tiny.config.num_hidden_layers + 1
    for value in kept:
        assert value.shape == (2, 1, 32)
        assert value.untyped_storage().nbytes() == value.numel() * value.element_size()
        assert value._base is None
    # The initial state (the embeddings) and the tied last state are selected the same way.
    assert torch.equal(kept[0], tiny.embed_tokens(input_ids)[:, -1:])
    assert torch.equal(kept[-1], out.last_hidden_state[:, -1:])


def test_positions_combine_with_layers_detach_and_dtype(tiny, input_ids) -> None:
    recorder = OutputRecorder(
        TinyDecoderLayer,
        index=0,
        positions=[-1],
        layers=(0, -1),
        detach=True,
        dtype=torch.float64,
    )
    x = input_ids
    tiny.requires_grad_(True)
    with trace(tiny, {"full": TinyDecoderLayer, "hidden_states": recorder}) as captures:
        tiny(x)
    full, kept = (None, *captures["full"]), captures["hidden_states"]
    assert kept[1:-1] == (None,) * (len(kept) - 2)
    assert kept[0].dtype == kept[-1].dtype == torch.float64
    assert not kept[0].requires_grad and not kept[-1].requires_grad
    assert torch.equal(kept[-1], tiny.norm(full[-1])[:, -1:].double())


def test_seq_dim_selects_query_positions_of_attention_weights(tiny, input_ids) -> None:
    recorder = OutputRecorder(TinyAttention, index=1, positions=[-1], seq_dim=2)
    with trace(tiny, {"attentions": TinyAttention, "last_query": recorder}) as captures:
        tiny(input_ids)
    for full, kept in zip(captures["attentions"], captures["last_query"]):
        assert kept.shape == (2, 4, 1, 7)
        assert torch.equal(kept, full[:, :, -1:])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"positions": [9]}, r"positions \[9\] are out of range for a sequence of 7"),
        ({"positions": [0, 9]}, r"positions \[0, 9\] are out of range for a sequence of 7"),
        ({"positions": "9:"}, r"positions '9:' select nothing from a sequence of 7"),
        ({"positions": [-1], "seq_dim": 5}, r"positions \[-1\] select along dim 5, but the tensor has shape \(2, 7, 32\)"),
    ],
)
def test_positions_that_do_not_fit_are_errors_naming_key_module_and_shape(tiny, input_ids, fields, message) -> None:
    spec = {"bad": OutputRecorder(TinyDecoderLayer, index=0, **fields)}
    with pytest.raises(CaptureError, match=rf"output 'bad', module layers\.0: {message}"):
        with trace(tiny, spec):
            tiny(input_ids)


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"input": -1}, ValueError),
        ({"input": True}, TypeError),
        ({"input": "not a name"}, ValueError),
        ({"positions": []}, TypeError),
        ({"positions": "a:b"}, ValueError),
        ({"positions": "::0"}, ValueError),
        ({"positions": [0.5]}, TypeError),
        ({"seq_dim": "1"}, TypeError),
    ],
)
def test_invalid_fields_are_rejected(fields, error) -> None:
    with pytest.raises(error):
        OutputRecorder(TinyDecoderLayer, **fields)


def test_fields_are_normalised_and_hashable() -> None:
    assert OutputRecorder(TinyDecoderLayer, positions=-1).positions == (-1,)
    assert OutputRecorder(TinyDecoderLayer, positions=slice(-8, None)).positions == "-8:"
    assert OutputRecorder(TinyDecoderLayer, positions=" -8 : ").positions == "-8:"
    assert hash(OutputRecorder(TinyDecoderLayer, positions=[1, 2], input="x"))


def test_spec_fields_round_trip_through_yaml() -> None:
    text = (
        "yamltrace: 1\nimports: [yamltrace.examples.tiny]\noutputs:\n"
        "  resid_mid: {target: torch.nn:RMSNorm, layer_name: post_attention_layernorm, input: 0, positions: '-8:'}\n"
        "  last: {target: TinyAttention, index: 1, positions: [-1], seq_dim: 2}\n"
        "  named: {target: TinyDecoderLayer, input: hidden_states}\n"
    )
    spec = load_spec(text)
    assert spec.outputs["resid_mid"][0].input == 0 and spec.outputs["resid_mid"][0].positions == "-8:"
    assert spec.outputs["last"][0].seq_dim == 2 and spec.outputs["last"][0].positions == (-1,)
    assert spec.outputs["named"][0].input == "hidden_states"
    assert load_spec(spec.to_yaml()) == spec


def test_input_and_index_together_are_a_located_spec_error() -> None:
    from yamltrace import SpecError

    text = "yamltrace: 1\nimports: [yamltrace.examples.tiny]\noutputs:\n  k: {target: TinyMLP, input: 0, index: 1}\n"
    with pytest.raises(SpecError, match=r"<string>:4:6: \$\.outputs\.k: give either 'input'"):
        load_spec(text)


def test_capture_outputs_with_positions_in_the_map(input_ids) -> None:
    from yamltrace.examples.tiny import TinyConfig, TinyModel

    class LastToken(TinyModel):
        _can_record_outputs = {"hidden_states": OutputRecorder(TinyDecoderLayer, index=0, positions=[-1])}

    torch.manual_seed(0)
    model = LastToken(TinyConfig()).eval()
    out = model(input_ids, output_hidden_states=True)
    assert [h.shape for h in out.hidden_states] == [(2, 1, 32)] * (model.config.num_hidden_layers + 1)
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state[:, -1:])
    assert capture_outputs  # the decorator under test is TinyModel's


def test_equal_recorders_hash_equal_and_recorders_differing_in_any_field_stay_apart() -> None:
    # The hash reads a few fields; equality reads all of them, so a map or a memo keyed by recorders
    # keeps recorders that differ only in the others apart.
    base = OutputRecorder(TinyDecoderLayer, index=0)
    variants = [
        OutputRecorder(TinyDecoderLayer, index=0, positions=[-1]),
        OutputRecorder(TinyDecoderLayer, index=0, layers=[0]),
        OutputRecorder(TinyDecoderLayer, index=0, detach=True),
        OutputRecorder(TinyDecoderLayer, index=0, dtype="float16"),
        OutputRecorder(TinyDecoderLayer, index=0, optional=True),
        OutputRecorder(TinyDecoderLayer, index=0, layer_name="layers"),
    ]
    again = OutputRecorder(TinyDecoderLayer, index=0)
    assert again == base and hash(again) == hash(base) and len({base, again}) == 1
    assert all(v != base for v in variants) and len({base, *variants}) == 1 + len(variants)
    assert {base: "a", **{v: str(n) for n, v in enumerate(variants)}}[again] == "a"
