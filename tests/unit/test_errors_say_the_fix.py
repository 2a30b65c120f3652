"""Errors that say the fix, each asserted in parts (where + what + how to fix), and the cases that
used to fail but are now accepted: a base-model spec on a task model, a spec path for patch_model,
a device with an index in a patch condition."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ConfigPart, swapped
import torch
from torch import nn

from yamltrace import SpecError, load_spec, patch_model, trace, validate_spec
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyModel
from yamltrace.kernels import SdpaTinyAttention

TINY_SPEC = "yamltrace: 1\nmodel: TinyModel\nimports: [yamltrace.examples.tiny]\noutputs:\n  hidden_states: TinyDecoderLayer\n"


class TinyForLM(nn.Module):
    """A task model built on TinyModel the transformers way: the base model at `base_model_prefix`."""

    base_model_prefix = "model"

    def __init__(self) -> None:
        super().__init__()
        self.model = TinyModel(TinyConfig())
        self.head = nn.Linear(TinyConfig().hidden_size, 8)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.model(input_ids).last_hidden_state)


# model: a base-model spec on a task model


def test_a_base_model_spec_applies_to_a_task_model_built_on_it(input_ids: torch.Tensor) -> None:
    model = TinyForLM().eval()
    assert load_spec(TINY_SPEC, for_model=model).model == "TinyModel"
    with trace(model, TINY_SPEC) as captures:
        model(input_ids)
    assert len(captures["hidden_states"]) == TinyConfig().num_hidden_layers + 1


def test_a_spec_for_another_model_says_how_to_fix_it() -> None:
    with pytest.raises(SpecError) as raised:
        load_spec(TINY_SPEC, for_model=TinyForLM)  # the class alone does not say what it is built on
    assert str(raised.value) == (
        "<string>:2:8: $.model: this spec is for 'TinyModel', but it is applied to TinyForLM, which is neither "
        "that class, a subclass of it, nor a model built on it; write 'model: TinyForLM' if the spec fits it, "
        "or remove the model key."
    )


@pytest.mark.oracle
def test_a_llama_model_spec_loads_with_llama_for_causal_lm(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from helpers_transformers import tiny_llama_config

    spec = (
        "yamltrace: 1\nmodel: LlamaModel\nimports: [transformers.models.llama.modeling_llama]\n"
        "outputs:\n  hidden_states: LlamaDecoderLayer\n"
    )
    assert load_spec(spec, for_model=transformers.LlamaForCausalLM).model == "LlamaModel"
    with pytest.raises(
        SpecError,
        match=r"<string>:2:8: \$\.model: this spec is for 'LlamaModel', but it is applied to "
        r"Qwen2ForCausalLM, .*; write 'model: Qwen2ForCausalLM' if the spec fits it, or remove the model key\.",
    ):
        load_spec(spec, for_model=transformers.Qwen2ForCausalLM)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(tiny_llama_config()).eval()
    ids = torch.randint(0, 99, (1, 6), generator=torch.Generator().manual_seed(0))
    with trace(model, spec) as captures:
        model(ids)
    with trace(model) as own:  # the model's own capture map
        model(ids)
    assert len(captures["hidden_states"]) == len(own["hidden_states"]) == model.config.num_hidden_layers + 1
    assert all(torch.equal(a, b) for a, b in zip(captures["hidden_states"], own["hidden_states"]))


# patch_model takes a spec path, as trace does


@pytest.mark.parametrize("as_text", [False, True], ids=["PathLike", "str"])
def test_patch_model_accepts_a_spec_path(tmp_path: Path, tiny: TinyModel, as_text: bool) -> None:
    path = tmp_path / "swap.yaml"
    path.write_text("yamltrace: 1\noutputs: {}\npatches:\n  TinyAttention: yamltrace.kernels:SdpaTinyAttention\n")
    with patch_model(tiny, str(path) if as_text else path) as handle:
        assert {type(layer.self_attn) for layer in tiny.layers} == {SdpaTinyAttention}
        assert len(handle.replaced) == TinyConfig().num_hidden_layers
    assert {type(layer.self_attn) for layer in tiny.layers} == {TinyAttention}


def test_patch_model_with_a_bad_spec_file_reports_its_line(tmp_path: Path, tiny: TinyModel) -> None:
    path = tmp_path / "swap.yaml"
    path.write_text("yamltrace: 1\noutputs: {}\npatches:\n  TinyAttention: yamltrace.kernels:SdpaTinyAtention\n")
    with pytest.raises(SpecError) as raised:
        patch_model(tiny, path)
    message = str(raised.value)
    assert message.startswith(
        f"{path}:4:18: $.patches.TinyAttention: module 'yamltrace.kernels' has no attribute 'SdpaTinyAtention'"
    )
    assert "did you mean 'SdpaTinyAttention'" in message
    assert {type(layer.self_attn) for layer in tiny.layers} == {TinyAttention}


# layers: -1


def test_a_single_layer_written_as_a_number_suggests_a_list() -> None:
    with pytest.raises(SpecError) as raised:
        validate_spec("yamltrace: 1\noutputs:\n  mlp: {target: TinyMLP, layers: -1}\n")
    assert str(raised.value) == "<string>:3:34: $.outputs.mlp.layers: -1 is not of type 'array'; write [-1] for a list of one"


def test_a_single_import_written_as_text_suggests_a_list() -> None:
    with pytest.raises(SpecError) as raised:
        validate_spec("yamltrace: 1\nimports: yamltrace.examples.tiny\noutputs: {}\n")
    assert str(raised.value) == (
        "<string>:2:10: $.imports: 'yamltrace.examples.tiny' is not of type 'array'; write [yamltrace.examples.tiny] for a list of one"
    )


# Devices: one spelling for a recorder's `to` and a patch's `device`


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:0", "cuda:12", "mps"])
def test_to_and_patch_device_accept_the_same_devices(device: str) -> None:
    validate_spec(
        f"yamltrace: 1\noutputs:\n  h: {{target: X, to: '{device}'}}\npatches:\n  X: {{replace_with: Y, device: '{device}'}}\n"
    )


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:01", "cuda0"])
def test_to_and_patch_device_refuse_the_same_devices_with_the_same_fix(device: str) -> None:
    with pytest.raises(SpecError) as raised:
        validate_spec(
            f"yamltrace: 1\noutputs:\n  h: {{target: X, to: '{device}'}}\npatches:\n  X: {{replace_with: Y, device: '{device}'}}\n"
        )
    fix = f"{device!r} is not a device; write cpu, cuda, cuda:N or mps"
    assert [(i.json_path, i.message) for i in raised.value.issues] == [("$.outputs.h.to", fix), ("$.patches.X.device", fix)]


@pytest.mark.parametrize(
    ("wanted", "device", "matches"),
    [
        ("cuda", "cuda:1", True),
        ("cuda:1", "cuda:1", True),
        ("cuda:0", "cuda:1", False),
        ("cuda:0", "cpu", False),
        ("cpu", "cpu", True),
        ("mps", "mps:0", True),
    ],
)
def test_a_patch_device_with_an_index_matches_that_device_only(wanted: str, device: str, matches: bool) -> None:
    spec = load_spec(
        f"yamltrace: 1\noutputs: {{}}\npatches:\n  TinyAttention: {{replace_with: torch.nn:Identity, device: '{wanted}'}}\n"
    )
    assert swapped(spec, "TinyAttention", "TinyMLP", base=ConfigPart, device=device) == (
        {"TinyAttention": nn.Identity} if matches else {}
    )


def test_a_patch_for_cuda_0_is_left_out_on_cpu() -> None:
    spec = load_spec(
        "yamltrace: 1\noutputs: {}\npatches:\n"
        "  TinyAttention: {replace_with: yamltrace.kernels:SdpaTinyAttention, device: 'cuda:0'}\n"
        "  TinyMLP: {replace_with: yamltrace.examples.tiny:TinyMLP, device: cpu}\n"
    )
    assert list(swapped(spec, "TinyAttention", "TinyMLP", base=ConfigPart, device="cpu")) == ["TinyMLP"]
    assert list(swapped(spec, "TinyAttention", "TinyMLP", base=ConfigPart, device="cuda:0")) == ["TinyAttention"]
    assert list(swapped(spec, "TinyAttention", "TinyMLP", base=ConfigPart, device="cuda:1")) == []


def test_a_target_class_that_shares_its_name_with_the_models_is_told_apart() -> None:
    """A spec's `Linear` that resolved to another package's subclass matches none of the model's plain
    `torch.nn.Linear`: the hint names both classes with their modules, not `Linear` twice."""
    import yamltrace
    from yamltrace import OutputRecorder, SpecError

    Linear = type("Linear", (torch.nn.Linear,), {"__module__": "otherpackage.layers"})
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    with pytest.raises(SpecError) as seen:
        yamltrace.trace(model, {"x": OutputRecorder(Linear)}).__enter__()
    assert "closest classes: torch.nn.modules.linear.Linear (not otherpackage.layers.Linear)" in str(seen.value)
