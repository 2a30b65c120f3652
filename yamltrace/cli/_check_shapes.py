"""What each recorder takes, and its shape, from one forward of the meta-device model on a dummy input.

The forward runs on the meta device (shapes only, no compute); hooks keep the first call of each hooked
module. What a recorder takes from that call is what a capture would record (`Collector.record`, the
one rule). A vocabulary key (docs/vocabulary.md) whose value does not fit its definition is a warning
that names the element that fits (`use index: 0`). A forward that cannot run on the meta device leaves
the modules it did not reach without a shape, and says why.
"""

from __future__ import annotations

import inspect
from typing import Any, NamedTuple

import torch
from torch import nn

from .._trace_checks import nearest_config
from .._vocabulary import BATCH, EXPERTS, HEADS, HIDDEN, SEQ, VOCABULARY, shape_fits, written_shape
from ..engine import Collector, OutputRecorder, entry_of
from ..errors import YamltraceError

__all__ = ["BATCH_SIZE", "SEQ_LENGTH", "Call", "Probe", "Taken", "probe", "taken"]

BATCH_SIZE, SEQ_LENGTH = 2, 3  # the dummy input: two rows of three tokens (6 tokens in all)
_EXPERT_COUNTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


class Call(NamedTuple):
    """The first call of a hooked module: its arguments and what it returned."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any


class Probe(NamedTuple):
    """One meta forward: each hooked module's first call by path, the sizes it ran with, and why it
    stopped early (None: it ran to the end)."""

    calls: dict[str, Call]
    sizes: dict[str, int | None]
    stopped: str | None


def _shape(value: Any) -> str:
    if value is None:
        return "None"
    return str(tuple(value.shape)) if isinstance(value, torch.Tensor) else type(value).__name__


def _dummy_inputs(model: nn.Module) -> tuple[dict[str, Any], int | None] | str:
    """Keyword inputs for one forward and the sequence length they give, or why there are none."""
    parameters = inspect.signature(model.forward).parameters
    config: Any = getattr(model, "config", None)
    ids = torch.zeros(BATCH_SIZE, SEQ_LENGTH, dtype=torch.long, device="meta")
    if "input_ids" in parameters:
        inputs = {"input_ids": ids}
        if "decoder_input_ids" in parameters and getattr(config, "is_encoder_decoder", False):
            inputs["decoder_input_ids"] = ids
        return inputs, SEQ_LENGTH
    vision: Any = getattr(config, "vision_config", config)
    if "pixel_values" in parameters and hasattr(vision, "image_size"):
        pixels = (BATCH_SIZE, getattr(vision, "num_channels", 3), vision.image_size, vision.image_size)
        return {"pixel_values": torch.zeros(pixels, device="meta")}, None
    if "input_features" in parameters and hasattr(config, "num_mel_bins"):
        features = (BATCH_SIZE, config.num_mel_bins, 2 * config.max_source_positions)
        return {"input_features": torch.zeros(features, device="meta")}, None
    return f"no dummy input for {type(model).__name__}.forward({', '.join(parameters)})"


def _forward(model: nn.Module, inputs: dict[str, Any]) -> str | None:
    """Run the forward; why it failed, or None. A float32 failure is retried in bfloat16 (the grouped
    matrix products of fused MoE experts take bfloat16 only)."""
    for attempt in range(2):
        try:
            with torch.no_grad():
                model(**inputs)
            return None
        except Exception as e:  # noqa: BLE001 - any failure of the model's code is reported, not raised
            failure = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(": ")
            if attempt or next(model.parameters(), torch.zeros(0)).dtype != torch.float32:
                return failure
            model.to(torch.bfloat16)
    return None


def _hook(calls: dict[str, Call], path: str) -> Any:
    def keep(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        calls.setdefault(path, Call(args, kwargs, output))

    return keep


def probe(model: nn.Module, paths: set[str]) -> Probe:
    """One meta forward of `model` with the first call of each module in `paths` kept."""
    found = _dummy_inputs(model)
    calls: dict[str, Call] = {}
    if isinstance(found, str):
        return Probe(calls, {}, found)
    inputs, seq = found
    handles = [model.get_submodule(p).register_forward_hook(_hook(calls, p), with_kwargs=True) for p in sorted(paths)]
    try:
        stopped = _forward(model, inputs)
    finally:
        for handle in handles:
            handle.remove()
    return Probe(calls, {BATCH: BATCH_SIZE, SEQ: seq}, stopped)


class Taken(NamedTuple):
    """What a recorder takes from its first hooked module: a note (`element 1 of 3: (6, 2)`), and a
    warning message when it does not fit its vocabulary key, or an error when it cannot be taken."""

    note: str
    warning: str | None = None
    error: str | None = None


def _take(key: str, recorder: OutputRecorder, path: str, call: Call, *, selected: bool) -> Any:
    entry = entry_of(key, recorder)
    collector = Collector([key])
    collector.record("." + path, (entry if selected else entry._replace(transform=None),), call.args, call.kwargs, call.output)
    values = collector.lists[key]
    return values[-1] if values else None


def _where(recorder: OutputRecorder, output: Any) -> str:
    if recorder.input is not None:
        return f"input {recorder.input!r}"
    return f"element {recorder.index} of {len(output)}" if isinstance(output, tuple) else "the output"


def _sizes(model: nn.Module, path: str, run: dict[str, int | None]) -> dict[str, int | None]:
    config = nearest_config(dict(model.named_modules()), path)
    experts = next((getattr(config, name) for name in _EXPERT_COUNTS if isinstance(getattr(config, name, None), int)), None)
    known = {HIDDEN: getattr(config, "hidden_size", None), HEADS: getattr(config, "num_attention_heads", None), EXPERTS: experts}
    return {**run, **{k: v for k, v in known.items() if isinstance(v, int)}}


def _misfit(key: str, value: Any, call: Call, sizes: dict[str, int | None], recorder: OutputRecorder) -> str | None:
    if key not in VOCABULARY or not isinstance(value, torch.Tensor) or shape_fits(key, value.shape, sizes):
        return None
    took = f"{_where(recorder, call.output)}: {_shape(value)}"
    message = f"output {key!r} is {written_shape(key, sizes)} (docs/vocabulary.md), but this recorder takes {took}"
    output = call.output
    fits = [
        i
        for i, e in enumerate(output if isinstance(output, tuple) else ())
        if isinstance(e, torch.Tensor) and shape_fits(key, e.shape, sizes)
    ]
    if fits and (recorder.input is not None or fits[0] != recorder.index):
        return f"{message}; element {fits[0]} of the output is {_shape(output[fits[0]])}: use index: {fits[0]}"
    return f"{message}; no element of the module's output fits: check the recorder's target and index"


def taken(model: nn.Module, key: str, recorder: OutputRecorder, hooked: list[str], run: Probe) -> Taken | None:
    """What `recorder` takes from its first hooked module that ran (None when the probe had no input)."""
    if not run.sizes:
        return None
    path = next((p for p in hooked if p in run.calls), None)
    if path is None:
        return Taken("not reached by the meta forward")
    call = run.calls[path]
    try:
        value = _take(key, recorder, path, call, selected=False)
        note = f"{_where(recorder, call.output)}: {_shape(value)}"
        if recorder.positions is not None:
            note += f", {_shape(_take(key, recorder, path, call, selected=True))} after positions"
    except YamltraceError as e:
        return Taken("cannot be taken", error=str(e).removeprefix("yamltrace: "))
    misfit = _misfit(key, value, call, _sizes(model, path, run.sizes), recorder)
    if key in VOCABULARY and isinstance(value, torch.Tensor):
        note += f", {'does not fit' if misfit else 'fits'} {key}"
    return Taken(note, misfit)
