"""The padding watch of a `trace` run kept for its plan (`_padding.PaddingWatch`, a frame on the traced
module kept with the run's other frames): each block has its own warning state (one warning per block,
per `extract` run under `shared_warning`), `positions: last` follows each block's mask, and what a
block on a kept run records and warns is what a fresh plan's block does."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from helpers import assert_same
from torch import nn

from yamltrace import OutputRecorder
from yamltrace.engine import forget_plans, shared_warning
from yamltrace.examples.tiny import TinyDecoderLayer
from yamltrace.tracing import trace

LITERAL = {"last": OutputRecorder(TinyDecoderLayer, index=0, positions=[-1])}
AWARE = {"last": OutputRecorder(TinyDecoderLayer, index=0, positions="last"), "full": OutputRecorder(TinyDecoderLayer, index=0)}


def _mask(lengths: tuple[int, ...], seq: int = 5) -> torch.Tensor:
    """Right padding: each row's first `length` positions are real."""
    return (torch.arange(seq)[None] < torch.tensor(lengths)[:, None]).long()


PADDED, UNPADDED = _mask((5, 3)), _mask((5, 5))


def _ids(rows: int = 2) -> torch.Tensor:
    return torch.randint(0, 128, (rows, 5), generator=torch.Generator().manual_seed(0))


def _block(model: nn.Module, spec: Any, masks: list[torch.Tensor]) -> tuple[dict[str, Any], list[str]]:
    """One block with a forward per mask: its captures, and the padding warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad(), trace(model, spec) as captures:
            for mask in masks:
                model(_ids(), attention_mask=mask)
    found = [str(w.message) for w in caught if "padding" in str(w.message)]
    return {key: captures[key] for key in captures}, found


def _fresh(model: nn.Module, spec: Any, masks: list[torch.Tensor]) -> tuple[dict[str, Any], list[str]]:
    forget_plans(model)
    return _block(model, spec, masks)


def test_every_block_on_a_kept_run_warns_once_of_literal_positions_on_padding(model) -> None:
    first, warned = _block(model, LITERAL, [PADDED, PADDED])
    assert len(warned) == 1 and "rows [1]" in warned[0]
    second, again = _block(model, LITERAL, [PADDED, PADDED])  # the state of the first block does not carry over
    assert again == warned
    assert_same(second, first)
    fresh, fresh_warned = _fresh(model, LITERAL, [PADDED, PADDED])
    assert_same(second, fresh)
    assert again == fresh_warned


def test_a_block_on_a_kept_run_warns_after_one_that_did_not(model) -> None:
    assert _block(model, LITERAL, [UNPADDED])[1] == []
    second = _block(model, LITERAL, [UNPADDED, PADDED])
    assert len(second[1]) == 1
    fresh = _fresh(model, LITERAL, [UNPADDED, PADDED])
    assert_same(second[0], fresh[0])
    assert second[1] == fresh[1]


def test_blocks_share_one_warning_under_shared_warning_and_not_after_it(model) -> None:
    with shared_warning():
        found = [_block(model, LITERAL, [PADDED])[1] for _ in range(3)]
    assert [len(w) for w in found] == [1, 0, 0]  # one per `extract` run
    assert len(_block(model, LITERAL, [PADDED])[1]) == 1  # the run's own state again, not the shared one
    with shared_warning():
        assert len(_block(model, LITERAL, [PADDED])[1]) == 1  # a new shared state
    forget_plans(model)
    with shared_warning():
        assert [len(_block(model, LITERAL, [PADDED])[1]) for _ in range(2)] == [1, 0]


def test_positions_last_follow_each_blocks_mask_on_a_kept_run(model) -> None:
    first = _block(model, AWARE, [PADDED])[0]
    second, found = _block(model, AWARE, [_mask((2, 4))])
    assert found == []
    assert torch.equal(second["last"][0][:, 0], torch.stack([second["full"][0][0, 1], second["full"][0][1, 3]]))
    assert not torch.equal(second["last"][0], first["last"][0])
    fresh, fresh_found = _fresh(model, AWARE, [_mask((2, 4))])
    assert_same(second, fresh)
    assert fresh_found == []


def test_the_tied_last_hidden_state_keeps_each_rows_last_real_token_block_after_block(model) -> None:
    """The watch's call is published before the traced module's roles and ends after them: the tie at
    its exit still reads the call's mask (`positions: last`), on a kept run as on a fresh plan."""
    spec = {"hidden_states": OutputRecorder(TinyDecoderLayer, index=0, positions="last")}
    for mask in (PADDED, _mask((2, 4)), PADDED):
        with torch.no_grad(), trace(model, spec) as captures:
            final = model(_ids(), attention_mask=mask).last_hidden_state
        assert torch.equal(captures["hidden_states"][-1], final[torch.arange(2), mask.sum(1) - 1][:, None])
        assert_same(captures["hidden_states"], _fresh(model, spec, [mask])[0]["hidden_states"])


def test_a_padding_warning_raised_as_an_error_enters_no_step_and_the_next_block_records(model) -> None:
    # The literal check runs first in the traced module's frame: raising there leaves no step, scope or
    # recording behind, in this block or the next.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad(), trace(model, LITERAL) as captures:
            try:
                model(_ids(), attention_mask=PADDED)
            except UserWarning as raised:
                assert "padding" in str(raised)
            else:
                raise AssertionError("the literal position on padding did not warn")
            assert captures.steps == () and captures["last"] == ()
            model(_ids(), attention_mask=UNPADDED)
    assert len(captures.steps) == 1 and len(captures["last"]) == 3
    after, warned = _block(model, LITERAL, [UNPADDED])
    assert warned == [] and len(after["last"]) == 3
    assert_same(after, _fresh(model, LITERAL, [UNPADDED])[0])
