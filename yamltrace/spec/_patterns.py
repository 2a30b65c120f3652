"""Patch keys as linear-time patterns: compiled with RE2, vetted when a spec is validated.

A patch key is an exact class name or a regular expression tried with `search` (transformers' rule).
Python's `re` backtracks, so a key such as `^(\\w+\\w?)+!$` takes minutes on a 30-character class name;
a spec that arrives with a checkpoint must not be able to do that. Patterns are therefore matched with
RE2 (`google-re2`), whose matching time is linear in the class name's length. A spec's key must be
accepted by both RE2 and Python's `re` (so it means the same in both), be at most `MAX_PATTERN_CHARS`
long, and compile within RE2's memory budget; what RE2 lacks (backreferences, lookarounds, `\\Z`) is
refused with the reason. For ordinary patterns the result equals `re.search`; RE2's `\\w`, `\\d`, `\\s`
and `\\b` are ASCII-only, which class names almost always are.
"""

from __future__ import annotations

import functools
import logging
import re
from typing import Any, Protocol

import re2

from ..errors import PatternError

__all__ = ["MAX_PATTERN_CHARS", "Pattern", "PatternError", "compile_pattern", "key_matcher"]

logger = logging.getLogger("yamltrace")

MAX_PATTERN_CHARS = 256  # characters of one patch key
_MAX_MEMORY = 1 << 20  # bytes RE2 may use for one compiled pattern


class Pattern(Protocol):
    def search(self, text: str) -> Any: ...


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # RE2 would print each refusal to stderr
    options.max_mem = _MAX_MEMORY
    return options


@functools.lru_cache(maxsize=1024)
def compile_pattern(pattern: str) -> Pattern:
    """The linear-time matcher for `pattern`; `PatternError` for a key a spec may not use."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(
            f"a patch key of {len(pattern)} characters is over the limit of {MAX_PATTERN_CHARS} (MAX_PATTERN_CHARS)"
        )
    try:
        re.compile(pattern)
    except (re.error, OverflowError, RecursionError, ValueError) as e:
        raise PatternError(f"{pattern!r} is not a valid regular expression: {e}") from None
    try:
        compiled: Pattern = re2.compile(pattern, _options())
    except re2.error as e:
        reason = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        hint = "; write $ for the end" if "\\Z" in pattern else ""
        raise PatternError(
            f"{pattern!r} needs a backtracking regex engine ({reason}); a spec's patch keys are matched in linear "
            f"time, without backreferences, lookarounds or \\Z{hint}"
        ) from None
    if _bounded_repeat_overflows(pattern):
        raise PatternError(f"{pattern!r} repeats more than 1000 times; RE2 allows at most {{1000}}")
    return compiled


@functools.lru_cache(maxsize=1024)
def key_matcher(key: str) -> Pattern | None:
    """How a patch key is tried as a pattern: RE2 when it can run it, else None (the key then selects
    its exact class name only, as an invalid regex does in transformers).

    A key RE2 refuses but Python's `re` accepts (a backreference or lookaround) can only come from
    Python code (`register_patch_mapping`, a mapping passed in): a spec's keys are vetted by
    `compile_pattern` when it is validated. Such a key runs on `re`, as transformers runs it.
    """
    try:
        return compile_pattern(key)
    except PatternError:
        pass
    try:
        return re.compile(key)
    except (re.error, OverflowError, RecursionError, ValueError) as error:
        logger.warning("Patch pattern %r is not a valid regex (%s); it matches exact class names only.", key[:100], error)
        return None


_REPEAT = re.compile(r"(?<!\\)\{(\d+)(?:,(\d*))?\}")


def _bounded_repeat_overflows(pattern: str) -> bool:
    """Whether a `{n}` / `{n,m}` count exceeds 1000 (the RE2 wrapper would wrap a 32-bit overflow silently)."""
    return any(int(n) > 1000 or (m and int(m) > 1000) for n, m in _REPEAT.findall(pattern))
