"""Texts in, batches out: read `.jsonl`, `.txt`, `.parquet` or a `datasets` dataset, tokenise in batches.

Every row is checked when the input is opened (the field is there and is text, the input is not
empty, the line is at most `max_row_bytes` long), so a bad row is an error, with its line, before any
activation is written. `.jsonl` and `.txt` files are then read by byte offset as batches are built, so
the texts are never all in memory, and a line over the cap is never held whole. A text is cut before
it is tokenised, to what `max_length` tokens can cover (see `TokenizedBatches`).
"""

from __future__ import annotations

import hashlib
import json
import os
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import BadRows, ExtractError

__all__ = [
    "Rows", "open_texts", "open_dataset", "load_tokenizer", "TokenizedBatches", "BadRows", "MAX_ROW_BYTES", "file_sha256",
    "tokenizer_sha256",
]  # fmt: skip

MAX_ROW_BYTES = 64 * 2**20  # one line of a .jsonl or .txt file; a longer one is a bad row
_MAX_LISTED = 10  # problems listed in one error; the rest are counted
_CHUNK = 2**20  # bytes read at a time where a file is streamed
_CHARS_PER_TOKEN = 16  # the first guess of how many characters `max_length` tokens can cover, per token


def _lines(f: BinaryIO, max_bytes: int) -> Iterator[tuple[bytes | None, int]]:
    """`(line without its line break, bytes it spans)` for each line of `f`; the line is None when it is
    longer than `max_bytes`, which is then skipped in chunks, never held whole."""
    while raw := f.readline(max_bytes + 2):  # room for the line and "\r\n"
        length = len(raw)
        if not raw.endswith(b"\n") and length == max_bytes + 2:
            while raw and not raw.endswith(b"\n"):
                raw = f.readline(_CHUNK)
                length += len(raw)
            yield None, length
            continue
        line = raw.rstrip(b"\r\n")
        yield (line if len(line) <= max_bytes else None), length


class Rows(Sequence[str]):
    """The texts of a data source, row by row, and the other fields of each row named when it was opened
    (`values`: the data columns `extract` carries beside the activations)."""

    columns: tuple[str, ...] = ()

    def values(self, i: int) -> dict[str, Any]:
        """`{column: value}` of row `i`, for each of `columns`."""
        return {}


class _FileRows(Rows):
    """The rows of a text file, found by one checking pass and read back by byte offset on demand."""

    def __init__(
        self, path: Path, text_field: str | None, max_row_bytes: int = MAX_ROW_BYTES, columns: tuple[str, ...] = ()
    ) -> None:
        self.path, self.text_field, self.columns = path, text_field, columns
        self._offsets, self._lengths = array("q"), array("q")
        problems: list[str] = []
        count = 0
        with open(path, "rb") as f:
            offset = 0
            for number, (line, length) in enumerate(_lines(f, max_row_bytes), 1):
                if line is None:
                    problem: str | None = (
                        f"line {number}: {length:,} bytes, over the {max_row_bytes:,}-byte limit for one row; split it"
                    )
                else:
                    problem = self._check(line, number) if line.strip() else None
                    if problem is None and line.strip():
                        self._offsets.append(offset)
                        self._lengths.append(len(line))
                if problem is not None:
                    count += 1
                    if len(problems) < _MAX_LISTED:
                        problems.append(problem)
                offset += length
        if count:
            raise BadRows(str(path), problems, count)
        if not self._offsets:
            raise ExtractError(f"{path}: the file holds no rows (it is empty or blank); nothing to extract.")

    def _check(self, line: bytes, number: int) -> str | None:
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            return f"line {number}: not UTF-8 ({e.reason} at byte {e.start})"
        if self.text_field is None:
            return None
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            return f"line {number}: not JSON ({e.msg}, column {e.colno})"
        except RecursionError:
            return f"line {number}: JSON nested too deeply to read"
        if not isinstance(row, dict):
            return f"line {number}: a JSON {type(row).__name__}, not an object with a {self.text_field!r} field"
        if self.text_field not in row:
            fields = ", ".join(sorted(row)) or "none"
            return f"line {number}: no field {self.text_field!r} (fields: {fields}); choose one with --text-field"
        if not isinstance(row[self.text_field], str):
            return f"line {number}: field {self.text_field!r} is {type(row[self.text_field]).__name__}, not text"
        for name in self.columns:
            if name not in row:
                fields = ", ".join(sorted(row))
                return f"line {number}: no field {name!r} (fields: {fields}), which --columns names"
            if row[name] is None or isinstance(row[name], dict):
                return f"line {number}: field {name!r} is {'null' if row[name] is None else 'an object'}; a column holds a number, text or a list"
        return None

    def __len__(self) -> int:
        return len(self._offsets)

    def _line(self, i: int) -> str:
        with open(self.path, "rb") as f:
            f.seek(self._offsets[i])
            return f.read(self._lengths[i]).decode("utf-8")

    def __getitem__(self, i: int) -> str:  # type: ignore[override]  # rows by position only, not slices
        text = self._line(i)
        return text if self.text_field is None else json.loads(text)[self.text_field]

    def values(self, i: int) -> dict[str, Any]:
        row = json.loads(self._line(i)) if self.columns else {}
        return {name: row[name] for name in self.columns}


class _ColumnRows(Rows):
    """One text column of a table (a pyarrow column or a `datasets` dataset), row by row, and its other
    `columns` (`get_values`)."""

    def __init__(
        self,
        get: Callable[[int], str],
        length: int,
        columns: tuple[str, ...] = (),
        get_values: Callable[[int], dict[str, Any]] | None = None,
    ) -> None:
        self._get, self._length = get, length
        self.columns, self._get_values = columns, get_values

    def values(self, i: int) -> dict[str, Any]:
        return self._get_values(i) if self._get_values is not None else {}

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i: int) -> str:  # type: ignore[override]  # rows by position only, not slices
        return self._get(i)


def _parquet_rows(path: Path, text_field: str, columns: tuple[str, ...]) -> Rows:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ExtractError(f"{path}: reading .parquet needs pyarrow (pip install pyarrow), or convert it to .jsonl.") from None
    names = pq.read_schema(path).names
    if text_field not in names:
        raise ExtractError(f"{path}: no column {text_field!r} (columns: {', '.join(names)}); choose one with --text-field.")
    for name in columns:
        if name not in names:
            raise ExtractError(f"{path}: no column {name!r}, which --columns names (columns: {', '.join(names)}).")
    table = pq.read_table(path, columns=[text_field, *(c for c in columns if c != text_field)])
    for name in columns:
        if table.column(name).null_count:
            raise ExtractError(f"{path}: column {name!r} has {table.column(name).null_count} empty (null) row(s).")
    column = table.column(text_field)
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise ExtractError(f"{path}: column {text_field!r} holds {column.type}, not text.")
    if column.null_count:
        raise ExtractError(f"{path}: column {text_field!r} has {column.null_count} empty (null) row(s).")
    if len(column) == 0:
        raise ExtractError(f"{path}: the table holds no rows; nothing to extract.")
    return _ColumnRows(
        lambda i: column[i].as_py(), len(column), columns, lambda i: {c: table.column(c)[i].as_py() for c in columns}
    )


def open_texts(
    path: str | os.PathLike[str],
    text_field: str = "text",
    *,
    max_row_bytes: int = MAX_ROW_BYTES,
    columns: Sequence[str] = (),
) -> Rows:
    """The texts of a `.jsonl` file (field `text_field` of each line), a `.txt` file (each non-blank
    line) or a `.parquet` file (column `text_field`, needs pyarrow); every row checked now, `columns`
    (other fields of each row, carried beside the activations) included. A line of a `.jsonl` or
    `.txt` file longer than `max_row_bytes` is a bad row."""
    path, columns = Path(path), tuple(columns)
    if not path.is_file():
        raise ExtractError(f"{path}: no such file.")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _FileRows(path, text_field, max_row_bytes, columns)
    if suffix == ".txt":
        if columns:
            raise ExtractError(f"{path}: a .txt file's rows have no fields for --columns; use .jsonl or .parquet.")
        return _FileRows(path, None, max_row_bytes)
    if suffix == ".parquet":
        return _parquet_rows(path, text_field, columns)
    raise ExtractError(f"{path}: unknown data format {suffix or '(no suffix)'!r}; use .jsonl, .txt or .parquet.")


def open_dataset(name: str, split: str, text_field: str = "text", columns: Sequence[str] = ()) -> Rows:
    """Column `text_field` of split `split` of a `datasets` dataset (the optional `datasets` package), and
    its `columns` carried beside the activations."""
    try:
        import datasets
    except ImportError:
        raise ExtractError("--dataset needs the datasets package (pip install datasets); or pass --data FILE.") from None
    dataset = datasets.load_dataset(name, split=split)
    if text_field not in dataset.column_names:
        raise ExtractError(
            f"dataset {name!r} ({split}): no column {text_field!r} (columns: {', '.join(dataset.column_names)}); "
            "choose one with --text-field."
        )
    for column in columns:
        if column not in dataset.column_names:
            raise ExtractError(
                f"dataset {name!r} ({split}): no column {column!r}, which --columns names "
                f"(columns: {', '.join(dataset.column_names)})."
            )
    feature = dataset.features[text_field]
    if getattr(feature, "dtype", None) not in ("string", "large_string"):
        raise ExtractError(f"dataset {name!r} ({split}): column {text_field!r} holds {feature}, not text.")
    if len(dataset) == 0:
        raise ExtractError(f"dataset {name!r} ({split}) holds no rows; nothing to extract.")
    carried = tuple(columns)
    return _ColumnRows(lambda i: dataset[i][text_field], len(dataset), carried, lambda i: {c: dataset[i][c] for c in carried})


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's content, read in chunks (part of a run's fingerprint: an edit of the data
    that keeps its size is still another run)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def tokenizer_sha256(tokenizer: Any) -> str:
    """SHA-256 of what decides a tokenizer's ids: its vocabulary and rules (the `tokenizers` JSON of a
    fast tokenizer, else the vocabulary), its special tokens and its padding and truncation sides."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # less its padding and truncation state, which each call sets anew
        rules = json.dumps({k: v for k, v in json.loads(backend.to_str()).items() if k not in ("padding", "truncation")})
    else:
        rules = json.dumps(tokenizer.get_vocab(), sort_keys=True)
    names = ("pad_token", "eos_token", "bos_token", "unk_token", "padding_side", "truncation_side", "all_special_tokens")
    settings = json.dumps({name: getattr(tokenizer, name, None) for name in names}, sort_keys=True, default=str)
    return hashlib.sha256(f"{type(tokenizer).__name__}\n{rules}\n{settings}".encode()).hexdigest()


def load_tokenizer(directory: str | os.PathLike[str]) -> Any:
    """A transformers tokenizer saved in `directory` (never downloaded); padding uses EOS if it has no pad token."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ExtractError(f"--tokenizer {directory}: not a directory; pass a folder a tokenizer was saved to.")
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise ExtractError(
            f"--tokenizer needs transformers and tokenizers ({e}); install them with: pip install 'yamltrace[hf]'."
        ) from None

    tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ExtractError(f"the tokenizer in {directory} has neither a pad token nor an EOS token to pad with; set one.")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class TokenizedBatches(Sequence[dict[str, Any]]):
    """Batches of `batch_size` texts, tokenised when asked for (so each rank builds only its own),
    padded and truncated to `max_length` so that every batch gives rows of one shape.

    A long text is cut before it is tokenised: to `max_length * 16 + 64` characters when the tokens
    `max_length` keeps of that cut end in its first half (so the cut cannot change them), else to a
    cut four times longer, and so on. So a 48 MB text costs what its first tokens cost.
    """

    def __init__(self, texts: Sequence[str], tokenizer: Any, *, batch_size: int, max_length: int) -> None:
        self.texts, self.tokenizer = texts, tokenizer
        self.batch_size, self.max_length = batch_size, max_length
        self.columns = texts.columns if isinstance(texts, Rows) else ()

    def __len__(self) -> int:
        return -(-len(self.texts) // self.batch_size)

    def __getitem__(self, i: int) -> dict[str, Any]:  # type: ignore[override]  # batches by position only, not slices
        if not 0 <= i < len(self):
            raise IndexError(f"batch {i} of {len(self)}")
        numbers = range(i * self.batch_size, min(len(self.texts), (i + 1) * self.batch_size))
        rows = [self._cut(self.texts[j]) for j in numbers]
        encoded = self.tokenizer(rows, padding="max_length", truncation=True, max_length=self.max_length, return_tensors="pt")
        batch = dict(encoded)
        if self.columns and isinstance(self.texts, Rows):
            clash = [name for name in self.columns if name in batch]
            if clash:
                raise ExtractError(f"--columns {clash[0]}: the tokenizer gives a model input of that name; rename the field.")
            values = [self.texts.values(j) for j in numbers]
            batch.update({name: [row[name] for row in values] for name in self.columns})  # extract(columns=) takes them out
        return batch

    def _cut(self, text: str) -> str:
        """`text`, cut where its kept tokens certainly end (see the class)."""
        limit = self.max_length * _CHARS_PER_TOKEN + 64
        while len(text) > limit:
            if self._kept_end(text[:limit]) <= limit // 2:
                return text[:limit]
            limit *= 4
        return text

    def _kept_end(self, text: str) -> int:
        """The character offset where the tokens `max_length` keeps of `text` end."""
        try:
            encoded = self.tokenizer(text, truncation=True, max_length=self.max_length, return_offsets_mapping=True)
        except NotImplementedError:  # a slow (Python) tokenizer gives no offsets: the first cut is kept
            return 0
        return max((end for _, end in encoded["offset_mapping"]), default=0)
