"""Data columns carried beside the activations: what a column may hold, and how it is stored.

A batch (a dict) may hold entries that are not for the model: a row's label, its id. `extract(...,
columns=[...])` takes them out of the batch before the forward and stores them with the captures,
one value per row: a tensor (dimension 0 is rows), or a list with one number, boolean, list of numbers
or string per row. Numbers become one tensor (`torch.tensor`: int64, float32, bool); strings are
stored as text in each shard's metadata (`TEXTS_FIELD`) and read back as a list of `str`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ._index import ExtractError, split_tensor_name

__all__ = ["MAX_BATCH_TEXT_BYTES", "check_columns", "split_columns", "add_columns", "owned_copy"]

MAX_BATCH_TEXT_BYTES = 16 * 2**20  # UTF-8 bytes of one batch's text columns (a shard's header is capped)


def check_columns(columns: Sequence[str], inputs: Sequence[str]) -> tuple[str, ...]:
    """`columns` as a tuple, when each is a name a shard can hold and none is also a kept model input."""
    if isinstance(columns, str):
        columns = [columns]
    names = tuple(columns)
    for name in names:
        if not isinstance(name, str) or not name or "/" in name:
            raise ExtractError(f"columns: {name!r} is not a column name; name a batch entry (no '/'), such as 'labels'.")
        if name in inputs:
            raise ExtractError(
                f"columns: {name!r} is also in inputs (kept and passed to the model); name it in one of them only."
            )
    if len(set(names)) != len(names):
        raise ExtractError(f"columns: a name is listed twice in {list(names)}.")
    return names


def split_columns(
    batch: Any, columns: tuple[str, ...], index: int, rows_of: Callable[[Any], int]
) -> tuple[Any, dict[str, torch.Tensor], dict[str, list[str]]]:
    """`batch` without its `columns`, and those columns as `{name: tensor}` and `{name: texts}`, each with
    one value per row of the rest of the batch (`rows_of` counts them)."""
    if not columns:
        return batch, {}, {}
    if not isinstance(batch, Mapping):
        raise ExtractError(f"batch {index}: columns= needs batches that are dicts, got a {type(batch).__name__}.")
    missing = [name for name in columns if name not in batch]
    if missing:
        raise ExtractError(
            f"batch {index}: no entry {missing[0]!r} (entries: {', '.join(map(str, batch))}); every batch must hold "
            "each of columns="
        )
    rest = {k: v for k, v in batch.items() if k not in columns}
    rows = rows_of(rest)
    tensors: dict[str, torch.Tensor] = {}
    texts: dict[str, list[str]] = {}
    for name in columns:
        value = _stored(batch[name], f"batch {index}: column {name!r}")
        if len(value) != rows:
            raise ExtractError(f"batch {index}: column {name!r} holds {len(value)} value(s) for {rows} row(s); give one per row.")
        if isinstance(value, list):
            texts[name] = value
        else:
            tensors[name] = value
    size = sum(len(text.encode("utf-8")) for values in texts.values() for text in values)
    if size > MAX_BATCH_TEXT_BYTES:
        raise ExtractError(
            f"batch {index}: its text columns hold {size:,} bytes, over {MAX_BATCH_TEXT_BYTES:,} per batch; "
            "use smaller batches or shorter texts"
        )
    return rest, tensors, texts


def _stored(value: Any, where: str) -> torch.Tensor | list[str]:
    """A column's value as stored: a tensor of rows (`owned_copy`), or one string per row."""
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            raise ExtractError(f"{where}: a tensor of shape [], not one value per row.")
        return owned_copy(value)
    if not isinstance(value, (list, tuple)) or not value:
        raise ExtractError(f"{where}: {value!r:.40} ({type(value).__name__}), not a tensor or a list with one value per row.")
    if all(isinstance(item, str) for item in value):
        return list(value)
    if any(isinstance(item, str) or item is None for item in value):
        kinds = sorted({type(item).__name__ for item in value})
        raise ExtractError(f"{where}: mixes {', '.join(kinds)}; one column holds strings only, or numbers only.")
    try:
        return torch.tensor(value)
    except (TypeError, ValueError, RuntimeError, OverflowError) as e:
        raise ExtractError(f"{where}: cannot make one tensor of its values ({e}); give every row a value of one shape.") from None


def owned_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU copy of a batch's tensor, out of autograd: the batch is the caller's, who may fill the same
    tensors again for its next batch (`clone`, several times cheaper than `to("cpu", copy=True)`)."""
    if tensor.requires_grad:
        tensor = tensor.detach()
    return tensor.clone() if tensor.is_cpu else tensor.to("cpu")


def add_columns(tensors: dict[str, torch.Tensor], carried: dict[str, torch.Tensor], texts: dict[str, list[str]]) -> None:
    """Add the carried column tensors to a batch's captures; a column named like a captured key or a kept
    input is an error (the index would hold one name twice)."""
    if not carried and not texts:
        return
    taken = {split_tensor_name(name)[0] for name in tensors}
    for name in (*carried, *texts):
        if name in taken:
            raise ExtractError(f"columns: {name!r} is also the name of a captured key or a kept input; rename the column.")
    tensors.update(carried)
