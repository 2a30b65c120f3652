"""`Captures.split_heads` on transformers models: each captured module splits by its own head count (query
heads under grouped-query attention, each tower of a composite by its own), head h being head h's output."""

from __future__ import annotations

import torch
import transformers
from helpers_transformers import tiny_llama_config
from torch import nn

from yamltrace.engine import OutputRecorder
from yamltrace.tracing import trace


def test_llama_attention_heads_split_into_query_heads() -> None:
    torch.manual_seed(0)
    model = transformers.LlamaModel(tiny_llama_config()).eval()  # 4 query heads, 2 key/value heads of 8
    values: list[torch.Tensor] = []
    handle = model.layers[0].self_attn.v_proj.register_forward_hook(lambda m, a, out: values.append(out))
    with torch.no_grad(), trace(model, "builtin:llama", outputs=["attention_heads", "attentions"]) as cap:
        model(torch.randint(0, 99, (2, 6), generator=torch.Generator().manual_seed(1)))
    handle.remove()
    split = cap.split_heads("attention_heads")
    assert [tuple(s.shape) for s in split] == [(2, 6, 4, 8)] * 2
    # Head h's output: its attention weights over the values of its key/value head.
    groups = model.config.num_attention_heads // model.config.num_key_value_heads
    value = values[0].unflatten(-1, (model.config.num_key_value_heads, 8)).transpose(1, 2)
    for head in range(4):
        torch.testing.assert_close(split[0][:, :, head], cap["attentions"][0][:, head] @ value[:, head // groups])


def test_each_tower_of_a_composite_splits_by_its_own_head_count() -> None:
    text = dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_attention_heads=4, num_hidden_layers=1)
    vision = dict(hidden_size=48, intermediate_size=37, num_attention_heads=3, num_hidden_layers=1, image_size=30, patch_size=15)
    model = transformers.CLIPModel(transformers.CLIPConfig(text_config=text, vision_config=vision)).eval()
    spec = {"attention_heads": OutputRecorder(nn.Linear, layer_name="self_attn.out_proj", input=0)}
    with torch.no_grad(), trace(model, spec) as cap:
        model(input_ids=torch.randint(0, 99, (1, 5)), pixel_values=torch.randn(1, 3, 30, 30))
    shapes = {
        path.split(".")[0]: tuple(s.shape) for path, s in zip(cap.paths("attention_heads"), cap.split_heads("attention_heads"))
    }
    assert shapes == {"text_model": (1, 5, 4, 8), "vision_model": (1, 5, 3, 16)}


def test_gpt2_attention_heads_split_by_its_attention_modules_heads() -> None:
    config = transformers.GPT2Config(vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=16)
    model = transformers.GPT2Model(config).eval()
    with torch.no_grad(), trace(model, "builtin:gpt2", outputs="attention_heads") as cap:
        model(torch.randint(0, 99, (1, 5)))
    assert [tuple(s.shape) for s in cap.split_heads("attention_heads")] == [(1, 5, 4, 8)] * 2
