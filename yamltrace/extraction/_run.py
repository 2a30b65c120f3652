"""`extract`: run a model over batches under `trace` and stream every capture to sharded safetensors.

One process or many: under `torch.distributed` (for example `torchrun`), batch `i` belongs to rank
`i % world_size`; each rank writes its own shards, and rank 0 writes `index.json` once all have
finished, listing every batch in input order. So 1 and N processes store the same rows, read back in
the same order. Everything is checked on the first batch, before any shard is written.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .._run_values import check_run_values
from .._spec_arg import as_spec
from ..engine import attached_spec, shared_warning, unwrap
from ..spec import Spec, spec_from_model
from ..tracing import plan, stepwise
from ..errors import ExtractInterrupted
from ._columns import add_columns, check_columns, owned_copy, split_columns
from ._index import INDEX_FILE, ExtractError, build_index, dtype_code, fingerprint, run_parts, tensor_name, write_json_atomically
from ._lock import FolderLock
from ._progress import Progress
from ._reader import Activations, open_activations
from ._resume import Layout, output_folder, previous_run
from ._writer import ShardWriter

__all__ = ["extract", "ExtractInterrupted", "DEFAULT_SHARD_BYTES", "DEFAULT_INPUTS"]

DEFAULT_SHARD_BYTES = 256 * 2**20
DEFAULT_INPUTS = ("input_ids", "attention_mask")


def _spec_text(model: nn.Module, spec: Any) -> str:
    """The spec as YAML for the index (`repr` when it names a class no YAML can import)."""
    resolved: Spec = spec if spec is not None else attached_spec(model) or spec_from_model(model)
    try:
        return resolved.to_yaml()
    except ValueError:
        return repr(resolved)


def _config_hash(model: nn.Module) -> str | None:
    config = getattr(model, "config", None)
    if config is None:
        return None
    data = config.to_dict() if callable(getattr(config, "to_dict", None)) else vars(config)
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _tensors_hash(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """SHA-256 of named tensors (names, dtypes, shapes, bytes), one tensor at a time."""
    digest = hashlib.sha256()
    for name, tensor in named:
        value = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{value.dtype}:{list(value.shape)};".encode())
        digest.update(memoryview(value.reshape(-1).view(torch.uint8).numpy()))  # type: ignore[arg-type]
    return digest.hexdigest()


def _weights_hash(model: nn.Module) -> str:
    """SHA-256 of every parameter and buffer."""
    return _tensors_hash([*model.named_parameters(), *model.named_buffers()])


def _edit_values_hash(spec: Spec | None, values: Mapping[str, Any] | None) -> str | None:
    """SHA-256 of the tensors the interventions apply (read from files, or `values`), which the spec's
    text names but does not hold; None when there are none. Part of what makes two runs the same run."""
    named = [(iv.name, iv.value) for iv in (spec.interventions if spec is not None else ()) if isinstance(iv.value, torch.Tensor)]
    for name, given in sorted((values or {}).items()):
        given = list(given) if isinstance(given, (list, tuple)) else [given]
        named.extend((f"{name}[{i}]", torch.as_tensor(value)) for i, value in enumerate(given))
    return _tensors_hash(named) if named else None


def _world() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class _Schedule:
    """This rank's batches `(index, batch)`: every `world`-th one from `rank`, less those already done.

    A `Sequence` is indexed, so other ranks' batches (and finished ones) are never built; any other
    iterable is walked in full. `count` is the number of batches in the input once iterated.
    """

    def __init__(self, batches: Iterable[Any], rank: int, world: int, done: int) -> None:
        self.batches, self.rank, self.world, self.done = batches, rank, world, done
        self.count = len(batches) if isinstance(batches, Sequence) else None

    def total(self) -> int | None:
        """How many batches this rank runs, when the input has a length."""
        if self.count is None:
            return None
        return len(range(self.rank, self.count, self.world))

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        if isinstance(self.batches, Sequence):
            for i in range(self.rank + self.done * self.world, len(self.batches), self.world):
                yield i, self.batches[i]
            return
        count = 0
        for i, batch in enumerate(self.batches):
            count = i + 1
            if i % self.world == self.rank and i // self.world >= self.done:
                yield i, batch
        self.count = count


def _rows_of(batch: Any) -> int:
    """Rows of a batch: dimension 0 of its `input_ids`, else of its first tensor. (Here and in
    `_arguments`, a dict is tested before the `Mapping` ABC, whose check is a Python call per batch.)"""
    if (type(batch) is dict or isinstance(batch, Mapping)) and isinstance(batch.get("input_ids"), torch.Tensor):
        rows: int = batch["input_ids"].shape[0]
        return rows
    values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (tuple, list)) else [batch]
    for value in values:
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return value.shape[0]
    raise ExtractError(f"a batch must hold a tensor whose dimension 0 is rows; got {type(batch).__name__}.")


def _arguments(batch: Any, device: torch.device) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A batch as the model call's `(args, kwargs)`, its tensors on `device`: a dict is keyword
    arguments, a tuple or list positional ones, anything else the one argument."""
    if type(batch) is dict or isinstance(batch, Mapping):
        return (), {k: _moved(v, device) for k, v in batch.items()}
    return tuple(_moved(v, device) for v in (batch if isinstance(batch, (tuple, list)) else (batch,))), {}


def _moved(value: Any, device: torch.device) -> Any:
    """A batch entry on `device` (a tensor already there is kept: no `to` dispatch)."""
    return value.to(device) if isinstance(value, torch.Tensor) and value.device != device else value


def _batch_tensors(
    captured: Mapping[str, tuple[Any, ...]], kwargs: Mapping[str, Any], inputs: Sequence[str], index: int, rows: int
) -> dict[str, torch.Tensor]:
    """One batch's captures as `{tensor name: CPU tensor}`, plus copies of the kept model inputs
    (keyword arguments, `owned_copy`; their rows are checked with the batch's layout, `_Rows.check`)."""
    tensors: dict[str, torch.Tensor] = {}
    for key, values in captured.items():
        for layer, value in enumerate(values):
            if value is None:
                continue
            if not isinstance(value, torch.Tensor):
                raise _not_rows(index, tensor_name(key, layer), f"a {type(value).__name__}", rows)
            tensors[tensor_name(key, layer)] = _on_cpu(value)
    for name in inputs:
        value = kwargs.get(name)
        if isinstance(value, torch.Tensor):
            if name in captured:
                raise ExtractError(f"the spec's key {name!r} has the name of a model input kept beside it; rename the key.")
            tensors[name] = owned_copy(value)
    return tensors


def _not_rows(index: int, name: str, what: str, rows: int) -> ExtractError:
    return ExtractError(
        f"batch {index}: {name} is {what}, not a tensor with one row per batch row ({rows}); extract stores tensors "
        "whose dimension 0 is the batch."
    )


def _on_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` as a shard stores it: on the CPU, out of autograd (itself when it already is: no dispatch)."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    return tensor if tensor.is_cpu else tensor.to("cpu")


def _layout(tensors: Mapping[str, torch.Tensor]) -> Layout:
    return {name: (tuple(t.shape[1:]), dtype_code(t.dtype)) for name, t in tensors.items()}


_SHAPE_AND_DTYPE = attrgetter("shape", "dtype")


class _Rows:
    """Checks that every batch gives rows of one layout: the resumed run's, else the first batch's.

    A batch whose names, shapes and dtypes are those of the last batch checked passes on one comparison
    (each tensor's shape and dtype read once); any other is checked in full: dimension 0 is the batch's
    rows, then the layout (`_check_layout`: safetensors codes, the message).
    """

    def __init__(self, expected: Layout | None) -> None:
        self.expected = expected
        self._passed: tuple[int, list[str], list[tuple[torch.Size, torch.dtype]]] | None = None

    def check(self, tensors: Mapping[str, torch.Tensor], index: int, rows: int) -> None:
        seen = (rows, list(tensors), list(map(_SHAPE_AND_DTYPE, tensors.values())))
        if seen == self._passed:
            return
        for name, (shape, _) in zip(seen[1], seen[2]):
            if not shape or shape[0] != rows:
                raise _not_rows(index, name, f"shape {list(shape)}", rows)
        layout = _layout(tensors)
        self.expected = self.expected or layout
        _check_layout(layout, self.expected, index)
        self._passed = seen


def _check_layout(layout: Layout, expected: Layout, index: int) -> None:
    if layout == expected:
        return
    for name in [*expected, *(name for name in layout if name not in expected)]:
        if layout.get(name) != expected.get(name):
            got, want = layout.get(name), expected.get(name)
            raise ExtractError(
                f"batch {index}: {name} has rows {list(got[0]) if got else 'missing'}"
                f"{f' ({got[1]})' if got else ''}, but earlier batches had {list(want[0]) if want else 'none'}"
                f"{f' ({want[1]})' if want else ''}. Every batch must give rows of one shape: pad to one length "
                "(the command line pads to --max-length)."
            )


def _finish(directory: Path, run: dict[str, Any], count: int, rank: int, world: int) -> None:
    """Rank 0 writes the index once every rank's shards are in; the others learn whether it succeeded."""
    error: list[str | None] = [None]
    if world > 1:
        torch.distributed.barrier()
    if rank == 0:
        try:
            index = build_index(directory, run, count)
            index["versions"] = {"yamltrace": _version(), "torch": torch.__version__}
            write_json_atomically(directory / INDEX_FILE, index)
        except ExtractError as e:
            error[0] = str(e)
            if world == 1:
                raise
    if world > 1:
        torch.distributed.broadcast_object_list(error, src=0)
        if error[0] is not None:
            raise ExtractError(f"rank 0 could not write the index: {error[0]}")


def _version() -> str:
    from .. import __version__

    return __version__


def extract(
    model: nn.Module,
    spec: Any,
    batches: Iterable[Any],
    out_dir: str | os.PathLike[str],
    *,
    outputs: Any = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
    progress: bool = True,
    resume: bool = True,
    inputs: Sequence[str] = DEFAULT_INPUTS,
    data: Mapping[str, Any] | None = None,
    max_pending: int = 1,
    fingerprint_weights: bool = False,
    columns: Sequence[str] = (),
    values: Mapping[str, Any] | None = None,
) -> Activations:
    """Run `model` over `batches` under `trace(model, spec)` and write every capture to `out_dir`.

    Args:
        model: any `nn.Module` (put it in eval mode first); it runs under `torch.inference_mode()`.
        spec: what to capture, as `trace` takes it (a `Spec`, a spec file, a capture dict, or `None`
            for the model's own spec). Recorder `layers` and `dtype` decide what is stored.
        batches: an iterable of batches: a dict of keyword arguments, a tuple of positional ones, or a
            tensor. Dimension 0 of every captured tensor is the batch (one stored row per batch row);
            every batch must give rows of one shape. Under `torch.distributed`, every rank passes the
            same batches and runs its share; a `Sequence` is indexed, so other ranks' batches are not built.
        out_dir: the directory of `shard-*.safetensors` files and `index.json` (created if needed).
        outputs: the keys to capture (default: every key of the spec).
        shard_bytes: a shard is closed once it holds this many bytes (a batch never spans two shards).
        progress: report progress on stderr (rank 0 only).
        resume: continue a run interrupted in `out_dir` after its last finished shard; with `False`,
            a directory that already holds an extraction is an error.
        inputs: model inputs (batch dict entries) stored beside the captures when present.
        data: a description of the input (file, tokenizer, ...) recorded in the index; part of what
            makes two runs the same run for `resume`.
        max_pending: full shards waiting for the writer before the model loop waits for it. Memory
            holds about `(max_pending + 2) * shard_bytes` of captures at most.
        fingerprint_weights: make the model's weights (a hash of every parameter and buffer) part of
            what makes two runs the same run, so `resume` refuses a folder written with other weights.
        columns: batch dict entries that are data, not model inputs (`labels`, `id`): taken out of each
            batch before the forward and stored beside the captures, one value per row (a tensor, or a
            list of numbers or strings); `Activations.column(name)` reads them back.
        values: the tensors of the spec's `{value: NAME}` interventions, as `trace` takes them. A spec
            with `interventions` stores the activations of the edited model; the edits' tensors are part
            of what makes two runs the same run.

    The output folder is locked for the whole run: a second `extract` on it fails at once, naming the
    process that holds it. An interrupt (`KeyboardInterrupt`) stops within a bounded time and leaves only
    whole shards; it is raised again as `ExtractInterrupted`, which says how many batches are safe.

    Returns the finished extraction, opened with `open_activations`.
    """
    if not isinstance(shard_bytes, int) or shard_bytes < 1:
        raise ValueError(f"shard_bytes must be a positive number of bytes, got {shard_bytes!r}.")
    directory = output_folder(Path(out_dir))
    rank, world = _world()
    columns = check_columns(columns, inputs)
    if spec is not None:  # a file, builtin:NAME, a spec document or a capture dict, as trace reads it
        spec = as_spec(unwrap(model), spec)
    check_run_values(spec, values)  # keys that are names, tensors that hold data: located in the spec
    plan(unwrap(model), spec, outputs=outputs, values=values)  # an unknown key or a spec that does not apply fails here
    described: dict[str, Any] = {
        "class": f"{type(model).__module__}:{type(model).__qualname__}",
        "config_sha256": _config_hash(model),
    }
    if fingerprint_weights:
        described["weights_sha256"] = _weights_hash(model)
    edits = _edit_values_hash(spec, values)
    run = {
        "spec": _spec_text(model, spec),
        "outputs": None if outputs is None else list([outputs] if isinstance(outputs, str) else outputs),
        "model": described,
        "inputs": list(inputs),
        "data": dict(data) if data is not None else None,
        "world_size": world,
        "shard_bytes": shard_bytes,
        **({"columns": list(columns)} if columns else {}),
        **({"edit_values_sha256": edits} if edits else {}),
    }
    run_id, parts = fingerprint(run), run_parts(run)
    with FolderLock(directory, rank):
        first_seq, done, expected = previous_run(directory, rank, world, run_id, resume, parts)
        schedule = _Schedule(batches, rank, world, done)
        reporter = Progress(schedule.total()) if progress and rank == 0 else None
        if reporter is not None:
            reporter.skipped(done)
        writer = ShardWriter(
            directory, rank=rank, first_seq=first_seq, shard_bytes=shard_bytes, run=run_id, max_pending=max_pending, parts=parts
        )
        try:
            count = _run_batches(model, spec, outputs, inputs, columns, schedule, writer, expected, reporter, values)
        except BaseException as e:
            writer.abort()
            if reporter is not None:
                reporter.stop()
            if isinstance(e, KeyboardInterrupt):
                raise ExtractInterrupted(directory, done + writer.batches, world) from None
            raise
        if reporter is not None:
            reporter.finish()
        _finish(directory, run, count, rank, world)
    return open_activations(directory)


def _run_batches(
    model: nn.Module,
    spec: Any,
    outputs: Any,
    inputs: Sequence[str],
    columns: tuple[str, ...],
    schedule: _Schedule,
    writer: ShardWriter,
    expected: Layout | None,
    reporter: Progress | None,
    values: Mapping[str, Any] | None = None,
) -> int:
    """The model loop: capture each of this rank's batches, check its layout, hand it to the writer.
    `columns` are taken out of each batch and stored beside its captures. Returns the number of batches
    in the input."""
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    layout = _Rows(expected)
    # One `trace` block for the whole loop, read batch by batch (`stepwise`): its hooks go on once.
    with torch.inference_mode(), shared_warning(), stepwise(model, spec, outputs=outputs, values=values) as steps:
        for index, batch in schedule:
            steps.skip()  # (calls of the model made while the input gave this batch are not this batch's)
            batch, carried, texts = split_columns(batch, columns, index, _rows_of)
            rows = _rows_of(batch)
            args, kwargs = _arguments(batch, device)
            model(*args, **kwargs)
            tensors = _batch_tensors(steps.take(), kwargs, inputs, index, rows)
            add_columns(tensors, carried, texts)
            layout.check(tensors, index, rows)
            writer.put(index, rows, tensors, texts)
            if reporter is not None:
                reporter.update(1, rows)
    if not schedule.count:
        raise ExtractError("the input holds no batches; nothing to extract.")
    writer.close()
    return schedule.count
