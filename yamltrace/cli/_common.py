"""What every subcommand shares: exit statuses, argument types, and the model class `--model` names."""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any

__all__ = ["EXIT_OK", "EXIT_INVALID", "EXIT_USAGE", "EXIT_BROKEN_PIPE", "import_class", "model_config", "positive_int"]

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


def import_class(reference: str) -> type:
    """`pkg.module:Class` -> the class (importing the module: naming it on the command line is consent)."""
    module_name, sep, qualname = reference.partition(":")
    if not sep or not module_name or not qualname:
        raise _Usage(f"--model {reference!r}: write it as package.module:ClassName.")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise _Usage(f"--model {reference!r}: cannot import {module_name} ({e}).") from e
    for part in qualname.split("."):
        if not hasattr(value, part):
            raise _Usage(f"--model {reference!r}: {module_name} has no {qualname}.")
        value = getattr(value, part)
    if not isinstance(value, type):
        raise _Usage(f"--model {reference!r} is not a class.")
    return value


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
