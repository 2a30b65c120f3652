"""Run `compare_target` over many classes in worker processes; no class can stop the sweep.

Each class runs under a time limit (SIGALRM in the worker; past a grace period the worker is killed).
A worker that dies (segfault, out of memory) or is killed is replaced and its class is recorded as
"crash" or "timeout". Workers are forked after transformers is imported, so each starts warm.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ._compare import Result, compare_target
from ._enumerate import Target

__all__ = ["run_all"]

GRACE_S = 30


class ClassTimeout(BaseException):
    """Raised in a worker when one class runs past its limit (a BaseException: nothing catches it)."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise ClassTimeout


def _worker(tasks: Any, results: Any, timeout_s: int) -> None:
    import torch

    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _on_alarm)
    while True:
        item = tasks.get()
        if item is None:
            return
        index, target = item
        results.put(("start", index, os.getpid()))
        signal.alarm(timeout_s)
        try:
            result = compare_target(target)
        except ClassTimeout:
            result = Result(target.id, target.family, target.name, "timeout", f"ran past {timeout_s} s")
        except BaseException as error:  # the harness itself failed: record it, keep going
            result = Result(target.id, target.family, target.name, "crash", f"{type(error).__name__}: {error}")
        finally:
            signal.alarm(0)
        results.put(("done", index, asdict(result)))


def run_all(
    targets: list[Target], jobs: int = 2, timeout_s: int = 60, progress: Callable[[Result], None] | None = None
) -> list[Result]:
    """One Result per target, in the targets' order."""
    context = multiprocessing.get_context("fork")
    tasks, results = context.Queue(), context.Queue()
    for item in enumerate(targets):
        tasks.put(item)
    workers: dict[int, Any] = {}

    def start_worker() -> None:
        process = context.Process(target=_worker, args=(tasks, results, timeout_s), daemon=True)
        process.start()
        workers[process.pid] = process

    for _ in range(max(1, min(jobs, len(targets)))):
        start_worker()
    running: dict[int, tuple[int, float]] = {}  # pid -> (target index, start time)
    done: dict[int, Result] = {}

    def finish(index: int, result: Result) -> None:
        done[index] = result
        if progress is not None:
            progress(result)

    last_message = time.monotonic()
    while len(done) < len(targets):
        try:
            kind, index, payload = results.get(timeout=2)
            last_message = time.monotonic()
        except queue.Empty:
            kind = None
            if not running and time.monotonic() - last_message > timeout_s + GRACE_S:
                break  # a task was lost with a worker that died before reporting it
        if kind == "start":
            running[payload] = (index, time.monotonic())
        elif kind == "done":
            running = {pid: job for pid, job in running.items() if job[0] != index}
            finish(index, Result(**payload))
        for pid, process in list(workers.items()):
            job = running.get(pid)
            overdue = job is not None and time.monotonic() - job[1] > timeout_s + GRACE_S
            if overdue:
                process.kill()
                process.join()
            if process.is_alive():
                continue
            del workers[pid]
            if job is not None:
                del running[pid]
                target = targets[job[0]]
                status = "timeout" if overdue else "crash"
                reason = f"ran past {timeout_s} s" if overdue else f"worker died (exit code {process.exitcode})"
                finish(job[0], Result(target.id, target.family, target.name, status, reason))
            if len(done) + len(running) < len(targets):
                start_worker()
    for _ in workers:
        tasks.put(None)
    for process in workers.values():
        process.join(timeout=10)
    lost = "lost: its worker died before reporting it"
    return [done.get(i) or Result(t.id, t.family, t.name, "crash", lost) for i, t in enumerate(targets)]
