"""The position selector's one-op paths (`narrow_copy`, `index_select` with a cached index) against
the exact general path: same values, same errors, and a result that owns only the selected elements."""

from __future__ import annotations

import re

import pytest
import torch

from yamltrace.engine import OutputRecorder
from yamltrace.engine._collector import transform_of
from yamltrace._recorder import normalize_positions
from yamltrace.engine._positions import PositionError, positions_selector
from yamltrace.examples.tiny import TinyDecoderLayer

# Fixed-length slices (the one-op path), slices whose length depends on the sequence (the general
# path), single positions and lists (index_select), including ones that do not fit short sequences.
POSITIONS = [
    [-1],
    [0],
    [3],
    [-3],
    [-9],
    [9],
    "-1:",
    "-8:",
    "-3:-1",
    ":4",
    "2:6",
    "0:1",
    "9:",
    ":",
    "2:",
    ":-2",
    "-5:3",
    "1:-1",
    "0:7:3",
    "::2",
    "-4::2",
    "3:3",
    "-2:-5",
    [0, -1],
    [2, 2, 0],
    [-7, 6],
    [0, 9],
    [-9, 0],
]
LENGTHS = [1, 3, 7, 9]


def reference(value: torch.Tensor, positions, seq_dim: int) -> torch.Tensor | None:
    """What Python indexing keeps: a slice is clipped to the sequence; None for an empty selection
    or a position out of range."""
    written = normalize_positions(positions)
    if isinstance(written, str):
        index: slice | list[int] = slice(*[int(p) if p else None for p in written.split(":")])
    elif len(written) == 1:
        index = slice(written[0], None if written[0] == -1 else written[0] + 1)
    else:
        index = list(written)
    n = value.shape[seq_dim]
    if isinstance(index, list) and not all(-n <= i < n for i in index):
        return None
    kept = value[(slice(None),) * (seq_dim % value.dim()) + (index,)]
    return None if kept.shape[seq_dim] == 0 else kept


def owns_only_its_elements(value: torch.Tensor) -> bool:
    return value._base is None and value.untyped_storage().nbytes() == value.numel() * value.element_size()


@pytest.mark.parametrize("positions", POSITIONS, ids=str)
@pytest.mark.parametrize("seq_dim", [1, -2, 2])
@pytest.mark.parametrize(("copy", "grad"), [(True, False), (True, True), (False, False)], ids=["copy", "copy-grad", "view"])
def test_the_selector_keeps_what_python_indexing_keeps(positions, seq_dim, copy, grad) -> None:
    select = positions_selector(normalize_positions(positions), seq_dim, copy=copy)
    for length in LENGTHS:
        shape = [2, 3, 4]
        shape[seq_dim] = length
        value = torch.randn(shape, requires_grad=grad)
        expected = reference(value, positions, seq_dim)
        if expected is None:
            with pytest.raises(PositionError, match=rf"a sequence of {length} \(dim {seq_dim} of shape"):
                select(value)
            continue
        kept = select(value)
        assert torch.equal(kept, expected), (positions, length)
        assert kept.requires_grad == grad
        if copy:
            assert owns_only_its_elements(kept)


@pytest.mark.parametrize("positions", [[-1], "-8:", ":4", [0, -1], "0:7:3"], ids=str)
def test_a_tensor_without_the_sequence_dim_is_the_same_located_error(positions) -> None:
    select = positions_selector(normalize_positions(positions), 3)
    written = normalize_positions(positions)
    shown = written if isinstance(written, str) else list(written)
    message = re.escape(f"positions {shown!r} select along dim 3, but the tensor has shape (2, 5, 4)")
    with pytest.raises(PositionError, match=message):
        select(torch.randn(2, 5, 4))
    with pytest.raises(PositionError, match=r"but the tensor has shape \(\)"):
        select(torch.tensor(1.0))


@pytest.mark.parametrize("positions", [[-1], "-8:", [0, -1], "::2"], ids=str)
def test_values_other_than_tensors_pass_unchanged(positions) -> None:
    select = positions_selector(normalize_positions(positions), 1)
    marker = object()
    assert select(None) is None
    assert select(marker) is marker


@pytest.mark.parametrize("positions", [[-1], [-3], "-2:", "1:3", [0, -1], [-1, -1]], ids=str)
def test_gradients_flow_to_the_selected_positions(positions) -> None:
    # narrow_copy's backward zeroes the gradient of a negative start (torch 2.13); the selector
    # makes the start absolute, so the gradient lands where the selection came from.
    value = torch.randn(2, 5, 3, requires_grad=True)
    kept = positions_selector(normalize_positions(positions), 1)(value)
    weights = torch.randn(kept.shape)
    (kept * weights).sum().backward()
    expected_value = value.detach().clone().requires_grad_(True)
    (reference(expected_value, positions, 1) * weights).sum().backward()
    assert torch.equal(value.grad, expected_value.grad)
    assert value.grad.abs().sum() > 0


def test_a_list_index_built_under_inference_mode_serves_a_later_forward_with_autograd() -> None:
    select = positions_selector((0, -1), 1)
    with torch.inference_mode():
        assert torch.equal(select(torch.arange(6.0).reshape(1, 6)), torch.tensor([[0.0, 5.0]]))
    value = torch.arange(6.0).reshape(1, 6).requires_grad_(True)
    select(value).sum().backward()
    assert torch.equal(value.grad, torch.tensor([[1.0, 0, 0, 0, 0, 1.0]]))


def test_a_list_selector_follows_the_sequence_length_and_stays_bounded() -> None:
    select = positions_selector((0, -1), 1)
    for length in range(2, 40):
        kept = select(torch.arange(float(length)).reshape(1, length))
        assert kept.tolist() == [[0.0, length - 1.0]]


def test_without_copy_a_slice_may_be_a_view_and_a_list_is_marked_as_copying() -> None:
    value = torch.randn(2, 7, 4)
    view = positions_selector("-3:", 1, copy=False)
    assert view(value)._base is value and not view.copies
    assert positions_selector("-3:", 1).copies
    assert positions_selector((0, 2), 1, copy=False).copies


@pytest.mark.parametrize(
    "fields",
    [{}, {"detach": True}, {"dtype": torch.float64}, {"to": "cpu"}, {"detach": True, "to": "cpu", "dtype": torch.float64}],
    ids=str,
)
@pytest.mark.parametrize("positions", [[-1], "-8:", [0, -1], "::2"], ids=str)
def test_recorder_transforms_copy_once_and_keep_only_the_selection(fields, positions) -> None:
    transform = transform_of(OutputRecorder(TinyDecoderLayer, positions=positions, **fields))
    value = torch.randn(2, 9, 4, requires_grad=True)
    kept = transform(value)
    expected = reference(value.detach(), positions, 1).to(dtype=fields.get("dtype"))
    assert torch.equal(kept, expected)
    assert owns_only_its_elements(kept)
    assert kept.requires_grad == (not fields.get("detach", False))
    assert transform(None) is None
