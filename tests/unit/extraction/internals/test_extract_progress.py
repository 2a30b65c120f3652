"""The progress report of `extract`: a bar redrawn on one line of a terminal (with an ETA), plain lines
in a log, and a bar's line ended when a run stops; driven by hand, batch by batch, with the redraw
and print intervals set so that each step is seen."""

from __future__ import annotations

import io

from yamltrace.extraction._progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_redraws_one_line_with_an_eta() -> None:
    stream = Terminal()
    progress = Progress(10, stream=stream, redraw=1e9)
    progress.update(1, 4)
    progress.update(1, 4)
    progress.finish()
    shown = stream.getvalue()
    assert shown.count("\r\033[K") == 3 and shown.endswith("\n") and shown.count("\n") == 1
    assert "extract [##......................] 1/10 batches, 4 rows, " in shown and ", ETA " in shown
    assert shown.split("\r")[-1].startswith("\033[Kextract [####....................] 2/10 batches, 8 rows, ")


def test_progress_in_a_log_prints_plain_lines() -> None:
    stream = io.StringIO()
    progress = Progress(None, stream=stream, every=1e9)
    progress.update(3, 30)
    progress.finish()
    (line,) = stream.getvalue().splitlines()
    assert line.startswith("extract: 3 batches, 30 rows, ") and "rows/s" in line and "\r" not in line


def test_an_interrupted_bar_ends_its_line() -> None:
    stream = Terminal()
    Progress(10, stream=stream, redraw=1e9).stop()
    assert stream.getvalue() == "", "nothing drawn, nothing to end"
    progress = Progress(10, stream=stream, redraw=1e9)
    progress.update(1, 4)
    progress.stop()
    shown = stream.getvalue()
    assert shown.startswith("\r\033[Kextract [##") and shown.endswith("\n") and shown.count("\n") == 1
