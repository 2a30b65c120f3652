"""`yamltrace check` in-process: the element each recorder takes and its shape, vocabulary keys held to
their definition, attention weights the model computes none of, many specs with one build per model,
and the formats of `validate`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from yamltrace.cli import main
from yamltrace.examples.tiny import TinyModel

MIXTRAL = "transformers:MixtralForCausalLM"
TINY = "yamltrace.examples.tiny:TinyModel"

BARE_ROUTER = """\
yamltrace: 1
imports: [transformers.models.mixtral.modeling_mixtral]
outputs:
  hidden_states: MixtralDecoderLayer
  router_logits: MixtralTopKRouter
"""

ATTENTIONS = """\
yamltrace: 1
imports: [transformers.models.mixtral.modeling_mixtral]
{options}outputs:
  attentions: MixtralAttention
"""

TINY_SPEC = """\
yamltrace: 1
imports: [yamltrace.examples.tiny]
outputs:
  hidden_states: TinyDecoderLayer
"""


@pytest.fixture
def mixtral_config(tmp_path: Path) -> str:
    """A tiny Mixtral: 4 experts, 2 per token; the dummy input has 2 x 3 = 6 tokens."""
    config = {
        "vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "num_local_experts": 4, "num_experts_per_tok": 2,
    }  # fmt: skip
    path = tmp_path / "mixtral.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return str(path)


def _shipped(name: str) -> Path:
    import yamltrace.specs

    return yamltrace.specs.path(name)


def write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return str(path)


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    status = main(["check", *argv])
    return status, capsys.readouterr().out.splitlines()


def test_a_bare_router_takes_the_scores_and_is_told_to_use_index_0(
    tmp_path: Path, mixtral_config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = write(tmp_path, "router.yaml", BARE_ROUTER)
    status, lines = check(capsys, spec, "--model", MIXTRAL, "--config", mixtral_config)
    assert status == 0  # a warning does not fail the check
    assert lines[1] == (
        "outputs: hidden_states[0] MixtralDecoderLayer (line 4): 2 module(s): model.layers.0, model.layers.1; the output: (2, 3, 16), fits hidden_states"
    )
    assert lines[2] == (
        "outputs: router_logits[0] MixtralTopKRouter (line 5): 2 module(s): model.layers.0.mlp.gate, model.layers.1.mlp.gate; "
        "element 1 of 3: (6, 2), does not fit router_logits"
    )
    assert lines[3] == (
        f"{spec}:5:18: $.outputs.router_logits: warning: output 'router_logits' is [batch*seq, experts] = (6, 4) "
        "(docs/vocabulary.md), but this recorder takes element 1 of 3: (6, 2); element 0 of the output is (6, 4): use index: 0"
    )
    assert lines[-1] == "1 file, 0 invalid, 0 problems, 1 warning"


def test_the_shipped_mixtral_spec_takes_the_logits_and_fits_every_key(
    mixtral_config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, lines = check(capsys, str(_shipped("mixtral")), "--model", MIXTRAL, "--config", mixtral_config)
    assert status == 0
    assert any(
        line.startswith("outputs: router_logits[0] MixtralTopKRouter")
        and line.endswith("element 0 of 3: (6, 4), fits router_logits")
        for line in lines
    )
    assert any(
        line.startswith("outputs: attentions[0] MixtralAttention")
        and line.endswith("element 1 of 2: (2, 2, 3, 3), fits attentions")
        for line in lines
    )
    assert lines[-1] == "1 file, 0 invalid, 0 problems, 0 warnings"


def test_attention_weights_under_sdpa_warn_and_the_eager_option_builds_eager(
    tmp_path: Path, mixtral_config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = write(tmp_path, "plain.yaml", ATTENTIONS.format(options=""))
    eager = write(tmp_path, "eager.yaml", ATTENTIONS.format(options="options: {attn_implementation: eager}\n"))
    status, lines = check(capsys, plain, eager, "--model", MIXTRAL, "--config", mixtral_config)
    assert status == 0
    assert lines[1].endswith("; element 1 of 2: None")
    assert lines[2].startswith(
        f"{plain}:4:15: $.outputs.attentions: warning: output 'attentions' captures attention weights, but MixtralAttention "
        "at model.layers.0.self_attn runs attn_implementation 'sdpa', which computes none"
    )
    assert "add `options: {attn_implementation: eager}` to the spec" in lines[2]
    assert lines[4].endswith("; element 1 of 2: (2, 2, 3, 3), fits attentions")  # the eager spec's model is built eager
    assert lines[-1] == "2 files, 0 invalid, 0 problems, 1 warning"


def test_many_specs_and_a_directory_share_one_build_per_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    builds = []
    original = TinyModel.__init__

    def counted(self: TinyModel, *args: object, **kwargs: object) -> None:
        builds.append(1)
        original(self, *args, **kwargs)

    monkeypatch.setattr(TinyModel, "__init__", counted)
    first = write(tmp_path, "one.yaml", TINY_SPEC)
    for name in ("a.yaml", "nested/b.yml", "nested/c.yaml"):
        write(tmp_path / "repo", name, TINY_SPEC)
    status, lines = check(capsys, first, str(tmp_path / "repo"), "--model", TINY)
    assert status == 0
    assert len(builds) == 1
    headers = [line for line in lines if line.endswith("on TinyModel (built on the meta device):")]
    assert [h.split(" on ")[0] for h in headers] == [
        first,
        str(tmp_path / "repo" / "a.yaml"),
        str(tmp_path / "repo" / "nested" / "b.yml"),
        str(tmp_path / "repo" / "nested" / "c.yaml"),
    ]
    assert lines[-1] == "4 files, 0 invalid, 0 problems, 0 warnings"


def test_a_spec_without_model_uses_its_model_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    named = write(tmp_path, "named.yaml", TINY_SPEC.replace("imports:", f"model: {TINY}\nimports:"))
    bare = write(tmp_path, "bare.yaml", TINY_SPEC)
    status, lines = check(capsys, named, bare)
    assert status == 1
    assert lines[0] == f"{named} on TinyModel (built on the meta device):"
    assert lines[-2] == (
        f"{bare}: $: no model to check this spec on: give --model pkg.mod:Class or --checkpoint DIR, or write the spec's `model:` key"
    )


def test_json_and_github_formats(tmp_path: Path, mixtral_config: str, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, "router.yaml", BARE_ROUTER)
    status = main(["check", spec, "--model", MIXTRAL, "--config", mixtral_config, "--format", "json"])
    document = json.loads(capsys.readouterr().out)
    assert status == 0 and document["valid"] is True
    assert document["summary"] == {"files": 1, "invalid": 0, "unreadable": 0, "problems": 0, "warnings": 1}
    (entry,) = document["files"]
    assert entry["status"] == "valid" and entry["issues"] == []
    assert entry["warnings"][0]["line"] == 5 and entry["warnings"][0]["json_path"] == "$.outputs.router_logits"
    assert entry["warnings"][0]["message"].endswith("use index: 0")
    assert entry["notes"][2].endswith("element 1 of 3: (6, 2), does not fit router_logits")
    status = main(["check", spec, "--model", MIXTRAL, "--config", mixtral_config, "--format", "github"])
    out = capsys.readouterr().out.splitlines()
    assert status == 0 and len(out) == 1
    assert out[0].startswith(
        f"::warning file={spec},line=5,col=18,title=yamltrace::$.outputs.router_logits: output 'router_logits' is"
    )


def test_a_dead_recorder_is_an_error_annotation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = write(tmp_path, "dead.yaml", TINY_SPEC.replace("TinyDecoderLayer", "{class_name: .nowhere}"))
    status = main(["check", spec, "--model", TINY, "--format", "github"])
    out = capsys.readouterr().out.splitlines()
    assert status == 1
    assert out[0].startswith(
        f"::error file={spec},line=4,col=18,title=yamltrace::$.outputs.hidden_states: output 'hidden_states'"
    )


def test_a_walked_directory_skips_non_specs_and_honours_exclude(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`check DIR` walks as `validate` does: YAML without a top-level `yamltrace:` key is skipped and
    counted, `--exclude` leaves files out; the specs found are checked."""
    write(tmp_path, "tiny.yaml", TINY_SPEC)
    write(tmp_path, ".pre-commit-config.yaml", "repos: []\n")
    (tmp_path / "drafts").mkdir()
    write(tmp_path / "drafts", "broken.yaml", "yamltrace: 1\noutputs: {hidden_states: NoSuchLayer}\n")
    status = main(["check", str(tmp_path), "--model", TINY, "--exclude", "drafts"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "1 file, 0 invalid" in out and "1 YAML file skipped" in out
    assert "broken.yaml" not in out
