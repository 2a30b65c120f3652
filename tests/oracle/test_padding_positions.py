"""`positions: last` / `first` follow the attention mask the root forward receives (right or left
padding), on transformers models, under `trace`, `generate`, `capture_outputs` and `extract`; a
literal position that falls on padding warns once, naming the fix."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, LlamaForCausalLM, LlamaModel, MixtralConfig, MixtralForCausalLM
from transformers.models.gpt2.modeling_gpt2 import GPT2Block
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer
from transformers.models.mixtral.modeling_mixtral import MixtralDecoderLayer

import yamltrace
from tests.helpers_transformers import VOCAB, redecorated, tiny_llama_config
from yamltrace import CaptureError, OutputRecorder, load_spec

LENGTHS = (6, 4, 2)  # real tokens per row; every row is padded to 6


def _llama() -> nn.Module:
    return LlamaForCausalLM(tiny_llama_config())


def _gpt2() -> nn.Module:
    config = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=32, attn_implementation="eager")
    return GPT2LMHeadModel(config)


def _mixtral() -> nn.Module:
    config = MixtralConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, attn_implementation="eager",
    )  # fmt: skip
    return MixtralForCausalLM(config)


MODELS = {"llama": (_llama, LlamaDecoderLayer), "gpt2": (_gpt2, GPT2Block), "mixtral": (_mixtral, MixtralDecoderLayer)}


def _model(name: str) -> tuple[nn.Module, type[nn.Module]]:
    torch.manual_seed(0)
    build, layer = MODELS[name]
    return build().eval(), layer


def _batch(side: str) -> dict[str, torch.Tensor]:
    mask = torch.zeros(len(LENGTHS), max(LENGTHS), dtype=torch.long)
    for row, length in enumerate(LENGTHS):
        if side == "right":
            mask[row, :length] = 1
        else:
            mask[row, max(LENGTHS) - length :] = 1
    ids = torch.randint(1, VOCAB, mask.shape, generator=torch.Generator().manual_seed(1)) * mask
    return {"input_ids": ids, "attention_mask": mask}


def _by_hand(full: torch.Tensor, mask: torch.Tensor, which: str) -> torch.Tensor:
    """Each row's last / first real position of `full` [batch, seq, ...], indexed by hand."""
    rows = []
    for row in range(full.shape[0]):
        real = mask[row].nonzero().flatten().tolist()
        rows.append(full[row, real[-1] if which == "last" else real[0]])
    return torch.stack(rows)[:, None]


def _recorders(layer: type[nn.Module]) -> dict[str, OutputRecorder]:
    return {
        "full": OutputRecorder(layer, index=0),
        "last": OutputRecorder(layer, index=0, positions="last"),
        "first": OutputRecorder(layer, index=0, positions="first"),
    }


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name", list(MODELS))
def test_last_and_first_are_each_rows_real_tokens_by_the_mask(name: str, side: str) -> None:
    model, layer = _model(name)
    batch = _batch(side)
    with torch.no_grad(), yamltrace.trace(model, _recorders(layer)) as captures:
        model(**batch)
    assert len(captures["last"]) == len(captures["full"]) == model.config.num_hidden_layers
    for full, last, first in zip(captures["full"], captures["last"], captures["first"]):
        assert last.shape == first.shape == (len(LENGTHS), 1, full.shape[-1])  # as `positions: [-1]` gives
        assert torch.equal(last, _by_hand(full, batch["attention_mask"], "last"))
        assert torch.equal(first, _by_hand(full, batch["attention_mask"], "first"))


def test_the_mask_is_read_by_position_from_the_root_forwards_signature() -> None:
    model, layer = _model("llama")
    batch = _batch("right")
    with torch.no_grad(), yamltrace.trace(model, _recorders(layer)) as captures:
        model(batch["input_ids"], batch["attention_mask"])  # LlamaForCausalLM.forward(input_ids, attention_mask, ...)
    assert torch.equal(captures["last"][0], _by_hand(captures["full"][0], batch["attention_mask"], "last"))


def test_without_a_mask_every_position_counts() -> None:
    model, layer = _model("llama")
    with torch.no_grad(), yamltrace.trace(model, _recorders(layer)) as captures:
        model(_batch("right")["input_ids"])
    assert torch.equal(captures["last"][0], captures["full"][0][:, -1:])
    assert torch.equal(captures["first"][0], captures["full"][0][:, :1])


def _caught(run: Any) -> list[str]:
    return [message for message, _ in _caught_at(run)]


def _caught_at(run: Any) -> list[tuple[str, str]]:
    """The padding warnings `run` gives, each with the file it names."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [(str(w.message), w.filename) for w in caught if "padding" in str(w.message)]


def test_a_literal_position_on_padding_warns_once_per_trace_naming_the_fix() -> None:
    model, layer = _model("llama")
    spec = {"last_token": OutputRecorder(layer, index=0, positions=[-1])}

    def run(side: str, forwards: int = 2) -> None:
        with torch.no_grad(), yamltrace.trace(model, spec):
            for _ in range(forwards):
                model(**_batch(side))

    (message,) = _caught(lambda: run("right"))
    assert "'last_token'" in message and "2 of 3 row(s)" in message and "rows [1, 2]" in message
    assert "positions: last" in message
    assert _caught(lambda: run("left")) == []  # the last position is real in every row
    assert len(_caught(lambda: (run("right", 1), run("right", 1)))) == 2  # once per trace block
    batch = _batch("right")
    with torch.no_grad(), yamltrace.trace(model, spec):
        assert _caught(lambda: model(batch["input_ids"])) == []  # no mask, nothing known
    with torch.no_grad(), yamltrace.trace(model, spec):
        ((positional, where),) = _caught_at(lambda: model(batch["input_ids"], batch["attention_mask"]))  # the mask at its place
    assert "rows [1, 2]" in positional
    assert where == __file__  # the line that called the model, not yamltrace's or torch's


def _steps_by_hand(model: nn.Module, layer: type[nn.Module], batch: dict[str, torch.Tensor], which: str) -> None:
    recorders = {"full": OutputRecorder(layer, index=0), which: OutputRecorder(layer, index=0, positions=which)}
    with torch.no_grad(), yamltrace.trace(model, recorders) as captures:
        model.generate(**batch, max_new_tokens=3, do_sample=False, pad_token_id=0)
    steps = captures.steps
    assert len(steps) == 3
    prompt = steps[0]
    for full, kept in zip(prompt["full"], prompt[which]):
        assert torch.equal(kept, _by_hand(full, batch["attention_mask"], which))
    for step in steps[1:]:  # a decode step with a cache: its one position is the token it adds
        for full, kept in zip(step["full"], step[which]):
            assert full.shape[1] == 1 and torch.equal(kept, full)


@pytest.mark.parametrize("side, which", [("left", "first"), ("right", "last")])
@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_generate_steps_take_the_prompts_real_tokens_then_the_new_token(name: str, side: str, which: str) -> None:
    model, layer = _model(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers warns about right padding in a decoder-only model
        _steps_by_hand(model, layer, _batch(side), which)


def test_generate_with_left_padding_and_a_literal_last_position_does_not_warn() -> None:
    model, layer = _model("llama")
    spec = {"last_token": OutputRecorder(layer, index=0, positions=[-1])}

    def run() -> None:
        with torch.no_grad(), yamltrace.trace(model, spec):
            model.generate(**_batch("left"), max_new_tokens=3, do_sample=False, pad_token_id=0)

    assert _caught(run) == []


def test_capture_outputs_keeps_each_rows_last_real_token_and_warns_once_per_model() -> None:
    torch.manual_seed(0)
    cls = redecorated(LlamaModel, True)
    aware = type(
        "AwareLlama",
        (cls,),
        {"_can_record_outputs": {"hidden_states": OutputRecorder(LlamaDecoderLayer, index=0, positions="last")}},
    )
    literal = type(
        "LiteralLlama",
        (cls,),
        {"_can_record_outputs": {"hidden_states": OutputRecorder(LlamaDecoderLayer, index=0, positions=[-1])}},
    )
    plain = type("PlainLlama", (cls,), {"_can_record_outputs": {"hidden_states": OutputRecorder(LlamaDecoderLayer, index=0)}})
    models = [kind(tiny_llama_config()).eval() for kind in (aware, literal, plain)]
    for model in models[1:]:
        model.load_state_dict(models[0].state_dict())
    batch = _batch("right")
    with torch.no_grad():
        kept = models[0](**batch, output_hidden_states=True).hidden_states
        full = models[2](**batch, output_hidden_states=True).hidden_states
        messages = _caught_at(lambda: [models[1](**batch, output_hidden_states=True) for _ in range(3)])
    assert len(kept) == len(full) == 3  # the embeddings, each layer, the last tied post-norm
    for state, whole in zip(kept, full):
        assert torch.equal(state, _by_hand(whole, batch["attention_mask"], "last"))
    assert len(messages) == 1 and "positions: last" in messages[0][0] and messages[0][1] == __file__


class Toy(nn.Module):
    """A root whose forward names its mask `pad_mask` (and accepts a 4-D one)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.proj(x)


def test_a_recorder_names_the_mask_argument() -> None:
    toy, x = Toy(), torch.randn(2, 5, 4)
    pad_mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    spec = load_spec(
        {"yamltrace": 1, "outputs": {"last": {"target": "torch.nn:Linear", "positions": "last", "mask": "pad_mask"}}}
    )
    with torch.no_grad(), yamltrace.trace(toy, spec) as captures:
        toy(x, pad_mask)
        toy(x, pad_mask=pad_mask.bool())
    expected = toy.proj(x)[[0, 1], [2, 4]][:, None]
    assert torch.equal(captures["last"][0], expected) and torch.equal(captures["last"][1], expected)
    assert "mask: pad_mask" in spec.to_yaml()


def test_an_expanded_4d_mask_is_a_located_error_naming_the_fix() -> None:
    toy, x = Toy(), torch.randn(2, 5, 4)
    spec = {"last": OutputRecorder(nn.Linear, positions="last", mask="pad_mask")}
    with pytest.raises(
        CaptureError, match=r"output 'last', module proj: .*'pad_mask' is shape \(2, 1, 5, 5\).*2-D \[batch, seq\]"
    ):
        with yamltrace.trace(toy, spec):
            toy(x, pad_mask=torch.zeros(2, 1, 5, 5))


def test_a_spec_takes_last_and_first_and_locates_a_misspelling() -> None:
    text = "yamltrace: 1\noutputs:\n  last: {target: torch.nn:Linear, positions: lats}\n"
    with pytest.raises(yamltrace.SpecError, match=r":3:.*\$\.outputs\.last\.positions: .*last or first"):
        load_spec(text)
    spec = load_spec(text.replace("lats", "last"))
    assert spec.outputs["last"][0].positions == "last"


def test_a_mask_without_positions_is_a_located_error() -> None:
    text = "yamltrace: 1\noutputs:\n  h: {target: torch.nn:Linear, mask: attention_mask}\n"
    with pytest.raises(yamltrace.SpecError, match=r":3:.*\$\.outputs\.h: .*mask names the attention mask.*set positions"):
        load_spec(text)


def test_attention_weights_keep_each_rows_last_real_query_along_seq_dim_2() -> None:
    model, _ = _model("llama")
    batch = _batch("right")
    spec = {
        "full": OutputRecorder(LlamaAttention, index=1),
        "last": OutputRecorder(LlamaAttention, index=1, positions="last", seq_dim=2),
        "first": OutputRecorder(LlamaAttention, index=1, positions="first", seq_dim=-2),
    }
    with torch.no_grad(), yamltrace.trace(model, spec) as captures:
        model(**batch)
    ends = batch["attention_mask"].sum(1) - 1
    for full, last, first in zip(captures["full"], captures["last"], captures["first"]):
        assert last.shape == (len(LENGTHS), full.shape[1], 1, full.shape[3])
        assert torch.equal(last[:, :, 0], full[torch.arange(len(LENGTHS)), :, ends])
        assert torch.equal(first, full[:, :, :1])
