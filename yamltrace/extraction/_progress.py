"""Progress of an extraction: a one-line bar (rows/s, ETA) on a terminal, plain periodic lines otherwise."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60:02d}:{rest % 60:02d}"


class Progress:
    """Reports batches and rows done. `total` is the number of batches when known (for the ETA).

    On a terminal the line is redrawn at most `redraw` times a second; elsewhere (a log file, a CI job)
    one line is printed every `every` seconds and one at the end, so logs stay short.
    """

    def __init__(self, total: int | None, *, stream: TextIO | None = None, every: float = 10.0, redraw: float = 10.0) -> None:
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = 1.0 / redraw if self.terminal else every
        self.batches = self.rows = 0
        self.earlier = 0  # batches an earlier run finished (resume)
        self.start = self.last = time.monotonic()

    def update(self, batches: int, rows: int) -> None:
        self.batches += batches
        self.rows += rows
        now = time.monotonic()
        if now - self.last >= self.interval:
            self.last = now
            self._show(now)

    def skipped(self, batches: int) -> None:
        """Batches already done by an earlier run (resume): counted towards the total, not the rate."""
        self.earlier = batches
        if self.total is not None:
            self.total -= batches
        if batches and self.total != 0:
            print(f"extract: resuming; {batches} batch(es) already in finished shards", file=self.stream, flush=True)

    def finish(self) -> None:
        if self.earlier and not self.batches:  # a rerun of a finished extraction: nothing ran, say so
            print(f"extract: already finished: all {self.earlier} batch(es) are in finished shards", file=self.stream, flush=True)
            return
        self._show(time.monotonic(), final=True)

    def stop(self) -> None:
        """End the redrawn line of a terminal, so that what is printed next (an error, an interrupt) starts a line."""
        if self.terminal and self.last > self.start:
            print(file=self.stream, flush=True)

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        rate = self.rows / elapsed
        done = f"{self.batches}/{self.total} batches" if self.total is not None else f"{self.batches} batches"
        text = f"{done}, {self.rows} rows, {rate:,.1f} rows/s, {_duration(elapsed)} elapsed"
        if self.total and 0 < self.batches < self.total:
            text += f", ETA {_duration(elapsed / self.batches * (self.total - self.batches))}"
        return text

    def _show(self, now: float, final: bool = False) -> None:
        text = self.line(now)
        if self.terminal:
            width = 24
            filled = int(width * self.batches / self.total) if self.total else 0
            bar = f"[{'#' * filled}{'.' * (width - filled)}] " if self.total else ""
            print(f"\r\033[Kextract {bar}{text}", end="\n" if final else "", file=self.stream, flush=True)
        else:
            print(f"extract: {text}", file=self.stream, flush=True)
