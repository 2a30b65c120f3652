"""What every subcommand shares: exit statuses, argument types, and the model class `--model` names."""

from __future__ import annotations

import argparse
import importlib
import json
import os
from pathlib import Path
from typing import Any

from .._lazy import missing_extra_message

__all__ = [
    "EXIT_OK",
    "EXIT_INVALID",
    "EXIT_USAGE",
    "EXIT_BROKEN_PIPE",
    "checkpoint_class",
    "import_class",
    "import_object",
    "model_config",
    "positive_int",
]

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
# stdout was closed by its reader: 128 + SIGPIPE, the status a shell shows for a tool stopped by it.
EXIT_BROKEN_PIPE = 141


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


class _Usage(Exception):
    """A combination of arguments that cannot work: printed, exit status 2."""


def import_object(reference: str, option: str = "--model") -> Any:
    """`pkg.module:name` -> the object (importing the module: naming it on the command line is consent).

    The module is found as `python -m` finds it: the working directory comes first on `sys.path`
    (`main` puts it there for the console script too).
    """
    module_name, sep, qualname = reference.partition(":")
    if not sep or not module_name or not qualname:
        raise _Usage(f"{option} {reference!r}: write it as package.module:ClassName.")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as e:
        if missing_extra_message(e, "") is not None:
            raise  # torch itself is missing: `main` names the extra to install
        raise _Usage(f"{option} {reference!r}: cannot import {module_name} ({e}).") from e
    for part in qualname.split("."):
        if not hasattr(value, part):
            raise _Usage(f"{option} {reference!r}: {module_name} has no {qualname}.")
        value = getattr(value, part)
    return value


def import_class(reference: str) -> type:
    """`pkg.module:Class` -> the class (see `import_object`)."""
    value = import_object(reference)
    if not isinstance(value, type):
        raise _Usage(f"--model {reference!r} is not a class.")
    return value


def checkpoint_class(directory: Path) -> type | None:
    """The transformers class a checkpoint's `config.json` names in `architectures` (its first entry), or None
    when it names none; `_Usage` when it names one transformers does not have."""
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise _Usage(f"--checkpoint {directory}: no config.json there")
    try:
        architectures = json.loads(config_file.read_text(encoding="utf-8")).get("architectures") or []
    except (ValueError, AttributeError) as e:
        raise _Usage(f"--checkpoint {directory}: config.json is not a JSON object ({e})") from None
    if not architectures:
        return None
    import transformers

    cls = getattr(transformers, str(architectures[0]), None)
    if not isinstance(cls, type):
        raise _Usage(
            f"--checkpoint {directory}: config.json names architecture {architectures[0]!r}, which transformers "
            f"{transformers.__version__} does not have; add --model pkg.mod:Class"
        )
    return cls


def model_config(cls: type, config_file: str | os.PathLike[str] | None) -> Any:
    """The config to build `cls` with: its config class's default, or read from `config_file` (yamltrace's
    `Config.load`, else transformers' `from_json_file`)."""
    config_class = getattr(cls, "config_class", None)
    if config_class is None:
        raise _Usage(f"{cls.__name__} has no config_class to build it with; pass a class that names one.")
    if config_file is None:
        return config_class()
    load = getattr(config_class, "load", None)
    return load(config_file) if callable(load) else config_class.from_json_file(str(config_file))
