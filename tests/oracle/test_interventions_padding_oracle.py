"""Interventions with `positions: last` / `first` edit each row's last / first real token by the root
call's attention mask (right or left padding), under `intervene`, `trace`, `apply_interventions` and
`generate`; each edited forward is `torch.equal` to the same edit as plain torch hooks that read the
mask by hand. A literal position that edits padding warns once, naming the fix."""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, LlamaForCausalLM
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, GPT2Block
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer

import yamltrace
from tests.helpers_transformers import VOCAB, tiny_llama_config
from yamltrace import OutputRecorder, Spec, SpecError
from yamltrace.engine import Intervention, RuntimeValue

LENGTHS = (6, 4, 2)  # real tokens per row; every row is padded to 6
HIDDEN, HEADS = 32, 4
STEER = torch.linspace(-0.5, 0.5, HIDDEN)


def _llama() -> nn.Module:
    return LlamaForCausalLM(tiny_llama_config(pad_token_id=0, eos_token_id=2, bos_token_id=1))


def _gpt2() -> nn.Module:
    config = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=2, n_head=HEADS, n_positions=32, pad_token_id=0)
    config._attn_implementation = "eager"
    return GPT2LMHeadModel(config)


# name -> (builder, decoder layer, attention class, the attention's output projection)
MODELS: dict[str, tuple[Callable[[], nn.Module], type[nn.Module], type[nn.Module], str]] = {
    "llama": (_llama, LlamaDecoderLayer, LlamaAttention, "o_proj"),
    "gpt2": (_gpt2, GPT2Block, GPT2Attention, "c_proj"),  # (attn.c_proj: the MLP has a c_proj too)
}


def _model(name: str) -> nn.Module:
    torch.manual_seed(0)
    return MODELS[name][0]().eval()


def _batch(side: str) -> dict[str, torch.Tensor]:
    mask = torch.zeros(len(LENGTHS), max(LENGTHS), dtype=torch.long)
    for row, length in enumerate(LENGTHS):
        if side == "right":
            mask[row, :length] = 1
        else:
            mask[row, max(LENGTHS) - length :] = 1
    ids = torch.randint(3, VOCAB, mask.shape, generator=torch.Generator().manual_seed(1)) * mask
    return {"input_ids": ids, "attention_mask": mask}


def _real(mask: torch.Tensor, length: int, which: str) -> list[int]:
    """Per row, the index among the last `length` columns of `mask` of its last / first real one."""
    current = mask[:, mask.shape[1] - length :]
    return [(row.nonzero().flatten()[-1 if which == "last" else 0]).item() for row in current]


def _edit_rows(
    h: torch.Tensor, mask: torch.Tensor | None, which: str, edit: Callable[[torch.Tensor, int], torch.Tensor]
) -> torch.Tensor:
    """`h` [batch, seq, ...] with each row's `which` real position replaced by `edit(values, row)`."""
    out = h.clone()
    picked = [-1 if which == "last" else 0] * h.shape[0] if mask is None else _real(mask, h.shape[1], which)
    for row, position in enumerate(picked):
        out[row, position] = edit(out[row, position], row)
    return out


@contextmanager
def _by_hand(model: nn.Module, layer: type[nn.Module], which: str, edit: Callable[[torch.Tensor, int], torch.Tensor],
             *, layers: tuple[int, ...] = (1,), pre: bool = False) -> Iterator[None]:  # fmt: skip
    """Plain torch hooks: the root's pre-hook keeps the call's attention mask, each selected module's
    hook edits its output (or with `pre`, its first argument) at each row's real position by it."""
    seen: dict[str, torch.Tensor | None] = {}

    def root(module: nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        seen["mask"] = kwargs.get("attention_mask")

    def output(module: nn.Module, args: Any, out: Any) -> Any:
        if isinstance(out, tuple):
            return (_edit_rows(out[0], seen["mask"], which, edit), *out[1:])
        return _edit_rows(out, seen["mask"], which, edit)

    def inputs(module: nn.Module, args: Any) -> Any:
        return (_edit_rows(args[0], seen["mask"], which, edit), *args[1:])

    modules = [m for m in model.modules() if isinstance(m, layer)]
    handles = [model.register_forward_pre_hook(root, with_kwargs=True)]
    for i in layers:
        handles.append(modules[i].register_forward_pre_hook(inputs) if pre else modules[i].register_forward_hook(output))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _spec(*edits: Intervention) -> Spec:
    return Spec(outputs={}, interventions=list(edits))


def _steer(layer: type[nn.Module], which: str, **fields: Any) -> Intervention:
    return Intervention("steer", OutputRecorder(layer, index=0, layers=(1,), positions=which, **fields), "add", STEER)


@pytest.mark.parametrize("which", ["last", "first"])
@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name", list(MODELS))
def test_last_and_first_edit_each_rows_real_token_as_plain_hooks_do(name: str, side: str, which: str) -> None:
    model, layer = _model(name), MODELS[name][1]
    batch = _batch(side)
    with torch.no_grad():
        plain = model(**batch).logits
        with yamltrace.intervene(model, _spec(_steer(layer, which))):
            ours = model(**batch).logits
        with _by_hand(model, layer, which, lambda v, row: v + STEER):
            theirs = model(**batch).logits
        literal = Intervention(
            "steer", OutputRecorder(layer, index=0, layers=(1,), positions=(-1 if which == "last" else 0,)), "add", STEER
        )
        with warnings.catch_warnings(), yamltrace.intervene(model, _spec(literal)):
            warnings.simplefilter("ignore")
            padded_end = model(**batch).logits
    assert not torch.equal(ours, plain)
    assert torch.equal(ours, theirs)
    # The padded side's literal position is another token: the mask moved the edit.
    assert torch.equal(ours, padded_end) == ((side == "right") == (which == "first"))


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("operation", ["zero", "set", "scale", "clamp"])
def test_every_operation_with_last_equals_plain_hooks(name: str, side: str, operation: str) -> None:
    model, layer = _model(name), MODELS[name][1]
    batch = _batch(side)
    value: Any = {"zero": None, "set": 0.25, "scale": 2.0, "clamp": (None, 0.0)}[operation]
    edit = Intervention("edit", OutputRecorder(layer, index=0, layers=(0,), positions="last"), operation, value)  # type: ignore[arg-type]
    by_hand = {
        "zero": lambda v, row: torch.zeros_like(v),
        "set": lambda v, row: torch.full_like(v, 0.25),
        "scale": lambda v, row: v * 2.0,
        "clamp": lambda v, row: v.clamp(None, 0.0),
    }[operation]
    with torch.no_grad():
        with yamltrace.intervene(model, _spec(edit)):
            ours = model(**batch).logits
        with _by_hand(model, layer, "last", by_hand, layers=(0,)):
            theirs = model(**batch).logits
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("name", list(MODELS))
def test_heads_of_the_last_token_equal_plain_hooks(name: str, side: str) -> None:
    model, (_, _, attention, projection) = _model(name), MODELS[name]
    batch = _batch(side)
    edit = Intervention(
        "heads", OutputRecorder(class_name=f"attn.{projection}", input=0, layers=(1,), positions="last"), "zero", heads=(1, 3)
    )

    def zero_heads(v: torch.Tensor, row: int) -> torch.Tensor:
        view = v.view(HEADS, -1).clone()
        view[[1, 3]] = 0
        return view.flatten()

    projections = [getattr(m, projection) for m in model.modules() if isinstance(m, attention)]
    with torch.no_grad():
        with yamltrace.intervene(model, _spec(edit)):
            ours = model(**batch).logits
        seen: dict[str, Any] = {}
        handles = [
            model.register_forward_pre_hook(lambda m, a, k: seen.update(mask=k["attention_mask"]), with_kwargs=True),
            projections[1].register_forward_pre_hook(lambda m, a: (_edit_rows(a[0], seen["mask"], "last", zero_heads),)),
        ]
        try:
            theirs = model(**batch).logits
        finally:
            for handle in handles:
                handle.remove()
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("side", ["right", "left"])
def test_a_per_row_value_patches_each_rows_last_token(side: str) -> None:
    model, layer = _model("llama"), LlamaDecoderLayer
    batch = _batch(side)
    with torch.no_grad(), yamltrace.trace(model, {"h": OutputRecorder(layer, index=0, layers=(1,), positions="last")}) as clean:
        model(**{**batch, "input_ids": batch["input_ids"].flip(1) * batch["attention_mask"]})
    patch = clean["h"][1]  # [batch, 1, hidden]: each row's last real token of the other run
    for value in (patch, patch[:, 0]):  # with or without the sequence dimension
        edit = Intervention("patch", OutputRecorder(layer, index=0, layers=(1,), positions="last"), "set", RuntimeValue("clean"))
        with torch.no_grad():
            with yamltrace.intervene(model, _spec(edit), values={"clean": value}):
                ours = model(**batch).logits
            with _by_hand(model, layer, "last", lambda v, row: patch[row, 0]):
                theirs = model(**batch).logits
        assert torch.equal(ours, theirs)


def test_a_full_shape_value_is_cut_at_each_rows_last_token() -> None:
    model, layer = _model("llama"), LlamaDecoderLayer
    batch = _batch("right")
    with torch.no_grad(), yamltrace.trace(model, {"h": OutputRecorder(layer, index=0, layers=(1,))}) as clean:
        model(**{**batch, "input_ids": batch["input_ids"].flip(1) * batch["attention_mask"]})
    full = clean["h"][1]
    real = _real(batch["attention_mask"], full.shape[1], "last")
    edit = Intervention("patch", OutputRecorder(layer, index=0, layers=(1,), positions="last"), "set", RuntimeValue("clean"))
    with torch.no_grad():
        with yamltrace.intervene(model, _spec(edit), values={"clean": full}):
            ours = model(**batch).logits
        with _by_hand(model, layer, "last", lambda v, row: full[row, real[row]]):
            theirs = model(**batch).logits
    assert torch.equal(ours, theirs)


def test_trace_records_the_edit_and_persistent_edits_equal_plain_hooks() -> None:
    model, layer = _model("gpt2"), GPT2Block
    batch = _batch("right")
    spec = Spec(outputs={"h": [OutputRecorder(layer, index=0, layers=(1,))]}, interventions=[_steer(layer, "last")])
    with torch.no_grad():
        seen: list[torch.Tensor] = []
        with _by_hand(model, layer, "last", lambda v, row: v + STEER):  # its hook runs before this one
            handle = model.transformer.h[1].register_forward_hook(
                lambda m, a, out: seen.append(out[0] if isinstance(out, tuple) else out)
            )
            theirs = model(**batch)
            handle.remove()
        with yamltrace.trace(model, spec) as captures:
            ours = model(**batch).logits
        handle = yamltrace.apply_interventions(model, _spec(_steer(layer, "last")))
        try:
            persistent = model(**batch).logits
        finally:
            handle.remove()
        after = model(**batch).logits
    assert torch.equal(ours, theirs.logits) and torch.equal(persistent, theirs.logits)
    assert torch.equal(captures["h"][1], seen[0])  # the captured output is the edited one
    assert not torch.equal(after, ours)  # removed


@pytest.mark.parametrize("name", list(MODELS))
def test_generate_edits_each_steps_own_last_token(name: str) -> None:
    model, layer = _model(name), MODELS[name][1]
    batch = _batch("left")  # generation pads on the left
    settings = dict(max_new_tokens=4, do_sample=False, output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    with torch.no_grad():
        with yamltrace.intervene(model, _spec(_steer(layer, "last"))):
            # The root's forward keeps its signature, which generate reads (logits_to_keep, ...).
            assert "logits_to_keep" in inspect.signature(model.forward).parameters
            ours = model.generate(**batch, **settings)
        with _by_hand(model, layer, "last", lambda v, row: v + STEER):
            theirs = model.generate(**batch, **settings)
    assert torch.equal(ours.sequences, theirs.sequences)
    assert all(torch.equal(a, b) for a, b in zip(ours.scores, theirs.scores, strict=True))


def test_the_edit_is_differentiable() -> None:
    model, layer = _model("llama"), LlamaDecoderLayer
    batch = _batch("right")
    edit = Intervention("steer", OutputRecorder(layer, index=0, layers=(1,), positions="last"), "add", RuntimeValue("v"))
    ours = STEER.clone().requires_grad_(True)
    with yamltrace.intervene(model, _spec(edit), values={"v": ours}):
        model(**batch).logits.sum().backward()
    theirs = STEER.clone().requires_grad_(True)
    with _by_hand(model, layer, "last", lambda v, row: v + theirs):
        model(**batch).logits.sum().backward()
    # The same gradient, summed over the rows in another order (one broadcast add against one per row).
    assert ours.grad is not None and theirs.grad is not None and bool(ours.grad.abs().sum() > 0)
    assert torch.allclose(ours.grad, theirs.grad, rtol=1e-5, atol=1e-6)


def test_without_a_mask_last_is_the_final_position() -> None:
    model, layer = _model("llama"), LlamaDecoderLayer
    ids = _batch("right")["input_ids"]
    with torch.no_grad():
        with yamltrace.intervene(model, _spec(_steer(layer, "last"))):
            ours = model(ids).logits
        with _by_hand(model, layer, "last", lambda v, row: v + STEER):
            theirs = model(ids).logits
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (torch.zeros(3, 1, 6, 6), "not a [batch, seq] attention mask"),
        (torch.full((3, 6), -0.5), "values other than 0 and 1"),
    ],
)
def test_a_4d_or_additive_mask_is_a_located_error(mask: torch.Tensor, message: str) -> None:
    model, layer = _model("llama"), LlamaDecoderLayer
    ids = _batch("right")["input_ids"]
    edit = _steer(layer, "last", mask="positions_mask")

    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, positions_mask: torch.Tensor) -> Any:
            return self.model(input_ids=input_ids).logits

    root = Root()
    with torch.no_grad(), yamltrace.intervene(root, _spec(edit)), pytest.raises(SpecError) as caught:
        root(ids, mask)
    assert "intervention 'steer', module model.model.layers.1" in str(caught.value) and message in str(caught.value)


def _padding_warnings(run: Callable[[], Any]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [str(w.message) for w in caught if "padding" in str(w.message)]


def test_a_literal_position_on_padding_warns_once_per_block_and_handle() -> None:
    model, layer = _model("llama"), LlamaDecoderLayer
    literal = _spec(Intervention("steer", OutputRecorder(layer, index=0, layers=(1,), positions=(-1,)), "add", STEER))

    def block(side: str) -> None:
        with torch.no_grad(), yamltrace.intervene(model, literal):
            model(**_batch(side))
            model(**_batch(side))

    (message,) = _padding_warnings(lambda: block("right"))
    assert "these edits change padding tokens" in message and "intervention 'steer' (positions [-1])" in message
    assert "2 of 3 row(s)" in message and "`positions: last`" in message
    assert _padding_warnings(lambda: block("left")) == []  # [-1] is each row's real last token

    def persistent() -> None:
        with torch.no_grad(), yamltrace.apply_interventions(model, literal):
            for _ in range(3):
                model(**_batch("right"))

    assert len(_padding_warnings(persistent)) == 1

    def traced() -> None:
        with torch.no_grad(), yamltrace.trace(model, Spec(outputs={}, interventions=literal.interventions)):
            model(**_batch("right"))

    assert len(_padding_warnings(traced)) == 1


@pytest.mark.parametrize("given", ["compiled", "original"])
def test_under_torch_compile_last_follows_the_mask(given: str) -> None:
    model, layer = _model("llama"), LlamaDecoderLayer
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad():
        with _by_hand(model, layer, "last", lambda v, row: v + STEER):
            theirs = [model(**_batch(side)).logits for side in ("right", "left")]
        with yamltrace.intervene(compiled if given == "compiled" else model, _spec(_steer(layer, "last"))):
            ours = [compiled(**_batch(side)).logits for side in ("right", "left")]
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
