"""The spec library's listing, lookup and CLI, without torch."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import yamltrace.specs
from helpers import ROOT
from yamltrace.cli import EXIT_INVALID, EXIT_OK, main
from yamltrace.errors import SpecError
from yamltrace.spec import validate_spec


def test_list_names_every_shipped_file() -> None:
    names = yamltrace.specs.list()
    files = sorted(p.stem for p in (ROOT / "yamltrace" / "specs").glob("*.yaml"))
    assert names == files and len(names) >= 20
    assert {"llama", "gpt2", "bert", "t5_encoder", "t5_decoder", "clip_text", "clip_vision", "mixtral"} <= set(names)


@pytest.mark.parametrize("name", yamltrace.specs.list())
def test_every_shipped_spec_is_valid_and_points_at_the_schema(name: str) -> None:
    path = yamltrace.specs.path(f"builtin:{name}")
    assert path == yamltrace.specs.path(name)
    assert path.read_text(encoding="utf-8").startswith("# yaml-language-server: $schema=")
    assert validate_spec(path).data["outputs"]


@pytest.mark.parametrize("name", yamltrace.specs.list())
def test_every_shipped_spec_names_the_test_that_verifies_it(name: str) -> None:
    """`Verified with: LIBRARY VERSION, ... (tests/FILE.py)`: the transformers families in the oracle tests,
    the timm, torchvision and diffusers specs in tests/vision (run by `make test-vision`)."""
    header = yamltrace.specs.header(name)
    found = re.search(r"Verified with: [^()]+ \((tests/[\w/]+\.py)\)", header)
    assert found, f"{name}: the header has no 'Verified with: ... (tests/FILE.py)' line"
    verifier = ROOT / found.group(1)
    assert verifier.is_file(), f"{name}: {found.group(1)} does not exist"
    assert found.group(1) in ("tests/oracle/test_spec_library.py", "tests/vision/test_vision_specs.py")


def test_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(SpecError, match=r"no shipped spec 'lama'; did you mean 'llama'\?"):
        yamltrace.specs.path("builtin:lama")


def test_cli_lists_and_prints(capsys) -> None:
    assert main(["specs"]) == EXIT_OK
    listed = capsys.readouterr().out.split()
    assert listed == [f"builtin:{name}" for name in yamltrace.specs.list()]
    assert main(["specs", "builtin:llama"]) == EXIT_OK
    assert capsys.readouterr().out == yamltrace.specs.path("llama").read_text(encoding="utf-8")
    assert main(["specs", "lama"]) == EXIT_INVALID
    assert "did you mean 'llama'" in capsys.readouterr().err


def test_listing_imports_neither_torch_nor_transformers() -> None:
    script = (
        "import json, sys\nimport yamltrace.specs\nfrom yamltrace.spec import validate_spec\n"
        "[validate_spec(yamltrace.specs.path(n)) for n in yamltrace.specs.list()]\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    assert json.loads(result.stdout) == []
