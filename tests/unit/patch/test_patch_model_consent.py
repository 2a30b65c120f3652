"""`patch_model` of a spec file naming a module not imported yet: refused without consent, with a
message naming the argument that gives it, which `patch_model` takes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import DATA

from yamltrace.errors import PatchError, SpecError
from yamltrace.examples.tiny import TinyModel
from yamltrace.patch import patch_model

SPEC = "yamltrace: 1\npatches:\n  TinyMLP: ytplugins.side_effect:SideEffectLayer\n"


@pytest.fixture
def plugin_path(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(DATA / "plugins"))
    yield
    for name in [m for m in sys.modules if m == "ytplugins" or m.startswith("ytplugins.")]:
        del sys.modules[name]


def test_the_consent_message_names_an_argument_patch_model_takes(tiny: TinyModel, tmp_path: Path, plugin_path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(SPEC, encoding="utf-8")
    with pytest.raises(SpecError, match=r"pass trust_imports=True to the function that reads it \(load_spec, patch_model,") as e:
        patch_model(tiny, path)
    assert "mine.yaml:3:" in str(e.value) and "ytplugins.side_effect" not in sys.modules
    # With consent, the module is imported and the class resolved (it cannot become a TinyMLP: no from_module).
    with pytest.raises(PatchError, match=r"layers\.0\.mlp .*cannot become ytplugins\.side_effect\.SideEffectLayer"):
        patch_model(tiny, path, trust_imports=True)
    assert "ytplugins.side_effect" in sys.modules
