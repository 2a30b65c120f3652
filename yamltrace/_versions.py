"""Which transformers release's semantics yamltrace follows: the installed one, else the newest supported.

The version is read from the installed distribution's metadata (`importlib.metadata`), so asking
never imports transformers (nor torch). Each rule that changed between supported releases has one
named predicate here, and the code that follows the rule calls it at the moment it applies the
rule; docs/semantics.md ("Differences between transformers versions") lists them.

An installed release past the newest verified one (a newer minor or major release than the last of
`VERIFIED`) is followed with that one's semantics, with one `UnverifiedReleaseWarning` (a
`UserWarning`), given when the version is first read (the first use that depends on it) and located
at the first caller outside yamltrace (the user's line, also when that line is an import), naming the
verified releases and what to do. The command line prints it as one line (`yamltrace.cli`).
"""

from __future__ import annotations

import os
import re
import sys
import types
import warnings
from importlib import metadata

from .errors import UnverifiedReleaseWarning

__all__ = [
    "NEWEST_SUPPORTED",
    "VERIFIED",
    "UnverifiedReleaseWarning",
    "cache_named_cache",
    "declared_cache_fields_kept",
    "parse_version",
    "transformers_version",
    "use_cache_off_needs_grad",
]

Version = tuple[int, int, int]

# The transformers releases the tests verify (pyproject's `transformers` range, patch releases included).
VERIFIED: tuple[Version, ...] = ((5, 23, 0), (5, 24, 0), (5, 25, 0))
# The newest transformers release whose semantics yamltrace follows; also what it follows without transformers.
NEWEST_SUPPORTED: Version = VERIFIED[-1]
# transformers 5.24.0: outputs and forwards name the cache `cache` (`past_key_values` / `cache_params` deprecated aliases).
CACHE_NAMED_CACHE: Version = (5, 24, 0)
# transformers 5.24.0: gradient checkpointing forces `use_cache` off only while gradients are enabled.
USE_CACHE_OFF_NEEDS_GRAD: Version = (5, 24, 0)
# transformers 5.25.0: an output class that declares `past_key_values` / `cache_params` as fields keeps them.
DECLARED_CACHE_FIELDS_KEPT: Version = (5, 25, 0)

_RELEASE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(text: str) -> Version:
    """`(major, minor, micro)` of a version string such as "5.24.0", "5.24.0.dev0" or "5.24"."""
    found = _RELEASE.match(text.strip())
    if found is None:
        raise ValueError(f"not a transformers version: {text!r}")
    return int(found[1]), int(found[2]), int(found[3] or 0)


_followed: Version | None = None  # read once; a plain global, which `torch.compile` reads without tracing the reading


def transformers_version() -> Version:
    """The installed transformers release (read once), or `NEWEST_SUPPORTED` when transformers is not installed."""
    global _followed
    if _followed is None:
        try:
            installed = parse_version(metadata.version("transformers"))
        except (metadata.PackageNotFoundError, ValueError):
            installed = NEWEST_SUPPORTED
        if installed[:2] > NEWEST_SUPPORTED[:2]:
            _warn_unverified(installed)
        _followed = installed
    return _followed


_PACKAGE = os.path.dirname(__file__) + os.sep  # yamltrace's own files, named as frames name them (not resolved)


def _outside_stacklevel() -> int:
    """The `stacklevel` for `warnings.warn` in the function calling this one that points at the first frame
    outside yamltrace. The import system's frames (between an `import` line and the module it runs) are
    stepped over without counting, as `warnings` steps over them itself."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        while frame.f_back is not None and _importing(frame):
            frame = frame.f_back
        level += 1
    return level


def _importing(frame: types.FrameType) -> bool:
    """Whether `frame` runs the import system (`warnings` skips such frames when it counts a stacklevel)."""
    name = frame.f_code.co_filename
    return "importlib" in name and "_bootstrap" in name


def _warn_unverified(installed: Version) -> None:
    """The one warning for a transformers release newer than every verified one, at the caller's line."""
    verified = ", ".join(".".join(map(str, v)) for v in VERIFIED)
    newest = ".".join(map(str, NEWEST_SUPPORTED))
    warnings.warn(
        f"transformers {'.'.join(map(str, installed))} is newer than the releases yamltrace is verified with "
        f"({verified}): yamltrace follows {newest}'s semantics for it (docs/semantics.md, 'Differences between "
        f"transformers versions'); check your captures against this release, or install transformers<"
        f"{NEWEST_SUPPORTED[0]}.{NEWEST_SUPPORTED[1] + 1}.",
        UnverifiedReleaseWarning,
        stacklevel=_outside_stacklevel(),
    )


def cache_named_cache() -> bool:
    """Whether the model outputs' cache field is `cache`, with `past_key_values` / `cache_params` as
    deprecated aliases (transformers 5.24.0 on); before, the field is `past_key_values`."""
    return transformers_version() >= CACHE_NAMED_CACHE


def use_cache_off_needs_grad() -> bool:
    """Whether `merge_with_config_defaults` forces `use_cache` off under gradient checkpointing only while
    `torch.is_grad_enabled()` (transformers 5.24.0 on); before, also under `torch.no_grad()`."""
    return transformers_version() >= USE_CACHE_OFF_NEEDS_GRAD


def declared_cache_fields_kept() -> bool:
    """Whether an output class that declares `past_key_values` / `cache_params` as fields keeps its own
    `__init__` and those keys, no rename to `cache` (transformers 5.25.0 on); before, they are renamed."""
    return transformers_version() >= DECLARED_CACHE_FIELDS_KEPT
