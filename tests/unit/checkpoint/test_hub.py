"""Checkpoints named by a Hub id, read offline from a hand-built local Hugging Face cache: the spec comes
with the same revision and cache as the weights; an absent spec is logged at debug level, an unknown one warned."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import ROOT, HubTiny

from yamltrace import SpecError
from yamltrace.checkpoint import SPEC_FILE, from_pretrained, save_pretrained
from yamltrace.examples.tiny import TinyModel

SPEC_MAIN = "yamltrace: 1\nimports: [yamltrace.examples.tiny]\noutputs:\n  hidden_states: TinyDecoderLayer  # main\n"
SPEC_V2 = "yamltrace: 1\nimports: [yamltrace.examples.tiny]\noutputs:\n  mlp: {target: TinyMLP, index: 0}  # v2\n"


def add_revision(cache: Path, repo_id: str, ref: str, files: dict[str, bytes], absent: tuple[str, ...] = ()) -> str:
    """Lay out one revision of a model repo as huggingface_hub caches it: refs/REF holds the commit,
    snapshots/COMMIT the files, and .no_exist/COMMIT the files the Hub said the repo lacks."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    commit = hashlib.sha1(f"{repo_id}@{ref}".encode()).hexdigest()
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, data in files.items():
        (snapshot / name).write_bytes(data)
    for name in absent:
        (repo / ".no_exist" / commit).mkdir(parents=True, exist_ok=True)
        (repo / ".no_exist" / commit / name).touch()
    return commit


def checkpoint_files(model: torch.nn.Module, directory: Path, spec: str | None) -> dict[str, bytes]:
    save_pretrained(model, directory, spec=spec)
    return {p.name: p.read_bytes() for p in directory.iterdir()}


@pytest.fixture
def cache(tiny: TinyModel, tmp_path: Path) -> Path:
    """org/tiny: `main` ships SPEC_MAIN, `v2` ships SPEC_V2, `bare` has no spec (known absent), `unseen`
    has a spec the cache never fetched."""
    cache = tmp_path / "hub"
    add_revision(cache, "org/tiny", "main", checkpoint_files(tiny, tmp_path / "main", SPEC_MAIN))
    add_revision(cache, "org/tiny", "v2", checkpoint_files(tiny, tmp_path / "v2", SPEC_V2))
    add_revision(cache, "org/tiny", "bare", checkpoint_files(tiny, tmp_path / "bare", None), absent=(SPEC_FILE,))
    add_revision(cache, "org/tiny", "unseen", checkpoint_files(tiny, tmp_path / "unseen", None))
    return cache


def test_a_hub_id_loads_weights_and_spec_from_the_same_revision(cache: Path, tiny: TinyModel, input_ids) -> None:
    main = from_pretrained(TinyModel, "org/tiny", cache_dir=cache, local_files_only=True)
    v2 = from_pretrained(TinyModel, "org/tiny", revision="v2", cache_dir=cache, local_files_only=True)
    assert set(main.yamltrace_spec.outputs) == {"hidden_states"}
    assert set(v2.yamltrace_spec.outputs) == {"mlp"}
    assert torch.equal(v2(input_ids).last_hidden_state, tiny(input_ids).last_hidden_state)


def test_a_repo_without_a_spec_loads_without_one_logged_at_debug(cache: Path, caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger="yamltrace.checkpoint"):
        model = from_pretrained(TinyModel, "org/tiny", revision="bare", cache_dir=cache, local_files_only=True)
    assert not hasattr(model, "yamltrace_spec")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == []  # a snapshot is a folder: no spec file in it


def test_transformers_hub_id_whose_spec_is_known_absent_is_debug(cache: Path, caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger="yamltrace.checkpoint"):
        model = from_pretrained(HubTiny, "org/tiny", revision="bare", cache_dir=cache, local_files_only=True)
    assert not hasattr(model, "yamltrace_spec")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("DEBUG", "org/tiny@bare has no yamltrace.yaml: loading without a spec.")
    ]


def test_a_spec_the_offline_cache_never_saw_is_warned_about(cache: Path, caplog) -> None:
    with caplog.at_level(logging.DEBUG, logger="yamltrace.checkpoint"):
        model = from_pretrained(HubTiny, "org/tiny", revision="unseen", cache_dir=cache, local_files_only=True)
    assert not hasattr(model, "yamltrace_spec")
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "WARNING",
            "org/tiny@unseen: yamltrace.yaml is not in the local cache and the Hub is offline, so the model loads "
            "without the spec the repository may ship; load it once online (or download yamltrace.yaml) to use it.",
        )
    ]


def test_a_local_path_that_does_not_exist_is_not_taken_for_a_hub_id(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path}/missing is not a checkpoint: config.json is missing\."):
        from_pretrained(TinyModel, str(tmp_path / "missing"))


def test_unknown_keyword_arguments_for_a_yamltrace_model_are_named(cache: Path) -> None:
    with pytest.raises(
        TypeError, match=r"Unexpected arguments for a yamltrace model: \['attn_implementation'\]; it accepts revision"
    ):
        from_pretrained(TinyModel, "org/tiny", cache_dir=cache, attn_implementation="eager")


OFFLINE_SCRIPT = """
import json, sys
import torch
from transformers import LlamaModel
import yamltrace
from yamltrace.kernels import SdpaLlamaAttention

cache = sys.argv[1]
plain = yamltrace.from_pretrained(LlamaModel, "org/llama", revision="bare", cache_dir=cache)
swapped = yamltrace.from_pretrained(LlamaModel, "org/llama", cache_dir=cache, attn_implementation="eager")
tiny = yamltrace.from_pretrained(yamltrace.examples.tiny.TinyModel, "org/tiny", revision="v2", cache_dir=cache)
ids = torch.randint(0, 99, (1, 5), generator=torch.Generator().manual_seed(0))
with yamltrace.trace(swapped) as captures:
    swapped(ids)
print(json.dumps({
    "plain_has_spec": hasattr(plain, "yamltrace_spec"),
    "swapped_attention": sorted({type(layer.self_attn).__name__ for layer in swapped.layers}),
    "swapped_keys": sorted(captures),
    "hidden_states": len(captures["hidden_states"]),
    "tiny_keys": sorted(tiny.yamltrace_spec.outputs),
}))
"""

LLAMA_SPEC = """\
yamltrace: 1
model: LlamaModel
imports: [transformers.models.llama.modeling_llama]
outputs:
  hidden_states: LlamaDecoderLayer
patches:
  LlamaAttention: yamltrace.kernels:SdpaLlamaAttention
"""


@pytest.mark.oracle
def test_offline_hub_ids_with_hf_hub_offline(cache: Path, tmp_path: Path) -> None:
    """With HF_HUB_OFFLINE=1 (no local_files_only): a transformers model and a yamltrace model by Hub id."""
    pytest.importorskip("transformers")
    from helpers_transformers import tiny_llama_config
    from transformers import LlamaModel

    torch.manual_seed(0)
    llama = LlamaModel(tiny_llama_config(intermediate_size=64, max_position_embeddings=64)).eval()
    add_revision(cache, "org/llama", "main", checkpoint_files(llama, tmp_path / "llama", LLAMA_SPEC))
    add_revision(cache, "org/llama", "bare", checkpoint_files(llama, tmp_path / "llama-bare", None), absent=(SPEC_FILE,))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    result = subprocess.run(
        [sys.executable, "-c", "import yamltrace.examples.tiny\n" + OFFLINE_SCRIPT, str(cache)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "plain_has_spec": False,
        "swapped_attention": ["SdpaLlamaAttention"],
        "swapped_keys": ["hidden_states"],
        "hidden_states": llama.config.num_hidden_layers + 1,
        "tiny_keys": ["mlp"],
    }


STEERED = """\
yamltrace: 1
imports: [yamltrace.examples.tiny]
interventions:
  steer: {target: TinyDecoderLayer, layers: [1], add: {tensor: "steer.safetensors:v"}}
  again: {target: TinyDecoderLayer, layers: [2], set: {tensor: "steer.safetensors:v"}}
"""


def test_a_downloaded_spec_brings_the_tensor_files_its_interventions_read(tmp_path: Path, monkeypatch) -> None:
    """Online, `yamltrace.yaml` of a transformers-class repo comes with the tensor files its
    interventions name (each once, into the same snapshot); a spec that does not validate (here, a
    tensor file out of its folder) gets nothing more requested, and loading it reports why."""
    import huggingface_hub
    from safetensors.torch import save_file

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / SPEC_FILE).write_text(STEERED, encoding="utf-8")
    save_file({"v": torch.ones(32)}, str(repo / "steer.safetensors"))
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    asked = []

    def download(repo_id: str, filename: str, **options: object) -> str:
        asked.append(filename)
        (snapshot / filename).write_bytes((repo / filename).read_bytes())
        return str(snapshot / filename)

    monkeypatch.setattr(huggingface_hub, "is_offline_mode", lambda: False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(huggingface_hub, "hf_hub_url", lambda repo_id, name, **options: name)
    monkeypatch.setattr(
        huggingface_hub, "get_hf_file_metadata", lambda url, **options: SimpleNamespace(size=(repo / url).stat().st_size)
    )
    spec = from_pretrained(HubTiny, "org/steered").yamltrace_spec
    assert Path(spec.source) == snapshot / SPEC_FILE
    assert asked == [SPEC_FILE, "steer.safetensors"]
    assert spec.interventions[0].value.shape == (32,)
    hostile = STEERED + '  out: {target: TinyDecoderLayer, layers: [0], add: {tensor: "../outside.safetensors:v"}}\n'
    (repo / SPEC_FILE).write_text(hostile, encoding="utf-8")
    asked.clear()
    (snapshot / "steer.safetensors").unlink()
    with pytest.raises(SpecError, match=rf"^{snapshot / SPEC_FILE}:6:\d+: \$\.interventions\.out\.add\.tensor: "):
        from_pretrained(HubTiny, "org/steered")
    assert asked == [SPEC_FILE]
