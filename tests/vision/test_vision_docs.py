"""The pages whose examples need timm, torchvision and diffusers (`VISION_PAGES`), run as
tests/integration/test_docs.py runs the others (tests/helpers_docs_run.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ROOT
from helpers_docs_run import VISION_PAGES, run_page


@pytest.mark.parametrize("name", VISION_PAGES)
def test_every_block_of_the_vision_page_runs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_page(ROOT / name, tmp_path, monkeypatch)
