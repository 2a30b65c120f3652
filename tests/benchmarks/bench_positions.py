"""Token positions: retained memory drops in proportion, and what selecting costs per forward.

On the 32-layer tiny LlamaModel (one sequence of 64 tokens): the bytes of the distinct storages the
captures hold, for every position, the last one (`positions: [-1]`) and the last eight (`"-8:"`),
and for comparison what a plain slice (a view, no copy) would have kept alive. Then the time of a
traced forward with each, against the same forward untraced: the capture's own cost is the
difference between a traced and an untraced forward, and selecting positions adds to it.
"""

from __future__ import annotations

import gc

import torch
from harness import compare, input_ids, llama_variants, record

SEQ = 64


def _held_bytes(values) -> int:
    storages = {}
    for value in values:
        if isinstance(value, torch.Tensor):
            storages[value.untyped_storage().data_ptr()] = value.untyped_storage().nbytes()
    return sum(storages.values())


def _spec(positions):
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer
    from yamltrace import OutputRecorder

    return {"hidden_states": OutputRecorder(LlamaDecoderLayer, index=0, positions=positions)}


def test_positions_memory_and_time() -> None:
    import yamltrace

    model = llama_variants(32)["plain"]
    ids = input_ids(seq=SEQ)
    bench = "positions (32 layers)"

    held = {}
    for name, positions in (("every position", None), ("positions: [-1]", [-1]), ("positions: '-8:'", "-8:")):
        with torch.inference_mode(), yamltrace.trace(model, _spec(positions)) as captures:
            model(input_ids=ids)
        gc.collect()
        held[name] = _held_bytes(captures["hidden_states"])
        assert len(captures["hidden_states"]) == 33
        del captures
    # What a view would keep: the last position of each full capture, not copied.
    with torch.inference_mode(), yamltrace.trace(model, _spec(None)) as captures:
        model(input_ids=ids)
    views = [value[:, -1:] for value in captures["hidden_states"]]
    held["a view [:, -1:] (not copied)"] = _held_bytes(views)
    del captures, views
    gc.collect()

    full = held["every position"]
    for name, nbytes in held.items():
        record(bench, f"bytes held, {name}", f"{nbytes} ({nbytes / full:.4f} of full)")
    record(bench, "held [-1] / every position", f"{held['positions: [-1]'] / full:.4f} (1/{SEQ} = {1 / SEQ:.4f})", f"~1/{SEQ}")
    record(
        bench, "held '-8:' / every position", f"{held[positions_name('-8:')] / full:.4f} (8/{SEQ} = {8 / SEQ:.4f})", f"~8/{SEQ}"
    )

    specs = {name: _spec(p) for name, p in (("full", None), ("last", [-1]), ("last8", "-8:"))}

    def traced(spec):
        def run() -> None:
            with torch.inference_mode(), yamltrace.trace(model, spec):
                model(input_ids=ids)

        return run

    def untraced() -> None:
        with torch.inference_mode():
            model(input_ids=ids)

    timing = compare({"untraced": untraced, **{name: traced(spec) for name, spec in specs.items()}}, calls=5)
    print(timing.table("traced forward, 32 layers, seq 64"))
    own = timing.added("full", "untraced")
    record(bench, "capture's own cost (full - untraced), µs", f"{own * 1e6:.1f}")
    for name in ("last", "last8"):
        added = timing.added(name, "full")
        record(bench, f"{name}: added to the capture's own cost", f"{added * 1e6:+.1f} µs ({added / own:+.1%})", "< 5%")
        record(bench, f"{name}: added to the traced forward", f"{added / timing.median('full'):+.2%}")


def positions_name(text: str) -> str:
    return f"positions: '{text}'"
