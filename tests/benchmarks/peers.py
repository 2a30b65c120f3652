"""yamltrace beside nnsight, pyvene and TransformerLens on the same model, weights and inputs (`make bench-peers`).

Three tasks on a tiny `LlamaForCausalLM` (one `trace`-style block per forward, as people use each tool):
T1 every decoder layer's output (the residual stream), T2 that plus each attention and MLP output, T3 the
last token of each layer's output. Before timing, every tool's captures are checked equal (`torch.equal`)
to plain forward hooks'; a tool whose captures differ stops the benchmark. The tools are then timed
interleaved in one process (`harness.compare`: shuffled order per round, CPU time of one thread), and
each is reported as the median of its same-round ratio to the plain forward, and as its added cost
(median same-round difference) over the best peer's. Retained memory is the bytes of the storages
that a task's captures keep alive (a view of a whole output keeps the whole output).

Not part of the test suite; it needs the `bench` extra (nnsight, pyvene, transformer-lens pinned):
`make bench-peers`, or `python tests/benchmarks/peers.py [--hidden 512 --seq 128] [--layers 32] [--write docs/performance.md]`.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import harness  # noqa: E402

Captures = dict[str, list[torch.Tensor]]
Tool = Callable[[torch.Tensor], Captures]

TASKS = {
    "T1": ("resid",),
    "T2": ("resid", "attn", "mlp"),
    "T3": ("resid_last",),
}
PEERS = ("nnsight", "pyvene", "transformer_lens")
MARK_START, MARK_END = "<!-- bench-peers:start -->", "<!-- bench-peers:end -->"


def build_model(hidden: int, layers: int = 8):
    """A tiny LlamaForCausalLM with eager attention (the attention weights exist for every tool)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, use_cache=False,
    )  # fmt: skip
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def _main(output: object) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output  # type: ignore[return-value]


def _modules(model, key: str) -> list[torch.nn.Module]:
    layers = list(model.model.layers)
    return {"attn": [layer.self_attn for layer in layers], "mlp": [layer.mlp for layer in layers]}.get(key, layers)


# --- the tools -------------------------------------------------------------------------------------


def plain_forward(model) -> Tool:
    def run(ids: torch.Tensor) -> Captures:
        model(ids)
        return {}

    return run


def forward_hooks(model, keys: tuple[str, ...]) -> Tool:
    """Forward hooks registered, appending and removed around each forward: the baseline of the targets."""

    def run(ids: torch.Tensor) -> Captures:
        captures: Captures = {key: [] for key in keys}
        handles = []
        for key in keys:
            last = key == "resid_last"
            for module in _modules(model, key):
                store = captures[key]
                hook = (lambda m, a, o, s=store: s.append(_main(o)[:, -1].clone())) if last else (
                    lambda m, a, o, s=store: s.append(_main(o)))  # fmt: skip
                handles.append(module.register_forward_hook(hook))
        try:
            model(ids)
        finally:
            for handle in handles:
                handle.remove()
        return captures

    return run


def _yamltrace_dict(keys: tuple[str, ...]) -> dict[str, object]:
    from transformers.models.llama import modeling_llama as llama

    from yamltrace import OutputRecorder

    recorders = {
        "resid": OutputRecorder(llama.LlamaDecoderLayer, index=0),
        "attn": OutputRecorder(llama.LlamaAttention, index=0),
        "mlp": OutputRecorder(llama.LlamaMLP, index=0),
        "resid_last": OutputRecorder(llama.LlamaDecoderLayer, index=0, positions=(-1,)),
    }
    return {key: recorders[key] for key in keys}


_SPEC_FILE = """yamltrace: 1
imports: [transformers.models.llama.modeling_llama]
outputs:
  resid: {target: LlamaDecoderLayer, index: 0}
  attn: {target: LlamaAttention, index: 0}
  mlp: {target: LlamaMLP, index: 0}
  resid_last: {target: LlamaDecoderLayer, index: 0, positions: [-1]}
"""


def yamltrace_tool(model, keys: tuple[str, ...], spec: object) -> Tool:
    import yamltrace

    def run(ids: torch.Tensor) -> Captures:
        with yamltrace.trace(model, spec, outputs=list(keys)) as captured:
            model(ids)
        return {key: [t[:, 0] if key == "resid_last" else t for t in captured[key]] for key in keys}

    return run


# builtin:llama's keys for the tasks: its hidden_states hold the embeddings first and the final norm's
# output last, so the layer outputs are its hidden_states[1:-1] plus the last layer's (not captured).
_BUILTIN_KEYS = {"resid": "hidden_states", "attn": "attention_outputs", "mlp": "mlp_outputs"}


def yamltrace_builtin(model, keys: tuple[str, ...]) -> Tool:
    import yamltrace

    names = [_BUILTIN_KEYS[key] for key in keys]

    def run(ids: torch.Tensor) -> Captures:
        with yamltrace.trace(model, "builtin:llama", outputs=names) as captured:
            model(ids)
        return {key: list(captured[name]) for key, name in zip(keys, names)}

    return run


def nnsight_tool(model, keys: tuple[str, ...]) -> Tool:
    from nnsight import NNsight

    wrapped = NNsight(model)

    # nnsight asks for values in the order the model computes them: per layer, attention, MLP, then output.
    order = [key for key in ("attn", "mlp", "resid", "resid_last") if key in keys]
    layers = wrapped.model.layers

    def run(ids: torch.Tensor) -> Captures:
        saved: dict[str, list] = {key: [] for key in keys}
        with wrapped.trace(ids):
            for i in range(len(layers)):
                for key in order:
                    if key == "attn":
                        saved[key].append(layers[i].self_attn.output[0].save())
                    elif key == "mlp":
                        saved[key].append(layers[i].mlp.output.save())
                    else:
                        output = layers[i].output
                        saved[key].append((output[:, -1] if key == "resid_last" else output).save())
        return {key: list(values) for key, values in saved.items()}

    return run


_PYVENE_COMPONENTS = {"resid": "block_output", "attn": "attention_output", "mlp": "mlp_output", "resid_last": "block_output"}


def pyvene_tool(model, keys: tuple[str, ...], seq: int) -> Tool:
    import pyvene as pv

    layers = len(model.model.layers)
    specs = [(key, i) for key in keys for i in range(layers)]
    configs = [
        {"layer": i, "component": _PYVENE_COMPONENTS[key], "intervention_type": pv.CollectIntervention} for key, i in specs
    ]
    wrapped = pv.IntervenableModel(configs, model=model)
    for intervention in wrapped.interventions.values():
        intervention.interchange_dim = None  # collect every dimension of the gathered positions, not the first hidden_size
    locations = [[[seq - 1] if key == "resid_last" else list(range(seq))] for key, _ in specs]
    hidden = model.config.hidden_size

    def run(ids: torch.Tensor) -> Captures:
        (_, collected), _ = wrapped(base={"input_ids": ids}, unit_locations={"base": locations})
        captures: Captures = {key: [] for key in keys}
        for (key, _), value in zip(specs, collected):
            captures[key].append(
                value.reshape(ids.shape[0], hidden) if key == "resid_last" else value.reshape(*ids.shape, hidden)
            )
        return captures

    return run


_LENS_HOOKS = {"resid": "blocks.{}.hook_out", "attn": "blocks.{}.attn.hook_out", "mlp": "blocks.{}.mlp.hook_out",
               "resid_last": "blocks.{}.hook_out"}  # fmt: skip


def lens_tool(model, keys: tuple[str, ...]) -> Tool:
    from transformer_lens.model_bridge import TransformerBridge

    bridge = TransformerBridge.boot_transformers("meta-llama/Llama-3.2-1B", hf_model=model, tokenizer=_tokenizer())
    layers = len(model.model.layers)
    names = {key: [_LENS_HOOKS[key].format(i) for i in range(layers)] for key in keys}
    wanted = sorted({name for group in names.values() for name in group})

    def run(ids: torch.Tensor) -> Captures:
        _, cache = bridge.run_with_cache(ids, names_filter=wanted)
        return {key: [cache[n][:, -1] if key == "resid_last" else cache[n] for n in group] for key, group in names.items()}

    return run


def _tokenizer():
    """A word-level tokenizer saved and reloaded from a folder: TransformerLens reloads it by its path."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({f"t{i}": i for i in range(128)}, unk_token="t0"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="t0", pad_token="t0", bos_token="t1", eos_token="t2")
    folder = tempfile.mkdtemp(prefix="bench-peers-tokenizer-")
    tokenizer.save_pretrained(folder)
    return PreTrainedTokenizerFast.from_pretrained(folder)


def tools(model, task: str, seq: int, spec_path: str) -> dict[str, Tool]:
    keys = TASKS[task]
    found = {
        "plain forward": plain_forward(model),
        "forward hooks": forward_hooks(model, keys),
        "yamltrace, dict spec": yamltrace_tool(model, keys, _yamltrace_dict(keys)),
        "yamltrace, spec file": yamltrace_tool(model, keys, spec_path),
    }
    if task != "T3":  # the shipped spec has no last-token key
        found["yamltrace, builtin:llama"] = yamltrace_builtin(model, keys)
    # Each peer wraps (TransformerLens: rebuilds the submodules of) its own copy of the same weights.
    found["nnsight"] = nnsight_tool(copy.deepcopy(model), keys)
    found["pyvene"] = pyvene_tool(copy.deepcopy(model), keys, seq)
    found["transformer_lens"] = lens_tool(copy.deepcopy(model), keys)
    return found


# --- checks and figures ----------------------------------------------------------------------------


def check_equal(name: str, got: Captures, expected: Captures, builtin: bool) -> None:
    """Every capture equal to the forward hooks'; builtin:llama's hidden_states are offset by the embeddings."""
    for key, reference in expected.items():
        values = got[key]
        if builtin and key == "resid":
            values, reference = values[1:-1], reference[:-1]
        if len(values) != len(reference) or not all(torch.equal(a, b) for a, b in zip(values, reference)):
            shapes = [tuple(t.shape) for t in values]
            raise SystemExit(f"{name} captured something else for {key}: {len(values)} tensors {shapes[:2]}...")


def retained_bytes(captures: Captures) -> int:
    """Bytes of the distinct storages the captures keep alive."""
    storages = {}
    for values in captures.values():
        for tensor in values:
            storage = tensor.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """TransformerLens and pyvene print while they set up; keep the report readable."""
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        yield


def run_task(model, task: str, ids: torch.Tensor, spec_path: str, *, calls: int, rounds: int) -> dict[str, dict[str, float]]:
    with quiet():
        variants = tools(model, task, ids.shape[1], spec_path)
    with torch.no_grad():
        expected = variants["forward hooks"](ids)
        memory = {}
        for name, tool in variants.items():
            captured = tool(ids)
            if name != "plain forward":
                check_equal(name, captured, expected, builtin="builtin" in name)
            memory[name] = retained_bytes(captured)
            del captured
        timing = harness.compare({name: (lambda t=tool: t(ids)) for name, tool in variants.items()}, calls=calls, rounds=rounds)
    rows = {}
    for name in variants:
        rows[name] = {
            "ratio": timing.paired_ratio(name, "plain forward"),
            "added": timing.added(name, "plain forward"),
            "memory": memory[name],
        }
    return rows


def table(results: dict[str, dict[str, dict[str, float]]], title: str) -> str:
    tasks = list(results)
    names = list(next(iter(results.values())))
    lines = [f"**{title}**", "", "| tool | " + " | ".join(f"{t}: ÷ plain forward | {t}: added ÷ best peer's" for t in tasks) + " |",
             "|---|" + "---|---|" * len(tasks)]  # fmt: skip
    for name in names[1:]:
        cells = []
        for task in tasks:
            row = results[task].get(name)
            best = min(results[task][p]["added"] for p in PEERS)
            cells += ["—", "—"] if row is None else [f"{row['ratio']:.2f}", f"{row['added'] / best:.2f}" if best > 0 else "—"]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def memory_table(rows: dict[str, dict[str, float]], title: str) -> str:
    lines = [f"**{title}**", "", "| tool | retained by the captures |", "|---|---|"]
    lines += [f"| {name} | {row['memory'] / 2**10:,.0f} KiB |" for name, row in rows.items() if name != "plain forward"]
    return "\n".join(lines)


def write_section(path: Path, text: str) -> None:
    """Replace the text between the bench-peers markers of `path` (added at its end when missing)."""
    page = path.read_text(encoding="utf-8")
    block = f"{MARK_START}\n{text}\n{MARK_END}"
    if MARK_START in page:
        start, end = page.index(MARK_START), page.index(MARK_END) + len(MARK_END)
        page = page[:start] + block + page[end:]
    else:
        page = page.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(page, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seq", type=int, default=16)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--memory-hidden", type=int, default=512)
    parser.add_argument("--memory-seq", type=int, default=512)
    parser.add_argument("--write", type=Path, help="a Markdown page whose bench-peers section gets the tables")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        spec_path = str(Path(folder) / "spec.yaml")
        Path(spec_path).write_text(_SPEC_FILE, encoding="utf-8")
        model = build_model(args.hidden, args.layers)
        ids = harness.input_ids(args.seq)
        results = {task: run_task(model, task, ids, spec_path, calls=args.calls, rounds=args.rounds) for task in TASKS}
        big = build_model(args.memory_hidden)
        memory = run_task(big, "T3", harness.input_ids(args.memory_seq), spec_path, calls=1, rounds=1)
    title = f"tiny LlamaForCausalLM, {args.layers} layers, hidden {args.hidden}, seq {args.seq}, batch 1, 1 thread, {args.rounds} rounds × {args.calls} calls"
    text = "\n\n".join([table(results, title), memory_table(memory, f"T3 at hidden {args.memory_hidden}, seq {args.memory_seq}")])
    print(text)
    added = {task: statistics.median([results[task][p]["added"] for p in PEERS]) for task in TASKS}
    print("\nmedian peer added cost per forward (µs): " + ", ".join(f"{t} {v * 1e6:.0f}" for t, v in added.items()))
    if args.write:
        write_section(args.write, text)


if __name__ == "__main__":
    main()
