"""`yamltrace check` on the models users have: one call over a repository of several families (each spec's
own `model:`, consent to import the model's own package), every problem of a spec at once with its line,
and `--model` naming a plain `nn.Module` class or a factory, found in the working directory."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ROOT

from yamltrace.cli import main

# Two model families, each a package of the user's repository (imported from the working directory).
FAMILIES = {
    "vision_fam/__init__.py": "",
    "vision_fam/models.py": """\
        from torch import nn

        class Block(nn.Module):
            def __init__(self, width=8):
                super().__init__()
                self.proj = nn.Linear(width, width)

            def forward(self, x):
                return self.proj(x)

        class Net(nn.Module):
            def __init__(self, width=8, depth=2):
                super().__init__()
                self.blocks = nn.ModuleList(Block(width) for _ in range(depth))

            def forward(self, x):
                for block in self.blocks:
                    x = block(x)
                return x

        def make_net(width=8, depth=3):
            return Net(width, depth)

        def not_a_model():
            return 42
        """,
    "text_fam/__init__.py": "",
    "text_fam/layers.py": """\
        from torch import nn

        class Mixer(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(4, 4)

            def forward(self, x):
                return self.fc(x)
        """,
    "text_fam/models.py": """\
        from torch import nn

        from text_fam.layers import Mixer

        class TextNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.mixers = nn.ModuleList([Mixer(), Mixer()])

            def forward(self, x):
                return self.mixers[1](self.mixers[0](x))
        """,
    "other_pkg/__init__.py": "",
    "other_pkg/extra.py": "from torch import nn\n\nclass Extra(nn.Module):\n    pass\n",
}

VISION = """\
yamltrace: 1
model: vision_fam.models:Net
outputs:
  hidden_states: {class_name: .proj}
"""

TEXT = """\
yamltrace: 1
model: text_fam.models:TextNet
imports: [text_fam.layers]
outputs:
  hidden_states: Mixer
"""

# A kernel-only spec naming a transformers class by its bare name, with no imports.
KERNELS = """\
yamltrace: 1
model: LlamaForCausalLM
patches:
  LlamaRMSNorm: torch.nn:Identity
"""

FOREIGN_IMPORT = """\
yamltrace: 1
model: vision_fam.models:Net
imports: [other_pkg.extra]
outputs:
  hidden_states: {class_name: .proj}
"""

LLAMA_CONFIG = {"vocab_size": 32, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
                "num_attention_heads": 2, "num_key_value_heads": 1}  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A repository with two model families as packages, as the working directory (not on sys.path)."""
    for name, text in FAMILIES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield tmp_path
    for name in [m for m in sys.modules if m.partition(".")[0] in {"vision_fam", "text_fam", "other_pkg"}]:
        del sys.modules[name]


def write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path.relative_to(folder)) if path.is_relative_to(Path.cwd()) else str(path)


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], str]:
    status = main(["check", *argv])
    captured = capsys.readouterr()
    return status, captured.out.splitlines(), captured.err


def test_one_check_over_a_repository_of_several_families(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each spec is checked on the class its own `model:` names; naming it is consent to import its package
    (and the spec's imports under that package), a bare transformers class name is found in transformers."""
    write(repo, "specs/vision.yaml", VISION)
    write(repo, "specs/text.yaml", TEXT)
    write(repo, "specs/kernels.yaml", KERNELS)
    status, lines, err = check(capsys, "specs")
    assert (status, err) == (0, ""), lines
    assert "specs/kernels.yaml on LlamaForCausalLM (built on the meta device):" in lines
    text = lines.index("specs/text.yaml on TextNet (built on the meta device):")
    assert lines[text + 1 : text + 3] == [
        "shapes: no dummy input for TextNet.forward(x)",
        "outputs: hidden_states[0] Mixer (line 5): 2 module(s): mixers.0, mixers.1",
    ]
    vision = lines.index("specs/vision.yaml on Net (built on the meta device):")
    assert lines[vision + 2] == "outputs: hidden_states[0] '.proj' (line 4): 2 module(s): blocks.0.proj, blocks.1.proj"
    assert lines[-1] == "3 files, 0 invalid, 0 problems, 0 warnings"


def test_the_model_key_consents_to_its_own_package_only(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(repo, "specs/foreign.yaml", FOREIGN_IMPORT)
    status, lines, _ = check(capsys, "specs")
    assert status == 1
    assert lines[-2].startswith(
        "specs/foreign.yaml:3:11: $.imports[0]: module 'other_pkg.extra' is not imported yet, and importing it would run "
        "its code: a spec may import only modules under torch, vision_fam, yamltrace"
    )
    assert "other_pkg" not in sys.modules
    status, lines, _ = check(capsys, "specs", "--trust-imports")
    assert status == 0, lines


def test_a_bare_model_name_found_nowhere_says_how_to_name_it(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(repo, "specs/bare.yaml", VISION.replace("vision_fam.models:Net", "Net"))
    status, lines, _ = check(capsys, "specs")
    assert status == 1
    assert lines[0].startswith("specs/bare.yaml:2:8: $.model: class 'Net' not found")
    assert lines[0].endswith("; or write the model as `package.module:Class`, which is consent to import its module")


def test_model_overrides_every_spec_model_key(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--model` is the model of every spec: a bare `model: Net` found nowhere is then only compared by name."""
    write(repo, "specs/vision.yaml", VISION.replace("vision_fam.models:Net", "Net"))
    status, lines, _ = check(capsys, "specs", "--model", "vision_fam.models:Net")
    assert (status, lines[0]) == (0, "specs/vision.yaml on Net (built on the meta device):")
    write(repo, "specs/vision.yaml", VISION.replace("vision_fam.models:Net", "text_fam.models:TextNet"))
    status, lines, _ = check(capsys, "specs", "--model", "vision_fam.models:Net")
    assert status == 1
    assert lines[0].startswith(
        "specs/vision.yaml:2:8: $.model: this spec is for 'text_fam.models:TextNet', but it is applied to Net"
    )


PATCH_PROBLEMS = """\
yamltrace: 1
model: yamltrace.examples.tiny:TinyModel
outputs:
  hidden_states: TinyDecoderLayer
patches:
  TinyAttention: torch.nn:NoSuchClass
  TinyAtention: torch.nn:Identity
"""


def test_every_problem_at_once_each_at_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A replacement class that cannot be found hides no patch key that matches nothing; the key's problem is
    located at the key, in every format."""
    spec = str(tmp_path / "spec.yaml")
    Path(spec).write_text(PATCH_PROBLEMS, encoding="utf-8")
    status, lines, _ = check(capsys, spec)
    assert status == 1
    # What resolves is checked too (its recorders listed), then the problems, each at its line.
    assert lines[0] == f"{spec} on TinyModel (built on the meta device), what resolves:"
    assert lines[1].startswith("outputs: hidden_states[0] TinyDecoderLayer (line 4): 4 module(s)")
    assert lines[2].startswith(f"{spec}:6:18: $.patches.TinyAttention: module 'torch.nn' has no attribute 'NoSuchClass'")
    assert lines[3] == (
        f"{spec}:7:3: $.patches.TinyAtention: the patch matches no module of TinyModel; fix the class name or pattern "
        "(the model's classes: Embedding, Linear, ModuleList, RMSNorm, TinyAttention, TinyDecoderLayer, TinyMLP, TinyModel)"
    )
    assert lines[-1] == "1 file, 1 invalid, 2 problems, 0 warnings"
    assert main(["check", spec, "--format", "json"]) == 1
    (entry,) = json.loads(capsys.readouterr().out)["files"]
    assert [(i["line"], i["column"], i["json_path"]) for i in entry["issues"]] == [
        (6, 18, "$.patches.TinyAttention"),
        (7, 3, "$.patches.TinyAtention"),
    ]
    assert main(["check", spec, "--format", "github"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"::error file={spec},line=6,col=18,title=yamltrace::$.patches.TinyAttention: ")
    assert out[1].startswith(f"::error file={spec},line=7,col=3,title=yamltrace::$.patches.TinyAtention: the patch matches")


def test_a_patch_matching_nothing_on_a_resolved_spec_is_located_at_its_key(tmp_path: Path, capsys) -> None:
    spec = str(tmp_path / "spec.yaml")
    Path(spec).write_text(PATCH_PROBLEMS.replace("torch.nn:NoSuchClass", "torch.nn:Identity"), encoding="utf-8")
    assert main(["check", spec, "--format", "github"]) == 1
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"::error file={spec},line=7,col=3,title=yamltrace::$.patches.TinyAtention: the patch matches no")


SPEC = "yamltrace: 1\noutputs:\n  hidden_states: {class_name: .proj}\n"


@pytest.mark.parametrize(
    ("extra", "blocks"),
    [
        ([], 3),  # make_net's defaults
        (["--model-kwargs", '{"depth": 5}'], 5),
        (["--config", "net.json"], 4),
    ],
    ids=["no arguments", "--model-kwargs", "--config"],
)
def test_a_factory_is_called_with_its_arguments(repo: Path, capsys, extra: list[str], blocks: int) -> None:
    (repo / "net.json").write_text('{"width": 6, "depth": 4}', encoding="utf-8")
    write(repo, "spec.yaml", SPEC)
    status, lines, err = check(capsys, "spec.yaml", "--model", "vision_fam.models:make_net", *extra)
    assert (status, err) == (0, ""), lines
    assert lines[:2] == ["spec.yaml on Net (built on the meta device):", "shapes: no dummy input for Net.forward(x)"]
    paths = ", ".join(f"blocks.{i}.proj" for i in range(blocks))
    assert lines[2] == f"outputs: hidden_states[0] '.proj' (line 3): {blocks} module(s): {paths}"


def test_a_class_without_a_config_class_is_called_like_a_factory(repo: Path, capsys) -> None:
    write(repo, "spec.yaml", SPEC)
    status, lines, _ = check(capsys, "spec.yaml", "--model", "vision_fam.models:Net", "--model-kwargs", '{"depth": 1}')
    assert status == 0
    assert lines[2] == "outputs: hidden_states[0] '.proj' (line 3): 1 module(s): blocks.0.proj"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--model", "vision_fam.models:make_net", "--model-kwargs", '{"heads": 2}'],
            "--model make_net cannot be called with heads= (got an unexpected keyword argument 'heads'); give its keyword "
            "arguments with --model-kwargs JSON or --config FILE, or name a function that builds the model",
        ),
        (
            ["--model", "vision_fam.models:make_net", "--model-kwargs", "[1]"],
            "--model-kwargs is a JSON list, not an object of keyword arguments",
        ),
        (["--model", "vision_fam.models:not_a_model"], "--model not_a_model returned int, not a torch.nn.Module"),
        (
            ["--model", "yamltrace.examples.tiny:TinyModel", "--model-kwargs", "{}"],
            "--model 'yamltrace.examples.tiny:TinyModel' is built from its config class; give its settings with "
            "--config FILE, not --model-kwargs",
        ),
        (["--model-kwargs", "{}"], "--model-kwargs needs --model pkg.mod:Name"),
    ],
    ids=["unknown argument", "not an object", "not a module", "a configured class", "no --model"],
)
def test_factory_mistakes_are_usage_errors(repo: Path, capsys, extra: list[str], message: str) -> None:
    write(repo, "spec.yaml", SPEC)
    status, lines, err = check(capsys, "spec.yaml", *extra)
    assert (status, lines, err) == (2, [], f"yamltrace check: {message}\n")


def test_the_console_script_imports_from_the_working_directory(repo: Path) -> None:
    """As installed, `yamltrace` runs a script outside the project, whose folder (not the working directory) is
    first on sys.path; the command still finds the project's modules, as `python -m yamltrace` does."""
    write(repo, "spec.yaml", SPEC)
    script = repo.parent / "bin" / "yamltrace"
    script.parent.mkdir(exist_ok=True)
    script.write_text("import sys\nfrom yamltrace.cli import main\nsys.exit(main())\n", encoding="utf-8")
    command = [sys.executable, str(script), "check", "spec.yaml", "--model", "vision_fam.models:make_net"]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == "spec.yaml on Net (built on the meta device):"
