"""What every subcommand shares: exit statuses and argument types."""

from __future__ import annotations

import argparse

__all__ = ["EXIT_OK", "EXIT_INVALID", "EXIT_USAGE", "EXIT_BROKEN_PIPE", "positive_int"]

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
