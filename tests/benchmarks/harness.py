"""A small benchmark harness: interleaved variants in one process, medians and ratios.

Absolute times on a shared machine are noise; ratios of medians measured in the same process, with
the variants interleaved round by round, are not. Each round times a batch of calls of every variant
(in a shuffled order, so slow drift of the machine hits all variants alike); the figure of a variant
is the median over rounds of its per-call time, and the cost one variant adds to another is the
median of their same-round differences (`Timing.added`).

The models are tiny transformers `LlamaModel`s built in-process from a random config, and variants
of them whose `forward` carries yamltrace's decorators, transformers' decorators, or none.
"""

from __future__ import annotations

import gc
import inspect
import random
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

__all__ = [
    "ROUNDS",
    "Timing",
    "compare",
    "record",
    "RESULTS",
    "llama_config",
    "llama_variants",
    "input_ids",
]

# The clock: CPU time of this thread. With `torch.set_num_threads(1)` every operator runs in the
# calling thread, and CPU time does not count the time other processes hold the core, which on a
# shared two-core machine is most of the wall-clock noise.
CLOCK = time.thread_time

# At least 15 rounds (the rule); odd so the median is one measured round.
ROUNDS = 21
WARMUP_ROUNDS = 3
# Rounds between two garbage collections (outside the timed calls).
GC_EVERY = 50


@dataclass
class Timing:
    """Per-call times (seconds) of each variant, one value per round."""

    samples: dict[str, list[float]] = field(default_factory=dict)

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    def ratio(self, name: str, baseline: str) -> float:
        return self.median(name) / self.median(baseline)

    def paired_ratio(self, name: str, baseline: str) -> float:
        """Median over rounds of the ratio of the two variants' times in the same round.

        A robustness check on `ratio`: a round that the machine slowed down slows both alike.
        """
        return statistics.median(a / b for a, b in zip(self.samples[name], self.samples[baseline]))

    def added(self, name: str, baseline: str) -> float:
        """Median over rounds of `name`'s time minus `baseline`'s in the same round: the cost `name` adds.

        Less noisy than a difference of medians: both terms of each difference ran in the same round.
        """
        return statistics.median(a - b for a, b in zip(self.samples[name], self.samples[baseline]))

    def spread(self, name: str) -> float:
        """Interquartile range relative to the median: how noisy this variant was."""
        values = sorted(self.samples[name])
        q1, q3 = values[len(values) // 4], values[(3 * len(values)) // 4]
        return (q3 - q1) / self.median(name)

    def table(self, title: str) -> str:
        names = list(self.samples)
        base = names[0]
        lines = [f"\n== {title}  ({len(self.samples[base])} rounds, per-call medians)"]
        lines.append(f"   {'variant':<40} {'median':>12} {'IQR/med':>8} {'ratio':>8} {'paired':>8}")
        for name in names:
            lines.append(
                f"   {name:<40} {self.median(name) * 1e6:>9.1f} µs {self.spread(name):>8.1%}"
                f" {self.ratio(name, base):>8.4f} {self.paired_ratio(name, base):>8.4f}"
            )
        lines.append(f"   (ratio: of medians, vs {base}; paired: median of same-round ratios)")
        return "\n".join(lines)


def compare(
    variants: Mapping[str, Callable[[], object]],
    *,
    calls: int,
    rounds: int = ROUNDS,
    warmup: int = WARMUP_ROUNDS,
    per_call: int = 1,
    gc_every: int = GC_EVERY,
) -> Timing:
    """Time `variants` interleaved: each round runs `calls` calls of each, in a shuffled order.

    `per_call` divides each call's time (a call that runs a 100-step loop reports per-step time).
    The garbage collector is off while timing; it runs every `gc_every` rounds, followed by one
    untimed call of each variant (a collection leaves the caches cold for whichever runs next). The
    order is shuffled per round (fixed seed), so no variant always runs first or after the same one.
    """
    torch.set_num_threads(1)
    names = list(variants)
    timing = Timing({name: [] for name in names})
    rng = random.Random(0)  # the same shuffles in every run
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for round_index in range(warmup + rounds):
            if round_index % gc_every == 0:
                gc.collect()
                for name in names:
                    variants[name]()
            shuffled = names[:]
            rng.shuffle(shuffled)
            for name in shuffled:
                fn = variants[name]
                start = CLOCK()
                for _ in range(calls):
                    fn()
                elapsed = CLOCK() - start
                if round_index >= warmup:
                    timing.samples[name].append(elapsed / (calls * per_call))
    finally:
        if gc_was_enabled:
            gc.enable()
    return timing


# Figures recorded by the benchmarks, printed together at the end of the session by conftest.py:
# (benchmark, figure, value, target or "").
RESULTS: list[tuple[str, str, str, str]] = []


def record(benchmark: str, figure: str, value: str, target: str = "") -> None:
    RESULTS.append((benchmark, figure, value, target))
    print(f"   -> {figure}: {value}" + (f"   (target {target})" if target else ""))


# ---------------------------------------------------------------------------------------------
# Models


def llama_config(num_layers: int = 8):
    """The issue's tiny LlamaModel: hidden 64, 4 heads, intermediate 128, eager attention."""
    from transformers import LlamaConfig

    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=64,
        use_cache=False,
    )
    config._attn_implementation = "eager"
    return config


def input_ids(seq: int = 16, batch: int = 1) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, 128, (batch, seq), generator=generator)


def _llama_classes() -> dict[str, type]:
    """LlamaModel subclasses whose `forward` is transformers' undecorated one, re-decorated."""
    import yamltrace
    from transformers import LlamaModel
    from transformers.utils.generic import merge_with_config_defaults as hf_merge

    raw = inspect.unwrap(LlamaModel.forward)
    assert not hasattr(raw, "__wrapped__") and raw.__code__.co_filename.endswith("modeling_llama.py")

    class YamltraceLlama(LlamaModel):
        forward = yamltrace.merge_with_config_defaults(yamltrace.capture_outputs(raw))

    class PlainLlama(LlamaModel):
        """No capture decorator; yamltrace's merge_with_config_defaults only."""

        forward = yamltrace.merge_with_config_defaults(raw)

    class PlainLlamaHF(LlamaModel):
        """No capture decorator; transformers' merge_with_config_defaults only."""

        forward = hf_merge(raw)

    return {"yamltrace": YamltraceLlama, "plain": PlainLlama, "plain_hf": PlainLlamaHF, "transformers": LlamaModel}


def llama_variants(num_layers: int = 8) -> dict[str, torch.nn.Module]:
    """The same weights under four forwards: 'yamltrace', 'plain', 'plain_hf' and 'transformers'.

    'transformers' is transformers' own LlamaModel; its capture hooks are installed (by one forward
    with `output_hidden_states=True`), as they stay after the first capture in real use.
    """
    config = llama_config(num_layers)
    torch.manual_seed(0)
    classes = _llama_classes()
    reference = classes["transformers"](config).eval()
    state = reference.state_dict()
    models = {}
    for name, cls in classes.items():
        model = reference if name == "transformers" else cls(config).eval()
        # The same parameter tensors in every variant: no variant runs on differently placed memory.
        model.load_state_dict(state, assign=True)
        models[name] = model
    with torch.inference_mode():
        models["transformers"](input_ids=input_ids(), output_hidden_states=True)
    assert getattr(models["transformers"], "_output_capturing_hooks_installed", False)
    return models
