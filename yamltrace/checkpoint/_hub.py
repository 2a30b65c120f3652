"""Checkpoints named by a Hugging Face Hub id (`org/name`): their `yamltrace.yaml` and, for yamltrace's
own models, their files, fetched with the same revision, cache and offline rules as the weights.

huggingface_hub is needed only for Hub ids (`pip install 'yamltrace[hub]'`; transformers installs it).
A repository without `yamltrace.yaml` loads with no spec (logged at debug level). Offline
(`HF_HUB_OFFLINE=1` or `local_files_only=True`), only the local cache is read: a spec the cache knows
is absent is treated as absent; one the cache has never seen is reported with a warning, since the
repository may ship one that was never downloaded. Online, the files the spec names come with it,
from its snapshot's commit: the bases of its `extends` chain and its interventions' tensor files,
each by name once the spec reader has checked it, its size asked first (`_download_spec_files`).
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._folder import bare_name, names_folder
from ..errors import FolderError, SpecError
from ._spec_file import SPEC_FILE

__all__ = ["HUB_OPTIONS", "hub_options", "is_hub_id", "hub_spec_file", "hub_snapshot"]

logger = logging.getLogger("yamltrace.checkpoint")

# The keyword arguments of `from_pretrained` that say where a Hub checkpoint comes from.
HUB_OPTIONS = ("revision", "cache_dir", "local_files_only", "token", "subfolder")

# Files a yamltrace model's snapshot needs: config, weights (single, sharded, or torch), the spec.
# The spec's base files (`extends`) are fetched after it, one by one, as its chain names them.
_SNAPSHOT_FILES = ["config.json", "*.safetensors", "*.index.json", "pytorch_model*.bin", SPEC_FILE]

_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def hub_options(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The Hub options among `from_pretrained`'s keyword arguments (they stay in `kwargs`)."""
    return {name: kwargs[name] for name in HUB_OPTIONS if kwargs.get(name) is not None}


def is_hub_id(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names a Hub repository rather than a local folder: not an existing path, and
    `name` or `org/name` (a path like `./ckpt`, `/abs/ckpt` or `a/b/c` is always local)."""
    return isinstance(path, str) and not os.path.exists(path) and _REPO_ID.fullmatch(path) is not None


def _hub() -> Any:
    try:
        import huggingface_hub
    except ModuleNotFoundError as e:
        raise ImportError(
            "Loading a checkpoint by its Hub id needs huggingface_hub: pip install 'yamltrace[hub]' (or pass a local folder).",
            name="huggingface_hub",
        ) from e
    return huggingface_hub


def _offline(hub: Any, options: Mapping[str, Any]) -> bool:
    return bool(options.get("local_files_only")) or bool(hub.is_offline_mode())


def hub_spec_file(repo_id: str, filename: str, options: Mapping[str, Any]) -> Path | None:
    """The repository's spec file (downloaded or cached), or None when the repository has none."""
    hub = _hub()
    subfolder = options.get("subfolder")
    where = f"{repo_id}@{options.get('revision') or 'main'}"
    if _offline(hub, options):
        cached = hub.try_to_load_from_cache(
            repo_id,
            f"{subfolder}/{filename}" if subfolder else filename,
            cache_dir=options.get("cache_dir"),
            revision=options.get("revision"),
        )
        if isinstance(cached, str):
            return Path(cached)
        if cached is hub._CACHED_NO_EXIST:
            logger.debug("%s has no %s: loading without a spec.", where, filename)
        else:
            logger.warning(
                "%s: %s is not in the local cache and the Hub is offline, so the model loads without the spec "
                "the repository may ship; load it once online (or download %s) to use it.",
                where,
                filename,
                filename,
            )
        return None
    try:
        path = Path(_download(hub, repo_id, filename, options))
    except _absent() as e:
        if isinstance(e, _unreachable()):  # the Hub could not be reached: not an answer
            raise
        logger.debug("%s has no %s: loading without a spec.", where, filename)
        return None
    _download_spec_files(hub, repo_id, path, options)
    return path


def _absent() -> type[Exception]:
    from huggingface_hub.errors import EntryNotFoundError

    return EntryNotFoundError


def _unreachable() -> type[Exception]:
    from huggingface_hub.errors import LocalEntryNotFoundError

    return LocalEntryNotFoundError


def _download(hub: Any, repo_id: str, filename: str, options: Mapping[str, Any]) -> str:
    return hub.hf_hub_download(  # type: ignore[no-any-return]
        repo_id,
        filename,
        subfolder=options.get("subfolder"),
        revision=options.get("revision"),
        cache_dir=options.get("cache_dir"),
        token=options.get("token"),
    )


def _download_beside(
    hub: Any, repo_id: str, spec_file: Path, name: str, what: str, max_bytes: int, options: Mapping[str, Any]
) -> None:
    """Download `name` (a `/` path relative to the spec's folder, already checked to stay inside it) into
    the spec's snapshot, unless it is there: at most `max_bytes` (its size asked of the Hub first, so
    a larger file is never fetched); a file the repository lacks is left for the loader to report."""
    if os.path.lexists(spec_file.parent / name):
        return
    pinned = _pinned(spec_file, options)
    url = hub.hf_hub_url(repo_id, name, subfolder=pinned.get("subfolder"), revision=pinned.get("revision"))
    try:
        size = hub.get_hf_file_metadata(url, token=pinned.get("token")).size
        if size is not None and size > max_bytes:
            raise FolderError(
                f"{repo_id}@{pinned.get('revision') or 'main'}: the {what} {name} is {size:,} bytes on the Hub, over the "
                f"{max_bytes:,} bytes allowed for it; it was not downloaded: make it smaller"
            )
        _download(hub, repo_id, name, pinned)
    except _absent() as e:
        if isinstance(e, _unreachable()):
            raise


def _pinned(spec_file: Path, options: Mapping[str, Any]) -> Mapping[str, Any]:
    """`options` at the commit of the snapshot holding `spec_file` (`.../snapshots/COMMIT/...`), so the
    files beside the spec come from its commit even if the branch moved since."""
    parts = spec_file.parts
    for i in range(1, len(parts) - 2):
        if parts[i] == "snapshots" and parts[i - 1].startswith("models--"):
            return {**options, "revision": parts[i + 1]}
    return options


def _download_spec_files(hub: Any, repo_id: str, spec_file: Path, options: Mapping[str, Any]) -> None:
    """Download the base files the spec `extends` (each only once the reader has checked its name: inside
    the spec's folder, the chain not too long, no cycle; a `builtin:` base needs none), then the tensor
    files its and its bases' interventions read, beside the file naming each. A problem with the chain
    is the reader's located SpecError at `$.extends`; a spec that does not parse or validate downloads
    no tensor file, nor does a tensor file name that is not a bare file name: loading reports their problems."""
    from ..spec import validate_spec
    from ..spec._interventions import tensor_file_names
    from ..spec._limits import MAX_TENSOR_FILE_BYTES
    from ..spec._reader import read_spec_document

    def fetch_base(name: str, left: int) -> None:
        _download_beside(hub, repo_id, spec_file, name, "base spec", left, options)

    try:
        document = read_spec_document(spec_file, fetch=fetch_base)
    except SpecError as e:
        if all(issue.json_path == "$.extends" for issue in e.issues):
            raise  # a base refused or not fetched: said here, where it is known why
        return  # any other problem of the files: the load reports it, with every other one
    try:
        names = tensor_file_names(validate_spec(document))
    except SpecError:
        return
    root = names_folder(spec_file)
    for folder, name in names:
        relative = os.path.relpath(folder, root)
        try:
            bare_name(name, what="tensor file")
        except FolderError:
            continue  # never asked of the Hub: the loader refuses the name, located
        if relative.split(os.sep)[0] != os.pardir:
            name = posixpath.normpath(posixpath.join(relative.replace(os.sep, "/"), name))
            _download_beside(hub, repo_id, spec_file, name, "tensor file", MAX_TENSOR_FILE_BYTES, options)


def hub_snapshot(repo_id: str, options: Mapping[str, Any]) -> Path:
    """The local folder of a yamltrace model's checkpoint on the Hub (config, weights, spec)."""
    hub = _hub()
    subfolder = options.get("subfolder")
    patterns = [f"{subfolder}/{p}" for p in _SNAPSHOT_FILES] if subfolder else _SNAPSHOT_FILES
    folder = hub.snapshot_download(
        repo_id,
        revision=options.get("revision"),
        cache_dir=options.get("cache_dir"),
        local_files_only=_offline(hub, options),
        token=options.get("token"),
        allow_patterns=patterns,
    )
    directory = Path(folder) / subfolder if subfolder else Path(folder)
    if not _offline(hub, options) and (directory / SPEC_FILE).is_file():
        _download_spec_files(hub, repo_id, directory / SPEC_FILE, options)
    return directory
