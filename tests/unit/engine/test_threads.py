"""Threads sharing one model each get exactly their own captures (REFERENCE §1 rule 8).

Every thread requests different keys or flags on its own input; results are compared with
`torch.equal` to the same requests run single-threaded. A barrier makes the forwards overlap, so
hooks of several sessions sit on the same modules at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch

from helpers import assert_same, hook_count
from yamltrace.engine import release_hooks
from yamltrace.examples.tiny import TinyModel
from yamltrace.tracing import trace

THREADS = 8
ROUNDS = 3

# Per thread: capture_outputs flags, and the keys a trace asks for.
FLAGS: list[dict[str, Any]] = [
    {"output_hidden_states": True},
    {"output_attentions": True},
    {"output_hidden_states": True, "output_attentions": True},
    {"output_hidden_states": [0, -1]},
    {"output_hidden_states": 2},
    {},
    {"output_hidden_states": [1], "output_attentions": True},
    {"output_attentions": 1, "output_hidden_states": 0},
]
TRACE_KEYS = [["hidden_states"], ["attentions"], None, ["attentions", "hidden_states"]] * 2

Result = dict[str, tuple]


def no_sync() -> None:
    pass


def decorated_run(model: TinyModel, ids: torch.Tensor, i: int, sync: Callable[[], None] = no_sync) -> Result:
    sync()
    out = model(ids, **FLAGS[i])
    return {key: out[key] for key in ("hidden_states", "attentions") if key in out}


def traced_run(model: TinyModel, ids: torch.Tensor, i: int, sync: Callable[[], None] = no_sync) -> Result:
    with trace(model, outputs=TRACE_KEYS[i]) as captures:
        sync()  # inside the block: every thread's trace hooks are on the model before anyone runs
        model(ids)
        model(ids.flip(1))
    return {key: captures[key] for key in captures} | {"steps": (len(captures.steps),)}


def mixed_run(model: TinyModel, ids: torch.Tensor, i: int, sync: Callable[[], None] = no_sync) -> Result:
    return (traced_run if i % 2 else decorated_run)(model, ids, i, sync)


@pytest.mark.parametrize("run", [decorated_run, traced_run, mixed_run], ids=["capture_outputs", "trace", "mixed"])
def test_each_thread_gets_exactly_its_own_captures(tiny: TinyModel, run: Callable[..., Result]) -> None:
    generator = torch.Generator().manual_seed(5)
    inputs = [torch.randint(0, 128, (2, 6), generator=generator) for _ in range(THREADS)]
    with torch.no_grad():
        expected = [run(tiny, inputs[i], i) for i in range(THREADS)]
    assert len({len(e.get("hidden_states", ())) for e in expected}) > 1  # the requests really differ

    barrier = threading.Barrier(THREADS, timeout=300)
    results: dict[int, list[Result]] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            with torch.no_grad():
                results[i] = [run(tiny, inputs[i], i, barrier.wait) for _ in range(ROUNDS)]
        except BaseException as error:  # asserted on below, after every thread has stopped
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not [t.name for t in threads if t.is_alive()], "threads still running after 300 s"
    assert not errors, errors
    assert sorted(results) == list(range(THREADS))
    for i in range(THREADS):
        for result in results[i]:
            assert_same(result, expected[i])
    release_hooks(tiny)  # a decorated model holds its last capturing forward's hooks (docs/capture.md)
    assert hook_count(tiny) == 0
