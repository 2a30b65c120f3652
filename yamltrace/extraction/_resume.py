"""What an earlier run left in an extraction's output folder: checked, cleaned, and where to resume.

Called with the folder's lock held (`FolderLock`), so no other writer changes the folder meanwhile.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .._folder import folder_file, read_json
from ._index import (
    _SHARD,
    INDEX_FILE,
    MAX_INDEX_BYTES,
    TEMPORARY_SUFFIX,
    ExtractError,
    read_shards,
    run_differences,
    run_parts,
    shard_name,
    temporary_prefix,
)

__all__ = ["Layout", "output_folder", "previous_run"]

_UNKNOWN_DIFFERENCE = "a different spec, model, data, shard size or number of processes"

Layout = dict[str, tuple[tuple[int, ...], str]]  # tensor name -> (shape of one row, dtype code)


def output_folder(directory: Path) -> Path:
    """`directory`, created when missing; an ExtractError when it cannot be (a file of that name, no rights)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        what = "a file" if isinstance(e, FileExistsError) else e.strerror or str(e)
        raise ExtractError(f"{directory}: cannot use it as the output folder ({what}); choose another --out / out_dir.") from None
    return directory


def previous_run(
    directory: Path, rank: int, world: int, run: str, resume: bool, parts: Mapping[str, str] | None = None
) -> tuple[int, int, Layout | None]:
    """(shards, batches) this rank finished in an earlier run, and their layout; removes stale temporaries.

    Holding the folder's lock: every file named like a shard must pass the folder rule before any is
    read (a FIFO would block), and an `index.json` must be this run's (it is never replaced otherwise).
    `parts` (`run_parts` of this run) lets a refusal say which part of the other run differs.
    """
    _clear_temporaries(directory, rank)
    shards = read_shards(directory)
    foreign = [s for s in shards if s.run != run]
    if foreign:
        names = ", ".join(s.path.name for s in foreign[:3])
        why = run_differences(parts or {}, foreign[0].parts) or _UNKNOWN_DIFFERENCE
        raise ExtractError(
            f"{directory} holds shards of another run ({names}): {why}. Use an empty directory, or remove those shards."
        )
    index_exists = _check_index(directory, run, parts or {})
    mine = [s for s in shards if s.rank == rank]
    if not resume and (mine or index_exists):
        raise ExtractError(
            f"{directory} already holds an extraction; pass resume=True to continue it, or use an empty directory."
        )
    batches = [b for shard in mine for b, _ in shard.batches]
    if [s.seq for s in mine] != list(range(len(mine))) or batches != list(range(rank, rank + world * len(batches), world)):
        raise ExtractError(f"{directory}: rank {rank}'s shards are not a run's first batches in order; use an empty directory.")
    layout = {name: (shape[1:], dtype) for name, (shape, dtype) in mine[0].tensors.items()} if mine else None
    return len(mine), len(batches), layout


def _clear_temporaries(directory: Path, rank: int) -> None:
    """Check every shard-named file under the folder rule; remove this rank's temporaries a crash left."""
    mine = temporary_prefix(shard_name(rank, 0)).rpartition("-")[0] + "-"  # ".shard-r000-": this rank only
    prefixes = [mine] + ([temporary_prefix(INDEX_FILE)] if rank == 0 else [])
    for entry in os.scandir(directory):
        if _SHARD.fullmatch(entry.name):
            folder_file(directory, entry.name, what="shard")
        elif entry.name.endswith(TEMPORARY_SUFFIX) and entry.name.startswith(tuple(prefixes)):
            if not entry.is_dir(follow_symlinks=False):
                os.remove(entry.path)  # a link is removed, never followed


def _check_index(directory: Path, run: str, parts: Mapping[str, str]) -> bool:
    """Whether `directory` holds an index; an ExtractError when it is not this run's."""
    if folder_file(directory, INDEX_FILE, what="index", missing_ok=True) is None:
        return False
    try:
        index = read_json(directory, INDEX_FILE, max_bytes=MAX_INDEX_BYTES, what="index")
        found, described = index.get("fingerprint"), index.get("run")
    except (ValueError, AttributeError):  # not JSON, too deep or too big (FolderError), not an object
        found = described = None
    if found != run:
        why = run_differences(parts, run_parts(described)) if isinstance(described, dict) else ""
        raise ExtractError(
            f"{directory / INDEX_FILE} is the index of another run ({why or _UNKNOWN_DIFFERENCE}), or not an "
            "extraction's: extract does not replace it. Use an empty output folder, or remove that index.json if it "
            "is no longer needed."
        )
    return True
