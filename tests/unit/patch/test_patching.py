"""apply_patches, patch_output_recorders and patch_model on the tiny demo model."""

from __future__ import annotations

import sys
import threading
import types

import pytest
from helpers import patch_spec
import torch
from torch import nn

import yamltrace.examples.tiny
from yamltrace.kernels import SdpaTinyAttention
from yamltrace.patch import clear_patch_mapping, register_patch_mapping
from yamltrace.errors import PatchError
from yamltrace.patch import apply_patches, patch_model, patch_output_recorders
from yamltrace.engine import CAPTURE_MAP_ATTRIBUTE, OutputRecorder
from yamltrace.examples.tiny import TinyAttention, TinyConfig, TinyDecoderLayer, TinyMLP, TinyModel
from yamltrace.tracing import trace


@pytest.fixture(autouse=True)
def tiny_module_unpatched():
    yield
    assert yamltrace.examples.tiny.TinyAttention is TinyAttention, "a test left yamltrace.examples.tiny patched"


class PlainAttention(nn.Module):
    """TinyAttention's computation in a class that is *not* a TinyAttention subclass."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(self, name, nn.Linear(config.hidden_size, config.hidden_size, bias=False))

    @classmethod
    def from_module(cls, original: TinyAttention) -> PlainAttention:
        new = cls.__new__(cls)
        nn.Module.__init__(new)
        new.num_heads, new.head_dim = original.num_heads, original.head_dim
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            setattr(new, name, getattr(original, name))
        return new

    _heads = TinyAttention._heads
    forward = TinyAttention.forward


class ReassignedAttention(TinyAttention):
    """A subclass that adds no state and has no from_module: patch_model reassigns the class."""

    def forward(self, hidden_states: torch.Tensor, **kwargs):
        return super().forward(hidden_states, **kwargs)


class StatefulAttention(TinyAttention):
    """A subclass with state of its own and no from_module: patch_model cannot convert it."""

    def __init__(self, config: TinyConfig) -> None:
        super().__init__(config)
        self.extra = nn.Linear(2, 2)


class LinearSubclass(nn.Linear):
    pass


def attention_classes(model: nn.Module) -> list[type]:
    return [type(layer.self_attn) for layer in model.layers]


def build(**patch_args) -> TinyModel:
    torch.manual_seed(0)
    with apply_patches(modules=[TinyModel], **patch_args):
        return TinyModel(TinyConfig()).eval()


# ----------------------------------------------------------------------------------------- apply_patches


def test_apply_patches_builds_with_the_replacement_then_restores():
    with apply_patches({"TinyAttention": SdpaTinyAttention}, modules=[TinyModel]) as replaced:
        assert yamltrace.examples.tiny.TinyAttention is SdpaTinyAttention
        model = TinyModel(TinyConfig())
    assert [(r.path, r.original, r.replacement) for r in replaced] == [
        ("yamltrace.examples.tiny.TinyAttention", TinyAttention, SdpaTinyAttention)
    ]
    assert attention_classes(model) == [SdpaTinyAttention] * 4
    assert yamltrace.examples.tiny.TinyAttention is TinyAttention
    assert attention_classes(TinyModel(TinyConfig())) == [TinyAttention] * 4


def test_apply_patches_reads_the_registry_by_default():
    register_patch_mapping({"TinyAttention": SdpaTinyAttention})
    assert attention_classes(build()) == [SdpaTinyAttention] * 4


def test_apply_patches_restores_after_an_exception():
    other_mlp = type("OtherMLP", (TinyMLP,), {})
    with pytest.raises(RuntimeError, match="construction failed"):
        with apply_patches({"TinyAttention": SdpaTinyAttention, "TinyMLP": other_mlp}, modules=[TinyModel]):
            assert yamltrace.examples.tiny.TinyAttention is SdpaTinyAttention
            assert yamltrace.examples.tiny.TinyMLP is other_mlp
            raise RuntimeError("construction failed")
    assert yamltrace.examples.tiny.TinyAttention is TinyAttention
    assert yamltrace.examples.tiny.TinyMLP is TinyMLP


def test_apply_patches_touches_only_the_named_modules(monkeypatch):
    # Another imported module holds TinyAttention too; it does not define the model being built.
    other = types.ModuleType("tiny_attention_importer")
    other.TinyAttention = TinyAttention
    monkeypatch.setitem(sys.modules, other.__name__, other)
    with apply_patches({"TinyAttention": SdpaTinyAttention}, modules=[TinyModel]):
        assert other.TinyAttention is TinyAttention
    with apply_patches({"TinyAttention": SdpaTinyAttention}, modules=["tiny_attention_importer"]):
        assert other.TinyAttention is SdpaTinyAttention
        assert yamltrace.examples.tiny.TinyAttention is TinyAttention
    assert other.TinyAttention is TinyAttention


def test_apply_patches_replaces_only_module_classes():
    class Anything(nn.Module):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__()

    with apply_patches({"^Tiny": Anything}, modules=[yamltrace.examples.tiny]) as replaced:
        assert yamltrace.examples.tiny.TinyConfig is not Anything
        assert yamltrace.examples.tiny.TinyMLP is Anything
    names = sorted(r.path.rsplit(".", 1)[1] for r in replaced)
    assert names == ["TinyAttention", "TinyDecoderLayer", "TinyMLP", "TinyModel"]


def test_apply_patches_rejects_unknown_module_arguments():
    with pytest.raises(ValueError, match="module 'not_imported_anywhere' is not imported"):
        with apply_patches({"TinyAttention": SdpaTinyAttention}, modules=["not_imported_anywhere"]):
            pass
    with pytest.raises(TypeError, match="takes modules, imported module names or nn.Module classes"):
        with apply_patches({"TinyAttention": SdpaTinyAttention}, modules=[42]):
            pass


def test_constructor_signatures_are_checked_before_anything_is_patched():
    class NeedsMore(nn.Module):
        def __init__(self, config, extra) -> None:
            super().__init__()

    class RenamedArgument(nn.Module):
        def __init__(self, cfg) -> None:  # positional calls work, `config=` calls would not
            super().__init__()

    with pytest.raises(PatchError) as info:
        with apply_patches(
            {"TinyMLP": type("OtherMLP", (TinyMLP,), {}), "TinyAttention": NeedsMore, "TinyDecoderLayer": RenamedArgument},
            modules=[TinyModel],
        ):
            pytest.fail("the block must not run")
    problems = info.value.problems
    assert len(problems) == 2
    assert (
        "NeedsMore(config, extra) cannot replace yamltrace.examples.tiny.TinyAttention(config: 'TinyConfig')"
        in problems[0].message
    )
    assert "missing a required argument: 'extra'" in problems[0].message
    assert "RenamedArgument(cfg) cannot replace yamltrace.examples.tiny.TinyDecoderLayer" in problems[1].message
    assert "called as (config=...)" in problems[1].message
    assert yamltrace.examples.tiny.TinyMLP is TinyMLP


def _init_wrapped_like_kernels(cls: type) -> object:
    """What the `kernels` library's `use_kernelized_func` (on transformers 5.25's attention classes) makes of
    a class's `__init__`: a bare `(self, *args, **kwargs)` pass-through without `functools.wraps`."""
    orig_init = cls.__init__

    def new_init(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        self.__dict__.setdefault("_kernel_funcs", {})

    return new_init


def test_a_constructor_wrapped_without_functools_wraps_is_checked_by_the_one_it_calls(monkeypatch):
    monkeypatch.setattr(TinyAttention, "__init__", _init_wrapped_like_kernels(TinyAttention))
    with apply_patches({"TinyAttention": PlainAttention}, modules=[TinyModel]):
        model = TinyModel(TinyConfig())
    assert attention_classes(model) == [PlainAttention] * 4

    class NeedsMore(nn.Module):
        def __init__(self, config, extra) -> None:
            super().__init__()

    with pytest.raises(PatchError) as info:
        with apply_patches({"TinyAttention": NeedsMore}, modules=[TinyModel]):
            pytest.fail("the block must not run")
    (problem,) = info.value.problems
    assert "NeedsMore(config, extra) cannot replace yamltrace.examples.tiny.TinyAttention(config: 'TinyConfig')" in (
        problem.message
    )
    assert yamltrace.examples.tiny.TinyAttention is TinyAttention


def test_a_wrapped_replacement_is_checked_by_the_constructor_it_calls(monkeypatch):
    monkeypatch.setattr(PlainAttention, "__init__", _init_wrapped_like_kernels(PlainAttention))
    with apply_patches({"TinyAttention": PlainAttention}, modules=[TinyModel]):
        model = TinyModel(TinyConfig())
    assert attention_classes(model) == [PlainAttention] * 4
    assert all(layer.self_attn._kernel_funcs == {} for layer in model.layers)  # the wrapper ran


def test_nested_blocks_restore_in_order():
    with apply_patches({"TinyAttention": SdpaTinyAttention}, modules=[TinyModel]):
        with apply_patches({"TinyAttention": ReassignedAttention}, modules=[TinyModel]):
            assert yamltrace.examples.tiny.TinyAttention is ReassignedAttention
        assert yamltrace.examples.tiny.TinyAttention is SdpaTinyAttention
    assert yamltrace.examples.tiny.TinyAttention is TinyAttention


def test_spec_entries_apply_on_their_device_only():
    spec = patch_spec(("TinyAttention", SdpaTinyAttention, "cuda"), ("TinyMLP", type("M", (TinyMLP,), {}), "cpu"))
    model = build(mapping=spec, device="cpu")
    assert attention_classes(model) == [TinyAttention] * 4
    assert all(type(layer.mlp).__name__ == "M" for layer in model.layers)
    assert attention_classes(build(mapping=spec, device="cuda")) == [SdpaTinyAttention] * 4


def test_two_threads_build_with_their_own_mappings():
    """Each builder pauses after its first attention until the other thread has entered its block.

    If blocks could overlap, the other thread's patch would land between the layers of this one.
    """
    entered = {"a": threading.Event(), "b": threading.Event()}
    barrier = threading.Barrier(2)
    models: dict[str, TinyModel] = {}
    errors: list[BaseException] = []

    def attention_class(name: str, other: str) -> type:
        paused = []

        def __init__(self, config):
            TinyAttention.__init__(self, config)
            if not paused:
                paused.append(entered[other].wait(timeout=0.3))

        return type(f"Attention_{name}", (TinyAttention,), {"__init__": __init__})

    classes = {"a": attention_class("a", "b"), "b": attention_class("b", "a")}

    def work(name: str) -> None:
        try:
            barrier.wait()
            with apply_patches({"TinyAttention": classes[name]}, modules=[TinyModel]):
                entered[name].set()
                models[name] = TinyModel(TinyConfig())
        except BaseException as error:  # surfaced in the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(name,)) for name in classes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert attention_classes(models["a"]) == [classes["a"]] * 4
    assert attention_classes(models["b"]) == [classes["b"]] * 4


# ------------------------------------------------------------------------------- patch_output_recorders


def test_patch_output_recorders_handles_every_recorder_form():
    mapping = {"TinyAttention": PlainAttention}
    output_map = {
        "attentions": OutputRecorder(target_class=TinyAttention, index=1, layer_name="self_attn"),
        "by_name": "TinyAttention",
        "by_class": TinyAttention,
        "listed": [TinyMLP, OutputRecorder(class_name="TinyAttention")],
        "untouched": TinyDecoderLayer,
    }
    model = nn.Module()
    setattr(model, CAPTURE_MAP_ATTRIBUTE, output_map)
    handle = patch_output_recorders(model, mapping)
    retargeted = getattr(model, CAPTURE_MAP_ATTRIBUTE)
    assert retargeted["attentions"] == OutputRecorder(target_class=PlainAttention, index=1, layer_name="self_attn")
    assert retargeted["by_name"] is PlainAttention
    assert retargeted["by_class"] is PlainAttention
    assert retargeted["listed"] == [TinyMLP, OutputRecorder(target_class=PlainAttention, class_name="TinyAttention")]
    assert retargeted["untouched"] is TinyDecoderLayer
    assert [(c.path, c.original) for c in handle.replaced] == [
        (f"{CAPTURE_MAP_ATTRIBUTE}['attentions']", TinyAttention),
        (f"{CAPTURE_MAP_ATTRIBUTE}['by_name']", "TinyAttention"),
        (f"{CAPTURE_MAP_ATTRIBUTE}['by_class']", TinyAttention),
        (f"{CAPTURE_MAP_ATTRIBUTE}['listed']", "TinyAttention"),
    ]
    assert output_map["attentions"].target_class is TinyAttention  # the input is not mutated


def test_hooks_fire_on_replacements_only_after_patch_output_recorders(tiny, input_ids):
    with trace(tiny) as expected:
        tiny(input_ids)
    model = build(mapping={"TinyAttention": PlainAttention})
    model.load_state_dict(tiny.state_dict())

    with trace(model) as unpatched:
        model(input_ids)
    assert unpatched["attentions"] == ()

    handle = patch_output_recorders(model, {"TinyAttention": PlainAttention})
    assert [r.path for r in handle.replaced] == ["_can_record_outputs['attentions']"]
    with trace(model) as captured:
        model(input_ids)
    assert len(captured["attentions"]) == 4
    for got, want in zip(captured["attentions"], expected["attentions"]):
        assert torch.equal(got, want)
    from_forward = model(input_ids, output_attentions=True).attentions
    assert len(from_forward) == 4 and all(torch.equal(a, b) for a, b in zip(from_forward, captured["attentions"]))

    handle.remove()
    handle.remove()
    assert "_can_record_outputs" not in vars(model)
    with trace(model) as after:
        model(input_ids)
    assert after["attentions"] == ()


def test_the_retargeting_does_not_leak_into_models_built_later(input_ids):
    class_map = dict(TinyModel._can_record_outputs)
    register_patch_mapping({"TinyAttention": PlainAttention})
    patched = build()
    patch_output_recorders(patched)
    clear_patch_mapping()

    fresh = TinyModel(TinyConfig()).eval()
    assert attention_classes(fresh) == [TinyAttention] * 4
    with trace(fresh) as captured:
        fresh(input_ids)
    assert len(captured["attentions"]) == 4
    assert TinyModel._can_record_outputs == class_map
    with trace(patched) as still:  # the patched instance keeps its own map
        patched(input_ids)
    assert len(still["attentions"]) == 4


def test_patch_output_recorders_without_matches_changes_nothing(tiny):
    handle = patch_output_recorders(tiny, {"Nothing": PlainAttention})
    assert handle.replaced == ()
    assert "_can_record_outputs" not in vars(tiny)


# ----------------------------------------------------------------------------------------- patch_model


def test_patch_model_swaps_in_sdpa_sharing_parameters(tiny, input_ids):
    expected = tiny(input_ids, output_hidden_states=True)
    originals = [layer.self_attn for layer in tiny.layers]
    pointers = {name: p.data_ptr() for name, p in tiny.named_parameters()}

    handle = patch_model(tiny, {"TinyAttention": SdpaTinyAttention})
    assert [(r.path, r.original, r.replacement, r.how) for r in handle.replaced] == [
        (f"layers.{i}.self_attn", TinyAttention, SdpaTinyAttention, "from_module") for i in range(4)
    ]
    assert attention_classes(tiny) == [SdpaTinyAttention] * 4
    assert {name: p.data_ptr() for name, p in tiny.named_parameters()} == pointers
    assert tiny.layers[0].self_attn.q_proj.weight is originals[0].q_proj.weight
    assert not tiny.layers[0].self_attn.training

    got = tiny(input_ids, output_hidden_states=True, output_attentions=True)
    torch.testing.assert_close(got.last_hidden_state, expected.last_hidden_state, atol=1e-5, rtol=0)
    assert len(got.hidden_states) == 5
    assert got.attentions == ()  # SDPA returns no weights: a None element is dropped

    with handle:
        pass
    handle.remove()
    assert [layer.self_attn for layer in tiny.layers] == originals
    assert "_can_record_outputs" not in vars(tiny)
    assert torch.equal(tiny(input_ids).last_hidden_state, expected.last_hidden_state)


def test_patch_model_retargets_recorders_so_trace_fires_on_replacements(tiny, input_ids):
    with trace(tiny) as expected:
        tiny(input_ids)
    with patch_model(tiny, {"TinyAttention": PlainAttention}):
        with trace(tiny) as captured:
            tiny(input_ids)
    assert len(captured["attentions"]) == 4
    assert all(torch.equal(a, b) for a, b in zip(captured["attentions"], expected["attentions"]))


def test_patch_model_reassigns_the_class_of_a_stateless_subclass(tiny, input_ids):
    expected = tiny(input_ids).last_hidden_state
    originals = [layer.self_attn for layer in tiny.layers]
    handle = patch_model(tiny, {"TinyAttention": ReassignedAttention})
    assert {r.how for r in handle.replaced} == {"class"}
    assert [layer.self_attn for layer in tiny.layers] == originals
    assert attention_classes(tiny) == [ReassignedAttention] * 4
    assert torch.equal(tiny(input_ids).last_hidden_state, expected)
    handle.remove()
    assert attention_classes(tiny) == [TinyAttention] * 4


def test_patch_model_replaces_nested_matches_deepest_first(tiny, input_ids):
    expected = tiny(input_ids).last_hidden_state
    handle = patch_model(tiny, {"TinyAttention": SdpaTinyAttention, "^Linear$": LinearSubclass})
    assert type(tiny.layers[0].self_attn) is SdpaTinyAttention
    assert type(tiny.layers[0].self_attn.q_proj) is LinearSubclass
    assert type(tiny.layers[0].mlp.up_proj) is LinearSubclass
    torch.testing.assert_close(tiny(input_ids).last_hidden_state, expected, atol=1e-5, rtol=0)
    handle.remove()
    assert type(tiny.layers[0].self_attn) is TinyAttention
    assert type(tiny.layers[0].self_attn.q_proj) is nn.Linear


def test_patch_model_keeps_dtype_and_training_mode(input_ids):
    torch.manual_seed(0)
    model = TinyModel(TinyConfig()).double().train()
    with patch_model(model, {"TinyAttention": SdpaTinyAttention}):
        attn = model.layers[0].self_attn
        assert attn.training and attn.q_proj.weight.dtype == torch.float64
        assert model(input_ids).last_hidden_state.dtype == torch.float64


def test_patch_model_fails_changing_nothing_on_unconvertible_modules(tiny):
    with pytest.raises(PatchError) as info:
        patch_model(tiny, {"TinyMLP": StatefulAttention, "TinyAttention": SdpaTinyAttention})
    assert info.value.problems[0].message.startswith("layers.0.mlp (yamltrace.examples.tiny.TinyMLP): cannot become ")
    assert "no from_module(original) classmethod" in info.value.problems[0].message
    assert len(info.value.problems) == 4
    with pytest.raises(PatchError, match="layers.0.self_attn .* is not a subclass of TinyAttention that adds no state"):
        patch_model(tiny, {"TinyAttention": StatefulAttention})
    assert attention_classes(tiny) == [TinyAttention] * 4
    assert "_can_record_outputs" not in vars(tiny)


def test_patch_model_fails_when_a_pattern_matches_nothing_unless_missing_ok(tiny):
    with pytest.raises(PatchError, match="'TinyAtention' matches no submodule of TinyModel; did you mean 'TinyAttention'"):
        patch_model(tiny, {"TinyAttention": SdpaTinyAttention, "TinyAtention": SdpaTinyAttention})
    with pytest.raises(PatchError, match="root module itself is never replaced"):
        patch_model(tiny, {"TinyModel": SdpaTinyAttention})
    assert attention_classes(tiny) == [TinyAttention] * 4
    handle = patch_model(tiny, {"TinyAttention": SdpaTinyAttention, "TinyAtention": SdpaTinyAttention}, missing_ok=True)
    assert len(handle.replaced) == 4


def test_patch_model_rolls_back_when_from_module_fails_midway(tiny):
    calls = []

    class Flaky(SdpaTinyAttention):
        @classmethod
        def from_module(cls, original):
            calls.append(original)
            if len(calls) == 3:
                raise RuntimeError("out of memory")
            return super().from_module(original)

    originals = [layer.self_attn for layer in tiny.layers]
    with pytest.raises(PatchError, match=r"^layers.2.self_attn: .*<locals>.Flaky.from_module failed: out of memory$"):
        patch_model(tiny, {"TinyAttention": Flaky})
    assert [layer.self_attn for layer in tiny.layers] == originals
    assert "_can_record_outputs" not in vars(tiny)


def test_patch_model_selects_spec_entries_by_the_model_device(tiny):
    spec = patch_spec(("TinyAttention", SdpaTinyAttention, "cuda"), ("TinyMLP", type("M", (TinyMLP,), {}), "cpu"))
    handle = patch_model(tiny, spec)
    assert {r.path.rsplit(".", 1)[1] for r in handle.replaced} == {"mlp"}
    handle.remove()
    handle = patch_model(tiny, spec, device="cuda")  # as if the model were on a GPU
    assert {r.path.rsplit(".", 1)[1] for r in handle.replaced} == {"self_attn"}
    handle.remove()


def test_patch_model_replaces_a_shared_module_everywhere_it_is_held():
    torch.manual_seed(0)
    model = TinyModel(TinyConfig(num_hidden_layers=2))
    model.layers[1].self_attn = model.layers[0].self_attn
    handle = patch_model(model, {"TinyAttention": SdpaTinyAttention})
    assert [r.path for r in handle.replaced] == ["layers.0.self_attn", "layers.1.self_attn"]
    assert model.layers[0].self_attn is model.layers[1].self_attn
    assert type(model.layers[1].self_attn) is SdpaTinyAttention


# ------------------------------------------------------------------------------------------- real specs

SPEC = """
yamltrace: 1
outputs:
  hidden_states: TinyDecoderLayer
patches:
  TinyAttention: yamltrace.kernels.SdpaTinyAttention
"""


def test_a_loaded_spec_drives_patch_model_and_apply_patches(tiny, input_ids):
    from yamltrace.spec import load_spec

    spec = load_spec(SPEC, for_model=TinyModel)
    expected = tiny(input_ids).last_hidden_state
    with patch_model(tiny, spec) as handle:
        assert {r.replacement for r in handle.replaced} == {SdpaTinyAttention}
        torch.testing.assert_close(tiny(input_ids).last_hidden_state, expected, atol=1e-5, rtol=0)
    assert attention_classes(build(mapping=spec)) == [SdpaTinyAttention] * 4


def test_a_spec_entry_for_another_device_is_not_applied(tiny):
    from yamltrace.spec import load_spec

    on_cuda = SPEC.replace(
        "yamltrace.kernels.SdpaTinyAttention", "{replace_with: yamltrace.kernels.SdpaTinyAttention, device: cuda}"
    )
    spec = load_spec(on_cuda, for_model=TinyModel)
    assert patch_model(tiny, spec).replaced == ()
    assert [r.path for r in patch_model(tiny, spec, device="cuda").replaced][:1] == ["layers.0.self_attn"]
