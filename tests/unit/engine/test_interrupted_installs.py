"""A KeyboardInterrupt at any line of yamltrace while something is installed leaves either a handle
that removes everything, or nothing installed: `trace` and `intervene` blocks, `apply_interventions`,
a decorated forward's held hooks and their release."""

from __future__ import annotations

import linecache
import os
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch

import yamltrace
from helpers import hook_count
from yamltrace.examples.tiny import TinyConfig, TinyDecoderLayer, TinyModel

# The blocks here are entered and left without a call of the model, on purpose (the warning that says so is tested in test_never_ran).
pytestmark = pytest.mark.filterwarnings("ignore::yamltrace.NeverRanWarning")

_PACKAGE = os.path.dirname(yamltrace.__file__) + os.sep
ZERO_NORM = {"yamltrace": 1, "interventions": {"z": {"class_name": "norm", "zero": True}}}
EDIT_LAST = {"yamltrace": 1, "interventions": {"a": {"class_name": "mlp", "positions": "last", "layers": [0], "add": 1.0}}}


class _Interrupt:
    """A trace function raising KeyboardInterrupt at the `at`-th line yamltrace runs (then off).

    Lines that only open or close a block (`with ...:`, `try:`, `finally:`, `except ...:`) are not
    counted: a trace function's exception there skips the block's own cleanup (the lock a `with`
    holds stays held), which no signal can do.
    """

    def __init__(self, at: int, within: tuple[str, ...] = ("",)) -> None:
        self.at, self.seen, self.fired, self.where = at, 0, False, ""
        self.within = tuple(_PACKAGE + name for name in within)  # the files counted (all of yamltrace's)

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        if not frame.f_code.co_filename.startswith(self.within):
            return None
        return self._line

    def _line(self, frame: Any, event: str, arg: Any) -> Any:
        if event == "line" and not self.fired and not _opens_or_closes(frame):
            self.seen += 1
            if self.seen == self.at:
                self.fired, self.where = True, f"{frame.f_code.co_filename}:{frame.f_lineno}"
                raise KeyboardInterrupt
        return self._line


def _opens_or_closes(frame: Any) -> bool:
    text = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    return text.startswith(("with ", "try:", "finally:", "except")) or text == "else:"


def _interrupted(action: Callable[[], Any], at: int, within: tuple[str, ...] = ("",)) -> tuple[str, Any]:
    """Run `action` with an interrupt at line `at` of the files `within`: (where it fired, "" if not;
    what `action` returned)."""
    tracer = _Interrupt(at, within)
    sys.settrace(tracer)
    try:
        result = action()
    except KeyboardInterrupt:
        return tracer.where, None
    finally:
        sys.settrace(None)
    return tracer.where, result


@pytest.fixture
def model() -> TinyModel:
    torch.manual_seed(0)
    return TinyModel(TinyConfig(num_hidden_layers=2)).eval()


IDS = torch.tensor([[3, 5, 7, 9]])


def _lines(action: Callable[[], Any], finish: Callable[[Any], None], within: tuple[str, ...] = ("",)) -> int:
    """How many lines of yamltrace (of the files `within`) `action` runs."""
    tracer = _Interrupt(0, within)
    sys.settrace(tracer)
    try:
        result = action()
    finally:
        sys.settrace(None)
    finish(result)
    return tracer.seen


def _every_line(
    model: TinyModel, action: Callable[[], Any], finish: Callable[[Any], None], within: tuple[str, ...] = ("",)
) -> int:
    """Interrupt `action` at each of its last 400 lines (where it installs, after planning) and at 40
    lines spread over the rest; after each, the model must carry nothing yamltrace installed and
    compute its plain output (once `finish` undid a completed action). Returns how many lines it runs."""
    with torch.no_grad():
        plain = model(IDS).last_hidden_state
    _lines(action, finish, within)  # (the first run fills the plan cache: later ones are shorter)
    total = _lines(action, finish, within)
    tail = max(1, total - 400)
    for at in sorted({*range(1, tail, max(1, tail // 40)), *range(tail, total + 1)}):
        fired, result = _interrupted(action, at, within)
        assert fired, f"line {at} of {total} was not reached"
        if result is not None:  # (the line ran in a weak-reference callback, whose exception Python ignores)
            finish(result)
        yamltrace.release_hooks(model)
        assert hook_count(model) == 0, f"hooks left after an interrupt at line {at} of {total} ({fired})"
        with torch.no_grad():
            assert torch.equal(model(IDS).last_hidden_state, plain), f"an edit left after an interrupt at line {at}"
    return total


def test_a_trace_block_start(model: TinyModel) -> None:
    def action() -> Any:
        block = yamltrace.trace(model, {"hidden_states": TinyDecoderLayer, "norms": "norm"})
        block.__enter__()
        return block

    assert _every_line(model, action, lambda block: block.__exit__(None, None, None)) > 20


@pytest.mark.parametrize("spec", [ZERO_NORM, EDIT_LAST], ids=["zero", "positions-layers"])
def test_an_intervene_block_start(model: TinyModel, spec: dict) -> None:
    def action() -> Any:
        block = yamltrace.intervene(model, spec)
        block.__enter__()
        return block

    assert _every_line(model, action, lambda block: block.__exit__(None, None, None)) > 20


@pytest.mark.parametrize("spec", [ZERO_NORM, EDIT_LAST], ids=["zero", "positions-layers"])
def test_apply_interventions(model: TinyModel, spec: dict) -> None:
    assert _every_line(model, lambda: yamltrace.apply_interventions(model, spec), lambda handle: handle.remove()) > 20


def test_a_decorated_forwards_hold_and_release(model: TinyModel) -> None:
    def capturing() -> Any:
        with torch.no_grad():
            return model(IDS, output_hidden_states=True)

    def release() -> Any:
        with torch.no_grad():
            return model(IDS)

    def finish(_: Any) -> None:
        yamltrace.release_hooks(model)

    # Where hooks are held and released (the engine's modules; not the end of the forward's session).
    held = ("engine/_held.py", "engine/_intercept.py", "engine/_collector.py", "engine/_plan.py")
    assert _every_line(model, capturing, finish, held) > 20
    # The release of held hooks by a forward without capture, interrupted anywhere.
    capturing()
    total = _lines(release, lambda _: None, held)
    for at in range(1, total + 1):
        capturing()
        assert hook_count(model) > 0
        fired, _ = _interrupted(release, at, held)
        assert fired
        yamltrace.release_hooks(model)  # (what the next forward without capture does)
        assert hook_count(model) == 0, f"hooks left after an interrupted release at line {at} ({fired})"
    assert total > 3
