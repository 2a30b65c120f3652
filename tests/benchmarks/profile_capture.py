"""Where capture time goes: a cost breakdown of the engine's steps, then a pyinstrument profile.

Run: `.venv/bin/python tests/benchmarks/profile_capture.py [--pyinstrument]` (pyinstrument is not a
project dependency: `pip install pyinstrument` first). Not collected by pytest.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

import harness  # noqa: E402

FLAGS = {"output_hidden_states": True, "output_attentions": True}


def per_call(fn, calls: int = 200, rounds: int = 15) -> float:
    """Median per-call CPU time of `fn` in µs."""
    samples = []
    for _ in range(rounds + 2):
        start = harness.CLOCK()
        for _ in range(calls):
            fn()
        samples.append((harness.CLOCK() - start) / calls)
    return statistics.median(samples[2:]) * 1e6


def breakdown(layers: int = 8) -> None:
    import yamltrace
    from yamltrace.capture import _is_active as decorator_is_active
    from yamltrace.engine import Collector, install_hooks, own_output_map, plan_hooks, remove_hooks
    from yamltrace.engine import normalize_output_map

    torch.set_num_threads(1)
    models = harness.llama_variants(layers)
    model, ids = models["yamltrace"], harness.input_ids()
    output_map = own_output_map(model)
    tasks = normalize_output_map(output_map)
    plan = plan_hooks(model, tasks, nested_maps=True, keys=FLAGS and ("hidden_states", "attentions"))
    collector = Collector(("hidden_states", "attentions"))

    def install_remove():
        remove_hooks(install_hooks(plan, collector, decorator_is_active))

    def register_remove_plain():
        handles = [module.register_forward_hook(lambda *a: None) for module, _, _ in plan]
        for handle in handles:
            handle.remove()

    n_modules = sum(1 for _ in model.modules())
    print(f"LlamaModel {layers} layers: {n_modules} modules, {len(plan)} hooked")
    print(f"  normalize_output_map                    {per_call(lambda: normalize_output_map(output_map)):8.1f} µs")
    print(f"  plan_hooks (walk of {n_modules} modules)         {per_call(lambda: plan_hooks(model, tasks, nested_maps=True)):8.1f} µs")
    print(f"  install_hooks + remove_hooks ({len(plan)} hooks)  {per_call(install_remove):8.1f} µs")
    print(f"  register_forward_hook + remove, bare    {per_call(register_remove_plain):8.1f} µs")

    output = (torch.zeros(1), torch.zeros(1))
    hook_args = ((torch.zeros(1),), {})

    def record_calls():
        c = Collector(("hidden_states", "attentions"))
        for _, path, entries in plan:
            c.record(path, entries, *hook_args, output)

    print(f"  Collector.record x{len(plan)} (bodies only)      {per_call(record_calls):8.1f} µs")
    with torch.inference_mode():
        plain = models["plain"]
        forward = per_call(lambda: plain(input_ids=ids), calls=5)
        with yamltrace.trace(plain):
            traced = per_call(lambda: plain(input_ids=ids), calls=5)
        print(f"  plain forward                           {forward:8.1f} µs")
        print(f"  forward inside trace (hooks installed)  {traced:8.1f} µs  (+{traced - forward:.1f})")
        decorated = per_call(lambda: model(input_ids=ids, **FLAGS), calls=5)
        print(f"  decorated forward with flags            {decorated:8.1f} µs  (+{decorated - forward:.1f})")


def profile(layers: int = 8) -> None:
    import pyinstrument
    import yamltrace

    torch.set_num_threads(1)
    models = harness.llama_variants(layers)
    ids = harness.input_ids()
    with torch.inference_mode():
        profiler = pyinstrument.Profiler(interval=0.0001)
        profiler.start()
        for _ in range(300):
            models["yamltrace"](input_ids=ids, **FLAGS)
        profiler.stop()
        print(profiler.output_text(unicode=True, time="percent"))
        profiler = pyinstrument.Profiler(interval=0.0001)
        profiler.start()
        with yamltrace.trace(models["plain"]):
            for _ in range(300):
                models["plain"](input_ids=ids)
        profiler.stop()
        print(profiler.output_text(unicode=True, time="percent"))


if __name__ == "__main__":
    breakdown(8)
    if "--pyinstrument" in sys.argv:
        profile(8)
