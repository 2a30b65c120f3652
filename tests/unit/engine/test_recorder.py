"""OutputRecorder and `normalize_output_map`: default indices, validation and the module-matching rules."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

from yamltrace.engine import plan_hooks
from yamltrace.engine import CAPTURE_DTYPES, OutputRecorder, default_index, normalize_output_map, normalized_tasks


class Attention(nn.Module):
    pass


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Attention()
        self.crossattention = Attention()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.h = nn.ModuleList(Block() for _ in range(2))


def hooked_paths(root: nn.Module, output_map: dict) -> list[str]:
    return [path for _, path, _ in plan_hooks(root, normalize_output_map(output_map), nested_maps=False)]


@pytest.mark.parametrize(
    ("key", "index"), [("hidden_states", 0), ("vision_hidden_states", 0), ("attentions", 1), ("cross_attentions", 1)]
)
def test_default_index_is_0_for_hidden_state_keys_else_1(key, index) -> None:
    assert default_index(key) == index
    (task,) = normalize_output_map({key: Attention})
    assert task == (key, OutputRecorder(target_class=Attention, index=index))
    (task,) = normalize_output_map({key: ".attn"})
    assert task == (key, OutputRecorder(class_name=".attn", index=index))


def test_lists_flatten_in_order_and_recorders_pass_through() -> None:
    recorder = OutputRecorder(Attention, index=2, layer_name="attn")
    tasks = normalize_output_map({"attentions": [Block, recorder], "hidden_states": Block})
    assert tasks == (
        ("attentions", OutputRecorder(Block, index=1)),
        ("attentions", recorder),
        ("hidden_states", OutputRecorder(Block, index=0)),
    )
    assert normalize_output_map(None) == ()


def test_foreign_recorder_with_the_same_fields_is_converted() -> None:
    @dataclass
    class Foreign:
        target_class: type
        index: int = 0
        layer_name: str | None = None

    (task,) = normalize_output_map({"attentions": Foreign(Attention, 1, "attn")})
    assert task == ("attentions", OutputRecorder(Attention, index=1, layer_name="attn"))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({}, ValueError, "target_class or a class_name"),
        ({"target_class": "Attention"}, TypeError, "must be a class"),
        ({"target_class": Attention, "index": True}, TypeError, "index must be an int"),
        ({"target_class": Attention, "layers": [0, "1"]}, TypeError, "layers must be a sequence of ints"),
        ({"target_class": Attention, "detach": 1}, TypeError, "detach must be a bool"),
        ({"target_class": Attention, "to": 0}, TypeError, "to must be a device string"),
        ({"target_class": Attention, "to": "gpu"}, ValueError, "'gpu' is not a device"),
        (
            {"target_class": Attention, "dtype": "int8"},
            ValueError,
            "dtype must be one of float16, bfloat16, float32, float64, got 'int8'",
        ),
        ({"target_class": Attention, "dtype": torch.int8}, ValueError, "dtype must be one of .*got torch.int8"),
        ({"target_class": Attention, "dtype": "__class__"}, ValueError, "dtype must be one of"),
    ],
)
def test_invalid_recorder_fields_are_rejected(kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        OutputRecorder(**kwargs)


def test_layers_are_stored_as_a_tuple() -> None:
    assert OutputRecorder(Attention, layers=[0, -1]).layers == (0, -1)


def test_capture_options_default_to_keeping_the_reference() -> None:
    recorder = OutputRecorder(Attention)
    assert (recorder.detach, recorder.to, recorder.dtype) == (False, None, None)


@pytest.mark.parametrize(("name", "dtype"), list(CAPTURE_DTYPES.items()))
def test_dtype_names_resolve_to_the_torch_dtype(name, dtype) -> None:
    assert dtype.is_floating_point
    assert OutputRecorder(Attention, dtype=name).dtype is dtype
    assert OutputRecorder(Attention, dtype=name) == OutputRecorder(Attention, dtype=dtype)


def test_to_is_stored_as_the_device_text() -> None:
    assert OutputRecorder(Attention, to="cpu").to == "cpu"
    assert OutputRecorder(Attention, to=torch.device("cuda", 1)).to == "cuda:1"


def test_unknown_recorder_type_names_the_key() -> None:
    with pytest.raises(TypeError, match="Output 'attentions'.*got 3"):
        normalize_output_map({"attentions": 3})


def test_layer_name_matches_whole_path_components_only() -> None:
    assert hooked_paths(Net(), {"a": OutputRecorder(Attention, layer_name="attn")}) == [".h.0.attn", ".h.1.attn"]
    assert hooked_paths(Net(), {"a": OutputRecorder(Attention, layer_name=".crossattention")}) == [
        ".h.0.crossattention",
        ".h.1.crossattention",
    ]
    assert hooked_paths(Net(), {"a": OutputRecorder(Attention, layer_name="h.1.attn")}) == [".h.1.attn"]
    assert hooked_paths(Net(), {"a": OutputRecorder(Attention, layer_name="att")}) == []


def test_class_name_is_a_suffix_of_the_dotted_path() -> None:
    assert hooked_paths(Net(), {"a": ".h.0.attn"}) == [".h.0.attn"]
    assert hooked_paths(Net(), {"a": "attn"}) == [".h.0.attn", ".h.1.attn"]
    assert hooked_paths(Net(), {"a": "Attention"}) == []  # a class name is not a path suffix


def test_class_or_path_match_then_layer_name_filters() -> None:
    recorder = OutputRecorder(Block, class_name="crossattention", layer_name="1")
    assert hooked_paths(Net(), {"a": recorder}) == [".h.1.crossattention", ".h.1"]


def test_plan_lists_children_before_parents() -> None:
    assert hooked_paths(Net(), {"a": [Block, Attention]}) == [
        ".h.0.attn",
        ".h.0.crossattention",
        ".h.0",
        ".h.1.attn",
        ".h.1.crossattention",
        ".h.1",
    ]


def test_normalized_tasks_gives_the_same_tuple_for_equal_content_and_sees_edits_in_place() -> None:
    recorders = [Attention]
    output_map = {"hidden_states": Block, "attentions": recorders}
    first = normalized_tasks(output_map)
    assert first == normalize_output_map(output_map)
    assert normalized_tasks(dict(output_map)) is first
    recorders.append(OutputRecorder(Attention, index=2))
    edited = normalized_tasks(output_map)
    assert edited == normalize_output_map(output_map) and len(edited) == 3
    output_map["hidden_states"] = "layers.0"
    assert normalized_tasks(output_map)[0] == ("hidden_states", OutputRecorder(class_name="layers.0", index=0))
    assert normalized_tasks({}) == () and normalized_tasks(None) == ()


def test_normalized_tasks_of_a_bad_map_raises_like_normalize_output_map() -> None:
    for bad in ({"hidden_states": 3}, {"hidden_states": [{"not": "hashable"}]}):
        with pytest.raises(TypeError) as expected:
            normalize_output_map(bad)
        with pytest.raises(TypeError) as got:
            normalized_tasks(bad)
        assert str(got.value) == str(expected.value)


# A tuple of target classes hooks an instance of any of them (transformers' isinstance rule).


class Mlp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Mixed(nn.Module):
    """Layers of two classes, in turn, as a model with sliding and full attention layers has."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Mlp(), Block(), Mlp(), Block()])


def test_a_tuple_target_hooks_an_instance_of_any_of_its_classes() -> None:
    recorder = OutputRecorder(target_class=(Mlp, Block))
    assert recorder.target_classes == (Mlp, Block)
    assert hooked_paths(Mixed(), {"hidden_states": recorder}) == [f".layers.{i}" for i in range(4)]
    assert hooked_paths(Mixed(), {"hidden_states": OutputRecorder((Block,))}) == [".layers.1", ".layers.3"]


def test_a_list_target_is_stored_as_a_tuple_and_a_class_alone_stays_a_class() -> None:
    assert OutputRecorder(target_class=[Mlp, Block]) == OutputRecorder(target_class=(Mlp, Block))
    assert OutputRecorder(Mlp).target_class is Mlp and OutputRecorder(Mlp).target_classes == (Mlp,)
    assert OutputRecorder(class_name=".attn").target_classes == ()


@pytest.mark.parametrize("target", [(), (Mlp, "Block"), (Mlp, (Block,))])
def test_a_tuple_target_holds_classes_only(target) -> None:
    with pytest.raises(TypeError, match="a class or a non-empty tuple of classes"):
        OutputRecorder(target_class=target)


def test_a_foreign_recorder_with_a_tuple_target_is_converted() -> None:
    @dataclass
    class Foreign:
        target_class: tuple[type, ...]
        index: int = 0
        num_hidden_layers_key: str = "total_num_hidden_layers"

    (task,) = normalize_output_map({"hidden_states": Foreign((Mlp, Block))})
    assert task == ("hidden_states", OutputRecorder((Mlp, Block), num_hidden_layers_key="total_num_hidden_layers"))
