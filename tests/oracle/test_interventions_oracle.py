"""Interventions verified like captures: for each family of the spec library, each operation and each
selector, the forward under `yamltrace.intervene` is `torch.equal` to the same edit written by hand as
plain torch hooks (the modules found by transformers' matching rules, written out here); and steering
through a `builtin:` key edits exactly what that key captures.

The interventions select with the recorders of the family's shipped spec (`builtin:NAME`), narrowed
by `layers`, `positions` and `heads`, so what is verified is what a user writes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import pytest
import torch
import transformers as tf
from torch import nn

import yamltrace
from yamltrace import Spec, load_spec
from yamltrace.engine import Intervention, OutputRecorder

VOCAB, HIDDEN, HEADS = 99, 32, 4
DECODER = dict(
    vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=40, num_hidden_layers=2, num_attention_heads=HEADS,
    num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
)  # fmt: skip


def _config(cls: type, **kwargs: Any) -> Any:
    config = cls(**kwargs)
    config._attn_implementation = "eager"
    return config


FAMILIES: dict[str, Callable[[], nn.Module]] = {
    "llama": lambda: tf.LlamaModel(_config(tf.LlamaConfig, **DECODER)),
    "mistral": lambda: tf.MistralModel(_config(tf.MistralConfig, **DECODER)),
    "qwen2": lambda: tf.Qwen2Model(_config(tf.Qwen2Config, **DECODER)),
    "gemma2": lambda: tf.Gemma2Model(_config(tf.Gemma2Config, **DECODER, head_dim=HIDDEN // HEADS)),
    "gpt2": lambda: tf.GPT2Model(
        _config(tf.GPT2Config, vocab_size=VOCAB, n_embd=HIDDEN, n_layer=2, n_head=HEADS, n_positions=64)
    ),
    "bert": lambda: tf.BertModel(
        _config(
            tf.BertConfig,
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=HEADS,
            pad_token_id=0,
        )  # fmt: skip
    ),
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One edit: on the modules of spec key `key`, narrowed by `layers` / `positions` / `heads`."""

    key: str
    operation: str
    value: Any
    layers: tuple[int, ...] | None = None
    positions: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None


STEER = torch.linspace(-0.5, 0.5, HIDDEN)
CASES = {
    "add-positions": Case("hidden_states", "add", STEER, layers=(1,), positions=(2, 4)),
    "set-layer": Case("hidden_states", "set", 0.25, layers=(0,), positions=(0,)),
    "zero-attention": Case("attention_outputs", "zero", None, layers=(0,)),
    "scale-mlp": Case("mlp_outputs", "scale", 0.5, layers=(-1,)),
    "steer-resid-mid": Case("resid_mid", "add", STEER, layers=(1,)),
    "heads-input": Case("attention_heads", "set", 0.0, heads=(1, 3)),
    "clamp-input": Case("mlp_activations", "clamp", (None, 0.0)),
}
PAIRS = [
    (family, name) for family in FAMILIES for name, case in CASES.items() if case.key in load_spec(f"builtin:{family}").outputs
]


@functools.cache
def _model(family: str) -> nn.Module:
    torch.manual_seed(0)
    return FAMILIES[family]().eval()


def _ids() -> torch.Tensor:
    return torch.randint(3, VOCAB, (2, 7), generator=torch.Generator().manual_seed(1))


def _recorder(family: str, case: Case) -> OutputRecorder:
    (recorder,) = load_spec(f"builtin:{family}").outputs[case.key]
    return dataclasses.replace(recorder, layers=case.layers, positions=case.positions)


def _spec(family: str, case: Case, *, record: bool = False) -> Spec:
    edit = Intervention(case.key, _recorder(family, case), case.operation, case.value, heads=case.heads)  # type: ignore[arg-type]
    outputs = {case.key: load_spec(f"builtin:{family}").outputs[case.key]} if record else {}
    return Spec(outputs=outputs, interventions=[edit])


# The reference: transformers' matching rules and the edit itself, written out by hand.


def _matches(recorder: OutputRecorder, path: str, module: nn.Module) -> bool:
    dotted = "." + path
    hit = recorder.target_class is not None and isinstance(module, recorder.target_class)
    hit = hit or (recorder.class_name is not None and dotted.endswith(recorder.class_name))
    return hit and (recorder.layer_name is None or f".{recorder.layer_name.strip('.')}." in dotted + ".")


def _edited(t: torch.Tensor, case: Case) -> torch.Tensor:
    out = t.clone()
    view = out if case.heads is None else out.view(*out.shape[:-1], HEADS, -1)
    rows = slice(None) if case.positions is None else list(case.positions)
    region = view[:, rows]
    part = region if case.heads is None else region[..., list(case.heads), :]
    if case.operation == "zero":
        part = torch.zeros_like(part)
    elif case.operation == "add":
        part = part + case.value
    elif case.operation == "set":
        part = torch.full_like(part, case.value)
    elif case.operation == "scale":
        part = part * case.value
    else:
        part = part.clamp(*case.value)
    if case.heads is None:
        region = part
    else:
        region[..., list(case.heads), :] = part
    view[:, rows] = region
    return out


def _hook(recorder: OutputRecorder, case: Case) -> Callable[..., Any]:
    if recorder.input is not None:
        return lambda module, args: (_edited(args[0], case), *args[1:])

    def output(module: nn.Module, args: Any, out: Any) -> Any:
        if not isinstance(out, tuple):
            return _edited(out, case)
        return out[: recorder.index] + (_edited(out[recorder.index], case),) + out[recorder.index + 1 :]

    return output


def _by_hand(model: nn.Module, family: str, case: Case) -> torch.Tensor:
    recorder = _recorder(family, case)
    modules = [m for path, m in model.named_modules() if _matches(recorder, path, m)]
    kept = modules if case.layers is None else [modules[i] for i in case.layers]
    hook = _hook(recorder, case)
    register = "register_forward_pre_hook" if recorder.input is not None else "register_forward_hook"
    handles = [getattr(m, register)(hook) for m in kept]
    try:
        with torch.no_grad():
            return model(_ids()).last_hidden_state
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize(("family", "case"), PAIRS, ids=[f"{f}-{c}" for f, c in PAIRS])
def test_intervene_equals_the_same_edit_as_plain_hooks(family: str, case: str) -> None:
    model = _model(family)
    with torch.no_grad():
        plain = model(_ids()).last_hidden_state
        with yamltrace.intervene(model, _spec(family, CASES[case])):
            edited = model(_ids()).last_hidden_state
        after = model(_ids()).last_hidden_state
    expected = _by_hand(model, family, CASES[case])
    assert not torch.equal(expected, plain)  # the edit changes the forward
    assert torch.equal(edited, expected)
    assert torch.equal(after, plain)  # nothing remains after the block


STEERED_KEYS = [
    (family, key) for family in FAMILIES for key in ("resid_mid", "attention_outputs", "mlp_outputs")
    if key in load_spec(f"builtin:{family}").outputs
]  # fmt: skip


@pytest.mark.parametrize(("family", "key"), STEERED_KEYS, ids=[f"{f}-{k}" for f, k in STEERED_KEYS])
def test_steering_a_builtin_key_edits_exactly_what_it_captures(family: str, key: str) -> None:
    model, case = _model(family), Case(key, "add", STEER, layers=(1,))
    steered = _spec(family, case, record=True)
    with torch.no_grad():
        with yamltrace.trace(model, Spec(outputs=steered.outputs)) as before:
            model(_ids())
        with yamltrace.trace(model, steered) as after:
            out = model(_ids()).last_hidden_state
    assert len(after[key]) == len(before[key]) == 2
    assert torch.equal(after[key][0], before[key][0])  # upstream of the edit: unchanged
    assert torch.equal(after[key][1], before[key][1] + STEER)  # the captured value is the edited one
    assert torch.equal(out, _by_hand(model, family, case))  # and it is what the next module received


def test_a_transformers_checkpoint_with_interventions_loads_steered(tmp_path) -> None:
    from safetensors.torch import save_file

    model = _model("llama")
    model.save_pretrained(tmp_path)
    save_file({"v": STEER}, str(tmp_path / "steer.safetensors"))
    (tmp_path / "yamltrace.yaml").write_text(
        "yamltrace: 1\nimports: [transformers.models.llama.modeling_llama]\n"
        "interventions:\n  steer: {target: LlamaDecoderLayer, layers: [1], add: {tensor: 'steer.safetensors:v'}}\n",
        encoding="utf-8",
    )
    loaded = yamltrace.from_pretrained(tf.LlamaModel, tmp_path, attn_implementation="eager").eval()
    with torch.no_grad():
        steered = loaded(_ids()).last_hidden_state
        loaded.yamltrace_interventions.remove()
        plain = loaded(_ids()).last_hidden_state
    assert torch.equal(steered, _by_hand(model, "llama", Case("hidden_states", "add", STEER, layers=(1,))))
    with torch.no_grad():
        assert torch.equal(plain, model(_ids()).last_hidden_state)
