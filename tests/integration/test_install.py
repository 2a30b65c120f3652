"""The recipes of docs/ci.md, run as written: the GitHub Actions workflow (`pip install` from the
repository URL, then `yamltrace validate`; the check job's command on a repository of two model
families) and both pre-commit recipes (the `repo:` / `rev:` form, a `repo: local` hook installing a
wheel), with a local clone of this repository in place of the URL and a wheel built from it at the
documented path.

They build environments (a few seconds; ~20 s for pre-commit), so they are marked slow; they stay
in the default suite and CI. Dependencies come from pip's configured index or cache; torch is never
installed in them: the core is PyYAML and jsonschema.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import ROOT

pytestmark = pytest.mark.slow

DOCS = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
URL = "https://github.com/OWNER/yamltrace"
SHIPPED = sorted((ROOT / "specs").glob("*.yaml"))
CORE_SITE_PACKAGES_LIMIT = 50 * 2**20
BROKEN = "yamltrace: 1\noutputs:\n  hidden_states: {index: 0}\n"


def _run(argv: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _yaml_block_after(heading: str) -> object:
    section = DOCS[DOCS.index(heading) :]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, flags=re.DOTALL).group(1))


def _pre_commit_config(repo: str) -> dict[str, Any]:
    """The `.pre-commit-config.yaml` of docs/ci.md's pre-commit section whose first repo is `repo`."""
    section = DOCS[DOCS.index("## Before a commit: pre-commit") :]
    section = section[: section.index("\n## ", 1)]
    for block in re.findall(r"```yaml\n(.*?)```", section, flags=re.DOTALL):
        config = yaml.safe_load(block)
        if isinstance(config, dict) and config.get("repos", [{}])[0].get("repo") == repo:
            return config
    raise AssertionError(f"docs/ci.md's pre-commit section has no config with repo {repo!r}")


def _run_pre_commit(config: dict[str, Any], project: Path, tmp_path: Path, **env: str) -> None:
    """pre-commit over `project` with `config`: the broken spec is reported at its line, once."""
    pre_commit = shutil.which("pre-commit", path=str(Path(sys.executable).parent))
    assert pre_commit is not None, "pre-commit is a test dependency (pyproject [test])"
    (tmp_path / "pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), **env}
    result = _run([pre_commit, "run", "--all-files", "--config", tmp_path / "pre-commit-config.yaml"], project, env)
    assert result.returncode == 1, result.stdout + result.stderr
    output = result.stdout.splitlines()
    start = output.index("- exit code: 1")
    assert [line for line in output[start + 1 :] if line] == [
        "specs/broken.yaml:3:18: $.outputs.hidden_states: give exactly one of 'target' (a class) or 'class_name' (a module path suffix)",
        f"{len(SHIPPED) + 1} files, 1 invalid, 1 problem",
    ]


def _size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A clone of this repository (its committed HEAD) and that commit, standing in for URL and REF."""
    target = tmp_path_factory.mktemp("repo") / "yamltrace"
    assert _run(["git", "clone", "-q", ROOT, target], target.parent).returncode == 0
    commit = _run(["git", "rev-parse", "HEAD"], target).stdout.strip()
    return target, commit


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's project: the shipped specs, one broken spec, and a YAML file that is not a spec."""
    project = tmp_path_factory.mktemp("project")
    shutil.copytree(ROOT / "specs", project / "specs")
    (project / "specs" / "broken.yaml").write_text(BROKEN)
    (project / "ci.yaml").write_text("not: [a, spec]\n")
    for argv in (["git", "init", "-q"], ["git", "add", "-A"]):
        assert _run(argv, project).returncode == 0
    return project


@pytest.fixture(scope="module")
def actions_steps(clone: tuple[Path, str]) -> list[list[str]]:
    """The `run:` steps of the documented workflow, the URL pointing at the clone (with a host part, which
    the pip bundled with Python 3.11 needs in a `name @ git+file:` requirement)."""
    path, commit = clone
    steps = _yaml_block_after("## On every pull request: GitHub Actions")["jobs"]["validate"]["steps"]
    commands = [step["run"].replace(f"git+{URL}@REF", f"git+file://localhost{path}@{commit}") for step in steps if "run" in step]
    return [shlex.split(command) for command in commands]


@pytest.fixture(scope="module")
def core_venv(actions_steps: list[list[str]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv where the documented `pip install` ran (pip itself stays outside the venv)."""
    venv = tmp_path_factory.mktemp("core") / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", venv], venv.parent).returncode == 0
    install = actions_steps[0]
    assert install[:2] == ["pip", "install"], install
    installed = _run(
        [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "-q", *install[2:]], venv.parent
    )
    assert installed.returncode == 0, installed.stderr
    return venv


def test_the_core_install_is_small_and_has_no_torch(core_venv: Path) -> None:
    (site_packages,) = (core_venv / "lib").glob("python*/site-packages")
    assert _size(site_packages) < CORE_SITE_PACKAGES_LIMIT
    names = {p.name.lower() for p in site_packages.iterdir()}
    assert {"yaml", "jsonschema", "yamltrace"} <= names
    assert not names & {"torch", "safetensors", "transformers", "numpy", "huggingface_hub"}


def test_the_documented_validate_step_runs(core_venv: Path, actions_steps: list[list[str]], project: Path) -> None:
    validate = actions_steps[1]
    assert validate[:2] == ["yamltrace", "validate"], validate
    env = {**os.environ, "PATH": f"{core_venv / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    result = _run(validate, project, env)
    assert result.returncode == 1, result.stderr
    assert result.stdout == (
        "::error file=specs/broken.yaml,line=3,col=18,title=yamltrace::$.outputs.hidden_states: "
        "give exactly one of 'target' (a class) or 'class_name' (a module path suffix)\n"
    )
    valid = _run([core_venv / "bin" / "yamltrace", "validate", ROOT / "specs"], project)
    assert (valid.returncode, valid.stdout, valid.stderr) == (0, f"{len(SHIPPED)} files, 0 invalid, 0 problems\n", "")


def test_the_core_install_prints_the_schema(core_venv: Path, tmp_path: Path) -> None:
    schema = _run([core_venv / "bin" / "yamltrace", "schema"], tmp_path)
    assert (schema.returncode, schema.stdout) == (
        0,
        (ROOT / "yamltrace" / "schemas" / "yamltrace-spec-v1.schema.json").read_text(),
    )


def test_a_torch_name_without_torch_names_the_extra(core_venv: Path, tmp_path: Path) -> None:
    code = "import yamltrace\nprint(yamltrace.__file__)\nfrom yamltrace import trace\n"
    result = _run([core_venv / "bin" / "python", "-c", code], tmp_path)
    assert result.returncode == 1
    assert result.stdout.startswith(str(core_venv))  # the installed package, not this checkout
    assert result.stderr.splitlines()[-1] == (
        "ImportError: yamltrace.trace needs torch, which is not installed: pip install 'yamltrace[torch]' "
        "(or install torch yourself). The core install only validates specs and prints the schema."
    )


def test_check_without_torch_prints_one_line_naming_the_extra(core_venv: Path, project: Path) -> None:
    result = _run([core_venv / "bin" / "yamltrace", "check", "specs/"], project)
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        "yamltrace check: this command needs torch, which is not installed: pip install 'yamltrace[torch]' "
        "(or install torch yourself). The core install only validates specs and prints the schema.\n",
    )


def test_the_documented_pre_commit_config_runs(clone: tuple[Path, str], project: Path, tmp_path: Path) -> None:
    """The docs' `.pre-commit-config.yaml` with the clone as `repo` and its commit as `rev`."""
    path, commit = clone
    config = _pre_commit_config(URL)
    assert config["repos"][0]["rev"] == "REF"
    config["repos"][0].update(repo=str(path), rev=commit)
    _run_pre_commit(config, project, tmp_path)


def test_the_documented_local_pre_commit_hook_runs(clone: tuple[Path, str], project: Path, tmp_path: Path) -> None:
    """The docs' `repo: local` hook as written, the wheel built from the clone at the documented `file://` path
    (its folder standing in for /opt/wheels); the hook is the one `.pre-commit-hooks.yaml` defines, plus the
    dependency."""
    import yamltrace

    config = _pre_commit_config("local")
    (hook,) = config["repos"][0]["hooks"]
    (dependency,) = hook.pop("additional_dependencies")
    wheel_name = f"yamltrace-{yamltrace.__version__}-py3-none-any.whl"
    assert dependency == f"yamltrace @ file:///opt/wheels/{wheel_name}"
    (defined,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    defined.pop("description")
    assert hook == defined
    wheels = tmp_path / "wheels"
    built = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, clone[0]], tmp_path)
    assert built.returncode == 0, built.stderr
    assert [p.name for p in wheels.iterdir()] == [wheel_name]  # the name the recipe writes
    config = _pre_commit_config("local")
    config["repos"][0]["hooks"][0]["additional_dependencies"] = [dependency.replace("/opt/wheels", str(wheels))]
    _run_pre_commit(config, project, tmp_path)


FAMILY = """\
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x):
        return self.proj(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        return self.blocks[1](self.blocks[0](x))
"""


def test_the_documented_check_job_runs_on_a_repository_of_several_families(tmp_path: Path) -> None:
    """The check job: torch from the CPU index, yamltrace[torch] from the same URL as the validate job, then its
    command as written, here in this environment (which has what those steps install) on a repository whose
    specs name two families: a transformers class by its bare name, and a class of the repository's own package."""
    steps = [
        step["run"]
        for step in _yaml_block_after("## On every pull request: GitHub Actions")["jobs"]["check"]["steps"]
        if "run" in step
    ]
    assert steps[:2] == [
        "pip install torch --index-url https://download.pytorch.org/whl/cpu",
        f'pip install "yamltrace[torch] @ git+{URL}@REF" transformers',
    ]
    command = shlex.split(steps[2])
    assert command[:2] == ["yamltrace", "check"]
    (tmp_path / "vision_fam").mkdir()
    (tmp_path / "vision_fam" / "__init__.py").write_text("")
    (tmp_path / "vision_fam" / "models.py").write_text(FAMILY)
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "net.yaml").write_text(
        "yamltrace: 1\nmodel: vision_fam.models:Net\noutputs:\n  hidden_states: {class_name: .proj}\n"
    )
    (tmp_path / "specs" / "llama.yaml").write_text(
        "yamltrace: 1\nmodel: LlamaForCausalLM\npatches:\n  LlamaRMSNorm: torch.nn:Identity\n"
    )
    yamltrace_command = shutil.which("yamltrace", path=str(Path(sys.executable).parent))
    assert yamltrace_command is not None
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout, as the job's install gives the tested commit
    result = _run([yamltrace_command, *command[1:]], tmp_path, env)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    (tmp_path / "specs" / "llama.yaml").write_text(
        "yamltrace: 1\nmodel: LlamaForCausalLM\npatches:\n  LlamaRMSNorn: torch.nn:Identity\n"
    )
    result = _run([yamltrace_command, *command[1:]], tmp_path, env)
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith(
        "::error file=specs/llama.yaml,line=4,col=3,title=yamltrace::$.patches.LlamaRMSNorn: the patch matches no module "
        "of LlamaForCausalLM"
    )


def _extras() -> dict[str, list[Any]]:
    import tomllib

    from packaging.requirements import Requirement

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    return {name: [Requirement(r) for r in requirements] for name, requirements in extras.items()}


def _pins(path: Path) -> dict[str, str]:
    """`name -> version` of a constraints file and the files it includes with `-c`."""
    pins: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("-c "):
            pins.update(_pins(path.parent / line[3:].strip()))
        elif "==" in line:
            name, version = line.split("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_the_hf_extra_installs_what_tokenising_text_needs() -> None:
    """`yamltrace[hf]`: transformers within the supported range (the `transformers` extra) and tokenizers, both
    pinned for every environment of the test matrix; the test extra brings it."""
    extras = _extras()
    hf = {r.name: r for r in extras["hf"]}
    assert set(hf) == {"yamltrace", "tokenizers"} and hf["yamltrace"].extras == {"transformers"}
    assert any(r.name == "yamltrace" and "hf" in r.extras for r in extras["test"])
    (transformers,) = extras["transformers"]
    for path in [ROOT / "constraints.txt", *sorted((ROOT / "constraints").glob("transformers-*.txt"))]:
        pins = _pins(path)
        assert hf["tokenizers"].specifier.contains(pins["tokenizers"]), path
        assert transformers.specifier.contains(pins["transformers"]), path


def test_the_guide_names_the_hf_extra_where_it_is_needed() -> None:
    guide = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    intro, step = guide[: guide.index("\n## 1.")], guide[guide.index("\n## 10.") : guide.index("\n## 11.")]
    for text in (intro, step):
        assert 'pip install "yamltrace[torch,hf]"' in text
    assert "from tokenizers import" in step  # the step that needs it
    assert 'pip install "yamltrace[torch,hf]"' in (ROOT / "docs" / "extract.md").read_text(encoding="utf-8")


def test_a_tokenizer_without_transformers_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from yamltrace.cli import main

    (tmp_path / "data.txt").write_text("a text\n", encoding="utf-8")
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` raises ImportError
    argv = [
        "extract", "--model", "yamltrace.examples.tiny:TinyModel", "--config", str(tmp_path / "config.json"),
        "--data", str(tmp_path / "data.txt"), "--tokenizer", str(tmp_path), "--max-length", "4", "--out", str(tmp_path / "out"),
    ]  # fmt: skip
    assert main(argv) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert re.fullmatch(
        r"yamltrace extract: error: --tokenizer needs transformers and tokenizers .*pip install 'yamltrace\[hf\]'\.", line
    )
    assert not (tmp_path / "out").exists()
