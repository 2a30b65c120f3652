"""Memory held by captures: references not copies, and `layers: [0, -1]` keeps 2 of 33 hidden states.

Measured two ways on the 32-layer LlamaModel: the bytes of the distinct storages the captures hold,
and, independently, which of the forward's own tensors are still alive after the block (weak
references taken by plain hooks during the same forward).
"""

from __future__ import annotations

import gc
import weakref

import torch
from harness import input_ids, llama_variants, record


def _held_bytes(captures) -> int:
    storages = {}
    for key in captures:
        for value in captures[key]:
            if isinstance(value, torch.Tensor):
                storage = value.untyped_storage()
                storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


def _capture(model, spec):
    """Trace one forward; also return weak references to the forward's own tensors and their pointers."""
    import yamltrace
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer

    watched: list[tuple[str, weakref.ref, int, int]] = []

    def watch(name, tensor):
        watched.append((name, weakref.ref(tensor), tensor.data_ptr(), tensor.untyped_storage().nbytes()))

    def on_output(module, args, output):
        if isinstance(module, LlamaDecoderLayer):
            if module is model.layers[0]:
                watch("initial", args[0])
            watch(f"hidden_states.{module.self_attn.layer_idx}", output[0] if isinstance(output, tuple) else output)
        elif isinstance(module, LlamaAttention):
            watch(f"attentions.{module.layer_idx}", output[1])
        elif module is model.norm:
            watch("norm", output)

    handles = [
        m.register_forward_hook(on_output)
        for m in model.modules()
        if isinstance(m, (LlamaDecoderLayer, LlamaAttention)) or m is model.norm
    ]
    try:
        with torch.inference_mode(), yamltrace.trace(model, spec) as captures:
            output = model(input_ids=input_ids())
    finally:
        for handle in handles:
            handle.remove()
    last = output.last_hidden_state
    del output
    gc.collect()
    return captures, watched, last


def test_layers_selection_memory() -> None:
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer
    from yamltrace import OutputRecorder

    model = llama_variants(32)["plain"]

    def spec(layers):
        return {
            "hidden_states": OutputRecorder(LlamaDecoderLayer, index=0, layers=layers),
            "attentions": OutputRecorder(LlamaAttention, index=1, layers=layers),
        }

    held, alive = {}, {}
    for name, layers in (("every layer", None), ("layers: [0, -1]", (0, -1))):
        captures, watched, last = _capture(model, spec(layers))
        by_ptr = {ptr: label for label, _, ptr, _ in watched}
        # References, not copies: every captured tensor is one the forward itself produced.
        for key in captures:
            for value in captures[key]:
                if value is not None:
                    assert value.data_ptr() in by_ptr or value.data_ptr() == last.data_ptr(), (name, key)
        assert captures["hidden_states"][-1].data_ptr() == last.data_ptr()
        del last
        gc.collect()
        held[name] = _held_bytes(captures)
        alive[name] = sum(nbytes for _, ref, _, nbytes in watched if ref() is not None)
        kept = {k: sum(v is not None for v in captures[k]) for k in captures}
        print(
            f"\n   {name}: kept {kept} of { ({k: len(captures[k]) for k in captures}) }; "
            f"held by captures {held[name]} B; forward tensors still alive {alive[name]} B"
        )
        del captures

    bench = "memory (32 layers)"
    ratio = held["layers: [0, -1]"] / held["every layer"]
    record(bench, "captures are references (data_ptr equal)", "yes")
    record(bench, "bytes held, every layer", f"{held['every layer']}")
    record(bench, "bytes held, layers: [0, -1]", f"{held['layers: [0, -1]']}")
    record(bench, "held [0, -1] / every layer", f"{ratio:.4f} (2/33 = {2 / 33:.4f})", "~2/32")
    record(bench, "alive after block, [0, -1] / every layer (weakrefs)", f"{alive['layers: [0, -1]'] / alive['every layer']:.4f}")
