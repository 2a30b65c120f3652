"""Checkpoints that carry their spec, for yamltrace models: save, load, override, fail cleanly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import DATA
import torch

import yamltrace.examples.tiny
from yamltrace.errors import SpecError
from yamltrace.kernels import SdpaTinyAttention
from yamltrace.patch import get_patch_mapping
from yamltrace.patch import apply_patches
from yamltrace.checkpoint import SPEC_FILE, from_pretrained, save_pretrained
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyMLP, TinyModel
from yamltrace.tracing import trace

SDPA = "yamltrace.kernels:SdpaTinyAttention"


# The class's own map, written as a user would: a comment and flow style, kept as written.
TINY_SPEC = """\
yamltrace: 1
model: TinyModel   # the class this checkpoint is for
imports: [yamltrace.examples.tiny]
outputs: {hidden_states: TinyDecoderLayer, attentions: TinyAttention}
"""


@pytest.fixture
def checkpoint(tiny: TinyModel, tmp_path: Path) -> Path:
    save_pretrained(tiny, tmp_path / "ckpt", spec=TINY_SPEC)
    return tmp_path / "ckpt"


def _write_spec(directory: Path, text: str) -> None:
    (directory / SPEC_FILE).write_text(text, encoding="utf-8")


def test_save_writes_config_weights_and_the_spec_as_written(checkpoint: Path) -> None:
    assert sorted(p.name for p in checkpoint.iterdir()) == ["config.json", "model.safetensors", SPEC_FILE]
    assert (checkpoint / SPEC_FILE).read_text() == TINY_SPEC


def test_round_trip_gives_equal_outputs_and_attaches_the_spec(tiny, checkpoint, input_ids) -> None:
    loaded = TinyModel.from_pretrained(checkpoint).eval()
    assert torch.equal(loaded(input_ids).last_hidden_state, tiny(input_ids).last_hidden_state)
    assert loaded.yamltrace_spec.model == "TinyModel"
    assert set(loaded.yamltrace_spec.outputs) == {"hidden_states", "attentions"}
    for name, tensor in tiny.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


def test_loaded_spec_drives_the_decorator_and_trace(tiny, checkpoint, input_ids) -> None:
    _write_spec(
        checkpoint,
        "yamltrace: 1\nmodel: TinyModel\nimports: [yamltrace.examples.tiny]\n"
        "outputs:\n  hidden_states: TinyDecoderLayer\n  mlp_outputs: {target: TinyMLP, index: 0, layers: [0, -1]}\n",
    )
    loaded = TinyModel.from_pretrained(checkpoint).eval()
    out = loaded(input_ids, output_hidden_states=True, output_mlp_outputs=True)
    assert len(out.hidden_states) == 5
    assert [t is None for t in out["mlp_outputs"]] == [False, True, True, False]
    with trace(loaded) as captures:
        loaded(input_ids)
    assert set(captures) == {"hidden_states", "mlp_outputs"}
    assert torch.equal(captures["mlp_outputs"][-1], out["mlp_outputs"][-1])
    assert "mlp_outputs" not in TinyModel._can_record_outputs  # the class is untouched


def test_overrides_swap_a_kernel_and_add_a_key_without_editing_the_file(tiny, checkpoint, input_ids) -> None:
    shipped = (checkpoint / SPEC_FILE).read_text()
    loaded = from_pretrained(
        TinyModel, checkpoint, overrides={"patches": {"TinyAttention": SDPA}, "outputs": {"mlp": "TinyMLP"}}
    ).eval()
    assert (checkpoint / SPEC_FILE).read_text() == shipped
    assert all(type(layer.self_attn) is SdpaTinyAttention for layer in loaded.layers)
    assert yamltrace.examples.tiny.TinyAttention is TinyAttention
    torch.testing.assert_close(loaded(input_ids).last_hidden_state, tiny(input_ids).last_hidden_state, rtol=0, atol=1e-5)
    with pytest.warns(UserWarning, match="'attentions' recorded no tensor"):  # SDPA computes no weights
        with trace(loaded) as captures:
            loaded(input_ids)
    assert len(captures["hidden_states"]) == 5 and len(captures["mlp"]) == 4 and captures["attentions"] == ()
    # The shipped keys survive the overlay; the recorder now targets the replacement class.
    assert loaded._can_record_outputs["attentions"][0].target_class is SdpaTinyAttention
    assert loaded.yamltrace_spec.outputs["attentions"][0].target_class is TinyAttention


def test_spec_argument_replaces_the_checkpoint_spec(checkpoint) -> None:
    loaded = TinyModel.from_pretrained(checkpoint, spec={"yamltrace": 1, "outputs": {"mlp": "yamltrace.examples.tiny:TinyMLP"}})
    assert set(loaded.yamltrace_spec.outputs) == {"mlp"}


def test_spec_and_overrides_together_are_refused(checkpoint) -> None:
    with pytest.raises(ValueError, match="not both"):
        TinyModel.from_pretrained(checkpoint, spec={"yamltrace": 1, "outputs": {}}, overrides={"outputs": {}})


def test_spec_for_another_model_class_is_a_spec_error(checkpoint) -> None:
    _write_spec(
        checkpoint, "yamltrace: 1\nmodel: LlamaModel\noutputs:\n  hidden_states: yamltrace.examples.tiny:TinyDecoderLayer\n"
    )
    with pytest.raises(SpecError, match="LlamaModel"):
        TinyModel.from_pretrained(checkpoint)


def test_bad_spec_fails_before_weights_are_read_and_changes_nothing(checkpoint, monkeypatch) -> None:
    _write_spec(
        checkpoint,
        "yamltrace: 1\nimports: [yamltrace.examples.tiny]\noutputs:\n  hidden_states: NoSuchLayer\n"
        f"patches:\n  TinyAttention: {SDPA}\n",
    )
    # Weights that cannot be read: the spec's error comes first, so they are never opened.
    (checkpoint / "model.safetensors").write_bytes(b"not a safetensors file")
    registry, modules = get_patch_mapping(), set(sys.modules)
    with pytest.raises(SpecError, match="NoSuchLayer"):
        TinyModel.from_pretrained(checkpoint)
    assert get_patch_mapping() == registry
    assert set(sys.modules) == modules
    assert yamltrace.examples.tiny.TinyAttention is TinyAttention


def test_failed_weight_load_restores_patched_classes(checkpoint) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(str(checkpoint / "model.safetensors"))
    weights.pop("norm.weight")
    weights["extra.weight"] = torch.zeros(1)
    save_file(weights, str(checkpoint / "model.safetensors"))
    with pytest.raises(ValueError, match=r"missing keys \['norm.weight'\], unexpected keys \['extra.weight'\]"):
        from_pretrained(TinyModel, checkpoint, overrides={"patches": {"TinyAttention": SDPA}})
    assert yamltrace.examples.tiny.TinyAttention is TinyAttention


def test_torch_weights_are_read_with_weights_only(tiny, checkpoint, input_ids) -> None:
    (checkpoint / "model.safetensors").unlink()
    torch.save(tiny.state_dict(), checkpoint / "pytorch_model.bin")
    loaded = TinyModel.from_pretrained(checkpoint)
    assert torch.equal(loaded(input_ids).last_hidden_state, tiny(input_ids).last_hidden_state)


def test_missing_weights_file_is_reported(checkpoint) -> None:
    (checkpoint / "model.safetensors").unlink()
    with pytest.raises(
        FileNotFoundError,
        match=r"holds no weights: expected model.safetensors, model.safetensors.index.json, pytorch_model.bin "
        r"or pytorch_model.bin.index.json\.$",
    ):
        TinyModel.from_pretrained(checkpoint)


def test_two_checkpoints_with_different_specs_do_not_affect_each_other(tiny, tmp_path, input_ids) -> None:
    patched_dir, plain_dir = tmp_path / "patched", tmp_path / "plain"
    save_pretrained(
        tiny,
        patched_dir,
        spec=f"yamltrace: 1\nimports: [yamltrace.examples.tiny]\noutputs:\n  attentions: TinyAttention\npatches:\n  TinyAttention: {SDPA}\n",
    )
    save_pretrained(tiny, plain_dir)
    patched = TinyModel.from_pretrained(patched_dir).eval()
    plain = TinyModel.from_pretrained(plain_dir).eval()
    assert all(type(layer.self_attn) is SdpaTinyAttention for layer in patched.layers)
    assert all(type(layer.self_attn) is TinyAttention for layer in plain.layers)
    assert TinyModel._can_record_outputs == {
        "hidden_states": yamltrace.examples.tiny.TinyDecoderLayer,
        "attentions": TinyAttention,
    }
    with trace(plain) as captures:
        plain(input_ids)
    assert len(captures["attentions"]) == 4 and all(a is not None for a in captures["attentions"])
    fresh = TinyModel(TinyConfig())
    assert type(fresh.layers[0].self_attn) is TinyAttention


def test_device_and_dtype_are_applied(checkpoint) -> None:
    loaded = TinyModel.from_pretrained(checkpoint, device="cpu", dtype=torch.float64)
    assert all(p.dtype == torch.float64 for p in loaded.parameters())


def test_saving_with_an_explicit_spec_validates_it(tiny, tmp_path) -> None:
    with pytest.raises(SpecError):
        save_pretrained(tiny, tmp_path / "bad", spec="yamltrace: 1\noutputs:\n  hidden_states: {idx: 0}\n")


class StandaloneMLP(torch.nn.Module):
    """A replacement that does not subclass TinyMLP (only retargeted recorders can find it), with its
    parameter names (a load holds a replacement to them)."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        size, inner = config.hidden_size, config.intermediate_size
        self.gate_proj, self.up_proj = torch.nn.Linear(size, inner, bias=False), torch.nn.Linear(size, inner, bias=False)
        self.down_proj = torch.nn.Linear(inner, size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(torch.nn.functional.gelu(self.gate_proj(x)) * self.up_proj(x))


def test_trace_of_a_loaded_model_follows_recorders_to_replacements(tmp_path, input_ids) -> None:
    spec = {
        "yamltrace": 1,
        "outputs": {"mlp": {"target": "yamltrace.examples.tiny:TinyMLP", "index": 0}},
        "patches": {"TinyMLP": f"{__name__}:StandaloneMLP"},
    }
    with apply_patches({"TinyMLP": StandaloneMLP}, modules=TinyModel):
        source = TinyModel(TinyConfig())
    save_pretrained(source, tmp_path / "ckpt", spec=spec)
    loaded = from_pretrained(TinyModel, tmp_path / "ckpt", trust_imports=True).eval()
    assert all(type(layer.mlp) is StandaloneMLP for layer in loaded.layers)
    with trace(loaded) as captures:
        loaded(input_ids)
    assert len(captures["mlp"]) == 4
    own = loaded(input_ids, output_mlp=True)["mlp"]
    assert len(own) == 4 and all(torch.equal(a, b) for a, b in zip(captures["mlp"], own))
    assert loaded.yamltrace_spec.outputs["mlp"][0].target_class is TinyMLP


PLUGINS = DATA / "plugins"


@pytest.fixture
def plugin_path(monkeypatch: pytest.MonkeyPatch):
    """tests/data/plugins on sys.path; its modules are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(PLUGINS))
    yield
    for name in [m for m in sys.modules if m == "ytplugins" or m.startswith("ytplugins.")]:
        del sys.modules[name]


@pytest.mark.parametrize("weights_ok", [True, False], ids=["load succeeds", "weights fail"])
def test_modules_the_spec_imported_are_forgotten_only_when_the_load_fails(checkpoint, plugin_path, weights_ok) -> None:
    from safetensors.torch import load_file, save_file

    _write_spec(checkpoint, "yamltrace: 1\noutputs:\n  probe: ytplugins.side_effect:SideEffectLayer\n")
    if not weights_ok:
        weights = load_file(str(checkpoint / "model.safetensors"))
        weights.pop("norm.weight")
        save_file(weights, str(checkpoint / "model.safetensors"))
    assert "ytplugins.side_effect" not in sys.modules
    if weights_ok:
        TinyModel.from_pretrained(checkpoint, trust_imports=True)
        assert "ytplugins.side_effect" in sys.modules
    else:
        with pytest.raises(ValueError, match="missing keys"):
            TinyModel.from_pretrained(checkpoint, trust_imports=True)
        assert not [m for m in sys.modules if m.startswith("ytplugins")]
