"""Per-forward cost of capture on LlamaModel: off, on for one forward, on across a 100-step loop.

Every figure is a ratio of medians of variants interleaved in one process (see harness.py); the
baselines are the same LlamaModel with its capture decorator removed.
"""

from __future__ import annotations

import pytest
import torch
from harness import compare, input_ids, llama_variants, record

FLAGS = {"output_hidden_states": True, "output_attentions": True}
STEPS = 100


@pytest.fixture(scope="module", params=[8, 32], ids=lambda n: f"{n}layers")
def models(request):
    return request.param, llama_variants(request.param)


def _calls(layers: int) -> int:
    return 8 if layers == 8 else 2


# One call per round and many rounds: an added cost of ~100 µs on a 2.5 ms forward is resolved by
# the median of same-round differences over hundreds of rounds, not by a few long batches.
def _on_rounds(layers: int) -> int:
    return 601 if layers == 8 else 201


def test_off(models) -> None:
    """Capture not requested: the decorated forward vs the same forward undecorated."""
    layers, m = models
    ids = input_ids()
    with torch.inference_mode():
        timing = compare(
            {
                "plain (no capture decorator)": lambda: m["plain"](input_ids=ids),
                "plain again (A/A noise control)": lambda: m["plain"](input_ids=ids),
                "yamltrace, capture off": lambda: m["yamltrace"](input_ids=ids),
                "plain, transformers' merge decorator": lambda: m["plain_hf"](input_ids=ids),
                "transformers, capture off, hooks installed": lambda: m["transformers"](input_ids=ids),
                # Every instance runs twice per round, so none is kept warmer than another.
                "yamltrace, capture off (again)": lambda: m["yamltrace"](input_ids=ids),
                "plain, transformers' merge (again)": lambda: m["plain_hf"](input_ids=ids),
                "transformers, capture off (again)": lambda: m["transformers"](input_ids=ids),
            },
            calls=_calls(layers),
            rounds=31,
        )
    print(timing.table(f"off — LlamaModel {layers} layers"))
    names = list(timing.samples)
    bench = f"off ({layers} layers)"
    record(bench, "A/A control: plain / plain", f"{timing.ratio(names[1], names[0]):.4f}")
    record(
        bench,
        "yamltrace off / undecorated",
        f"{timing.ratio(names[2], names[0]):.4f} (paired {timing.paired_ratio(names[2], names[0]):.4f})",
        "<= 1.01",
    )
    record(
        bench,
        "transformers off (hooks installed) / undecorated",
        f"{timing.ratio(names[4], names[3]):.4f} (paired {timing.paired_ratio(names[4], names[3]):.4f})",
        "ref ~1.04",
    )


def test_off_decorator_alone() -> None:
    """The off path of `capture_outputs` on a forward that does nothing: its cost in µs per call."""
    import yamltrace
    from transformers import LlamaConfig
    from transformers.modeling_outputs import BaseModelOutputWithPast
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaDecoderLayer

    class Empty(torch.nn.Module):
        _can_record_outputs = {"hidden_states": LlamaDecoderLayer, "attentions": LlamaAttention}

        def __init__(self) -> None:
            super().__init__()
            self.config = LlamaConfig(
                num_hidden_layers=1, hidden_size=8, intermediate_size=8, num_attention_heads=1, num_key_value_heads=1
            )
            self.out = BaseModelOutputWithPast(last_hidden_state=None)

        def forward(self, input_ids=None, **kwargs):
            return self.out

    def raw(self, input_ids=None, **kwargs):
        return self.out

    plain, decorated = Empty(), Empty()
    decorated_forward = yamltrace.capture_outputs(raw)
    timing = compare(
        {
            "undecorated": lambda: raw(plain, input_ids=None),
            "capture_outputs, off": lambda: decorated_forward(decorated, input_ids=None),
        },
        calls=2000,
        rounds=21,
    )
    print(timing.table("off — capture_outputs wrapper around an empty forward"))
    cost = timing.median("capture_outputs, off") - timing.median("undecorated")
    record("off (decorator alone)", "capture_outputs off-path cost per call", f"{cost * 1e6:.2f} µs")


def test_on_one_forward(models) -> None:
    """One forward with output_hidden_states and output_attentions: cost added to the plain forward."""
    layers, m = models
    ids = input_ids()
    # Each model instance runs twice per round (its capture on and off, or plain with and without
    # flags), so none is kept warmer in the caches than another: with one instance running twice as
    # often as the rest, two identical plain forwards differed by ~50 µs.
    with torch.inference_mode():
        timing = compare(
            {
                "plain (no capture decorator)": lambda: m["plain"](input_ids=ids),
                "yamltrace, flags on": lambda: m["yamltrace"](input_ids=ids, **FLAGS),
                "plain, transformers' merge decorator": lambda: m["plain_hf"](input_ids=ids),
                "transformers, flags on": lambda: m["transformers"](input_ids=ids, **FLAGS),
                "plain, flags passed, no capture": lambda: m["plain"](input_ids=ids, **FLAGS),
                "yamltrace, capture off": lambda: m["yamltrace"](input_ids=ids),
                "plain (transformers' merge), flags passed": lambda: m["plain_hf"](input_ids=ids, **FLAGS),
                "transformers, capture off": lambda: m["transformers"](input_ids=ids),
            },
            calls=1,
            rounds=_on_rounds(layers),
        )
    print(timing.table(f"on, one forward — LlamaModel {layers} layers"))
    names = list(timing.samples)
    ours = timing.added(names[1], names[0])
    theirs = timing.added(names[3], names[2])
    bench = f"on, one forward ({layers} layers)"
    record(bench, "A/A control: plain (transformers' merge) - plain", f"{timing.added(names[2], names[0]) * 1e6:+.1f} µs")
    record(bench, "yamltrace added per forward", f"{ours * 1e6:.1f} µs ({timing.ratio(names[1], names[0]) - 1:+.1%})")
    record(bench, "transformers added per forward", f"{theirs * 1e6:.1f} µs ({timing.ratio(names[3], names[2]) - 1:+.1%})")
    record(bench, "of which common: flags passed down without capture", f"{timing.added(names[4], names[0]) * 1e6:.1f} µs")
    record(bench, "yamltrace added / transformers added", f"{ours / theirs:.2f}", "<= 0.7")


def _noop_like_trace(model: torch.nn.Module, recording: bool):
    """Hooks of the same kinds, on the same modules, as `trace(model)` installs, doing nothing (or appending)."""
    from yamltrace.engine import own_output_map, plan_hooks
    from yamltrace.engine import normalize_output_map

    plan = plan_hooks(model, normalize_output_map(own_output_map(model)), nested_maps=True)
    store: list = []

    def noop(module, args, kwargs, output):
        pass

    def append(module, args, kwargs, output):
        store.append(output)

    def root(*args):
        pass

    def install():
        store.clear()
        handles = [model.register_forward_pre_hook(root)]
        handles += [module.register_forward_hook(append if recording else noop, with_kwargs=True) for module, _, _ in plan]
        handles += [model.register_forward_hook(root), model.register_forward_hook(root, always_call=True)]
        return handles

    return install, len(plan) + 3


def test_on_many_forwards() -> None:
    """`trace(model)` around a 100-step loop vs the same loop under the same number of no-op hooks."""
    import yamltrace

    m = llama_variants(8)
    model, ids = m["plain"], input_ids()
    install_noop, count = _noop_like_trace(model, recording=False)
    install_append, _ = _noop_like_trace(model, recording=True)

    def loop(fn=model):
        for _ in range(STEPS):
            fn(input_ids=ids)

    def with_hooks(install):
        def run():
            handles = install()
            try:
                loop()
            finally:
                for handle in handles:
                    handle.remove()

        return run

    def traced():
        with yamltrace.trace(model) as captures:
            loop()
        assert len(captures.steps) == STEPS

    def transformers_on():
        for _ in range(STEPS):
            m["transformers"](input_ids=ids, **FLAGS)

    with torch.inference_mode():
        timing = compare(
            {
                "plain loop": loop,
                f"floor: {count} no-op hooks": with_hooks(install_noop),
                f"{count} hooks appending the output": with_hooks(install_append),
                "yamltrace.trace(model)": traced,
                "plain loop, transformers' merge": lambda: loop(m["plain_hf"]),
                "transformers, flags on each step": transformers_on,
            },
            calls=1,
            rounds=31,
            per_call=STEPS,
            gc_every=1,  # a round is seconds long and the traced variants leave garbage behind
        )
    print(timing.table(f"on, {STEPS} forwards — LlamaModel 8 layers (per forward)"))
    names = list(timing.samples)
    floor = timing.added(names[1], names[0])
    appending = timing.added(names[2], names[0])
    ours = timing.added(names[3], names[0])
    theirs = timing.added(names[5], names[4])
    bench = f"on, {STEPS} forwards (8 layers)"
    record(bench, f"floor: {count} no-op hooks, added per forward", f"{floor * 1e6:.1f} µs")
    record(bench, f"{count} appending hooks, added per forward", f"{appending * 1e6:.1f} µs")
    record(bench, "yamltrace trace, added per forward", f"{ours * 1e6:.1f} µs")
    record(bench, "transformers flags on, added per forward", f"{theirs * 1e6:.1f} µs")
    record(bench, "yamltrace added / no-op floor", f"{ours / floor:.2f}", "<= 1.25")
