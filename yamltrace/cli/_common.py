"""What every subcommand shares: exit statuses and argument types."""

from __future__ import annotations

import argparse

__all__ = ["EXIT_OK", "EXIT_INVALID", "EXIT_USAGE", "positive_int"]

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of bytes")
    return value
