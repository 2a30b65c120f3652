"""builtin:timm_vit, builtin:torchvision_resnet and builtin:diffusers_unet2d on tiny random models.

Each key's captures are `torch.equal` to what plain torch forward hooks (no yamltrace) record on the
modules the spec's header describes, listed here by path from the model's structure; the residual
identities of docs/vocabulary.md hold where the header claims them; every recorder not marked
optional matches a module; a spec applied to a model of another library is refused (strict).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import vision_models as vm
from torch import nn

import yamltrace
import yamltrace.specs
from yamltrace import SpecError

VERIFIED_HERE = sorted(n for n in yamltrace.specs.list() if "(tests/vision/test_vision_specs.py)" in yamltrace.specs.header(n))


def test_the_vision_specs_are_verified_here() -> None:
    assert VERIFIED_HERE == ["diffusers_unet2d", "timm_vit", "torchvision_resnet"]


Where = tuple[str, str]  # (module path, "in" for its first input or "out" for its output / output[0])


def hooked(model: nn.Module, where: dict[str, list[Where]], call: Callable[[], Any]) -> dict[str, list[torch.Tensor]]:
    """What plain forward hooks record at `where` during `call()`, in call order per key."""
    found: dict[str, list[tuple[int, torch.Tensor]]] = {key: [] for key in where}
    order = iter(range(10**6))
    handles = []
    for key, places in where.items():
        for path, side in places:

            def hook(module: nn.Module, args: tuple[Any, ...], output: Any, key: str = key, side: str = side) -> None:
                value = args[0] if side == "in" else (output[0] if isinstance(output, tuple) else output)
                found[key].append((next(order), value))

            handles.append(model.get_submodule(path).register_forward_hook(hook))
    try:
        with torch.no_grad():
            call()
    finally:
        for handle in handles:
            handle.remove()
    return {key: [value for _, value in sorted(values, key=lambda item: item[0])] for key, values in found.items()}


def assert_equal(captures: Any, expected: dict[str, list[torch.Tensor]]) -> None:
    assert sorted(captures) == sorted(expected)
    for key, values in expected.items():
        got = captures[key]
        assert len(got) == len(values), (key, len(got), len(values))
        for i, (a, b) in enumerate(zip(got, values)):
            assert torch.equal(a, b), f"{key}[{i}]"


def traced(model: nn.Module, name: str, call: Callable[[], Any]) -> Any:
    with torch.no_grad(), yamltrace.trace(model, f"builtin:{name}") as captures:
        call()
    return captures


def vit_places(model: Any) -> dict[str, list[Where]]:
    blocks = [f"blocks.{i}" for i in range(len(model.blocks))]
    return {
        "hidden_states": [("blocks.0", "in"), *((b, "out") for b in blocks)],
        "attentions": [(f"{b}.attn.attn_drop", "out") for b in blocks],
        "embeddings": [("patch_embed", "out")],
        "resid_mid": [(f"{b}.norm2", "in") for b in blocks],
        "attention_outputs": [(f"{b}.attn", "out") for b in blocks],
        "mlp_outputs": [(f"{b}.mlp", "out") for b in blocks],
        "mlp_activations": [(f"{b}.mlp.fc2", "in") for b in blocks],
        "attention_heads": [(f"{b}.attn.proj", "in") for b in blocks],
        "final_norm": [("norm", "out")],
    }


def test_timm_vit_equals_plain_hooks_and_needs_its_patch() -> None:
    model = vm.vit()
    pixels = vm.vit_inputs()
    with pytest.raises(SpecError, match=r"patch_model\(model, spec\)"):
        traced(model, "timm_vit", lambda: model(*pixels))  # fused attention: the spec's patch applies first
    with torch.no_grad():
        fused = model(*pixels)
    with yamltrace.patch_model(model, "builtin:timm_vit") as handle:
        assert {(r.how, r.replacement.__name__) for r in handle.replaced} == {("from_module", "TimmEagerAttention")}
        assert len(handle.replaced) == len(model.blocks)
        with torch.no_grad():
            torch.testing.assert_close(model(*pixels), fused, rtol=1e-5, atol=1e-5)  # eager == fused
        captures = traced(model, "timm_vit", lambda: model(*pixels))
        assert_equal(captures, hooked(model, vit_places(model), lambda: model(*pixels)))
    h, attn, mid, mlp = (captures[k] for k in ("hidden_states", "attention_outputs", "resid_mid", "mlp_outputs"))
    assert len(h) == len(model.blocks) + 1  # the embeddings first, then each block (transformers' rule)
    for i in range(len(model.blocks)):
        torch.testing.assert_close(mid[i], h[i] + attn[i])
        torch.testing.assert_close(h[i + 1], mid[i] + mlp[i])
    assert captures["attentions"][0].shape == (2, 3, 17, 17)
    torch.testing.assert_close(captures["attentions"][0].sum(-1), torch.ones(2, 3, 17))  # probabilities


@pytest.mark.parametrize("deep", [False, True], ids=["resnet18", "resnet50"])
def test_torchvision_resnet_equals_plain_hooks(deep: bool) -> None:
    model = vm.resnet(deep)
    pixels = vm.resnet_inputs()
    captures = traced(model, "torchvision_resnet", lambda: model(*pixels))
    stages = [f"layer{i}" for i in range(1, 5)]
    blocks = [f"{s}.{j}" for s in stages for j in range(len(model.get_submodule(s)))]
    places = {"hidden_states": [("layer1", "in"), *((s, "out") for s in stages)], "block_outputs": [(b, "out") for b in blocks]}
    assert_equal(captures, hooked(model, places, lambda: model(*pixels)))
    assert len(captures["hidden_states"]) == 5 and len(captures["block_outputs"]) == (16 if deep else 8)
    assert captures["hidden_states"][4].shape == (2, 2048 if deep else 512, 2, 2)


def unet_places(model: Any) -> dict[str, list[Where]]:
    paths = [p for p, m in model.named_modules() if type(m).__name__ == "DiffusersEagerAttention"]
    return {
        "down_block_outputs": [(f"down_blocks.{i}", "out") for i in range(len(model.down_blocks))],
        "mid_block_outputs": [("mid_block", "out")],
        "up_block_outputs": [(f"up_blocks.{i}", "out") for i in range(len(model.up_blocks))],
        "attention_outputs": [(p, "out") for p in paths if p.endswith("attn1")],
        "cross_attention_outputs": [(p, "out") for p in paths if p.endswith("attn2")],
        "attentions": [(f"{p}.attn_probs", "out") for p in paths if p.endswith("attn1")],
        "cross_attentions": [(f"{p}.attn_probs", "out") for p in paths if p.endswith("attn2")],
    }


def test_diffusers_unet2d_equals_plain_hooks() -> None:
    model = vm.unet()
    inputs = vm.unet_inputs()
    with torch.no_grad():
        original = model(**inputs).sample
    with yamltrace.patch_model(model, "builtin:diffusers_unet2d"):
        captures = traced(model, "diffusers_unet2d", lambda: model(**inputs))
        places = unet_places(model)
        assert len(places["cross_attentions"]) == 4  # down 1, mid 1, up 2
        assert_equal(captures, hooked(model, places, lambda: model(**inputs)))
        with torch.no_grad():
            torch.testing.assert_close(model(**inputs).sample, original, rtol=1e-5, atol=1e-5)
    probabilities = captures["cross_attentions"]
    assert [tuple(p.shape) for p in probabilities] == [(2, 4, 64, 5), (2, 4, 16, 5), (2, 4, 64, 5), (2, 4, 64, 5)]
    torch.testing.assert_close(probabilities[0].sum(-1), torch.ones(2, 4, 64))
    assert captures["attentions"][0].shape == (2, 4, 64, 64)
    assert captures["mid_block_outputs"][0].shape == (2, 16, 4, 4)


@pytest.mark.parametrize(
    ("name", "build"),
    [("timm_vit", vm.resnet), ("torchvision_resnet", vm.vit), ("diffusers_unet2d", vm.vit)],
    ids=["timm_vit-on-resnet", "torchvision_resnet-on-vit", "diffusers_unet2d-on-vit"],
)
def test_a_spec_on_another_library_s_model_is_refused(name: str, build: Callable[[], nn.Module]) -> None:
    """Strict: recorders that are not optional must match a module of the model."""
    model = build()
    with pytest.raises(SpecError, match=r"matches no module|would become"):
        with yamltrace.trace(model, f"builtin:{name}"):
            pass
