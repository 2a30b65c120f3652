"""A failed load forgets only what is safe to forget, and a recursive patch is an error (issue #12, items 2 and 14)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from yamltrace.checkpoint import SPEC_FILE, from_pretrained, save_pretrained
from yamltrace.errors import PatchError, SpecError
from yamltrace.examples.tiny import TinyModel


@pytest.mark.slow  # compiles
def test_torch_compile_still_works_after_a_failed_load_that_imported_dynamo(tmp_path: Path, tiny: TinyModel) -> None:
    # A fresh process: torch._dynamo must be first imported by the spec, as in a user's session.
    save_pretrained(tiny, tmp_path)
    (tmp_path / SPEC_FILE).write_text("yamltrace: 1\nimports: [torch._dynamo]\noutputs:\n  hidden_states: NoSuchClass\n")
    code = (
        "import sys, torch\n"
        "from yamltrace.checkpoint import from_pretrained\n"
        "from yamltrace.errors import SpecError\n"
        "from yamltrace.examples.tiny import TinyModel\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "try:\n"
        f"    from_pretrained(TinyModel, {str(tmp_path)!r})\n"
        "except SpecError as e:\n"
        "    assert 'NoSuchClass' in str(e)\n"
        "else:\n"
        "    raise AssertionError('the load should fail')\n"
        "assert 'torch._dynamo' in sys.modules\n"
        "double = torch.compile(lambda x: x * 2, backend='eager')\n"
        "assert torch.equal(double(torch.ones(2)), torch.full((2,), 2.0))\n"
        "print('compiled')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "compiled", done.stderr[-2000:]


def test_a_failed_load_forgets_a_new_package(tmp_path: Path, tiny: TinyModel, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "pkgs" / "fresh_kernels_for_rollback"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    save_pretrained(tiny, tmp_path / "ckpt")
    (tmp_path / "ckpt" / SPEC_FILE).write_text(
        "yamltrace: 1\nimports: [fresh_kernels_for_rollback]\noutputs:\n  hidden_states: NoSuchClass\n"
    )
    with pytest.raises(SpecError):
        from_pretrained(TinyModel, tmp_path / "ckpt", trust_imports=True)
    assert "fresh_kernels_for_rollback" not in sys.modules


def test_a_catch_all_patch_to_a_part_of_the_model_is_an_error_not_a_recursion(tmp_path: Path, tiny: TinyModel) -> None:
    save_pretrained(tiny, tmp_path)
    (tmp_path / SPEC_FILE).write_text("yamltrace: 1\noutputs: {}\npatches:\n  '.*': yamltrace.examples.tiny:TinyModel\n")
    with pytest.raises(PatchError, match="recursed without end.*Anchor the pattern"):
        from_pretrained(TinyModel, tmp_path)
