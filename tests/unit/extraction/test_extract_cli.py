"""`yamltrace extract`: a checkpoint with its spec, errors before any shard (bad rows, usage, an unknown
key or builtin spec, an output path that is a file), resume refused after a change of seed, data or
tokenizer, and what a finished rerun says."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers_extract import TEXTS, tiny_tokenizer, SPEC, command

import yamltrace
from yamltrace.cli import main
from yamltrace.examples.tiny import TinyConfig, TinyModel
from yamltrace.extraction import open_activations


def test_a_checkpoint_and_its_spec(inputs, tmp_path: Path, capsys) -> None:
    from yamltrace import save_pretrained

    torch.manual_seed(0)
    save_pretrained(TinyModel(TinyConfig()).eval(), tmp_path / "ckpt", spec=SPEC)
    argv = command(inputs, "--quiet")
    argv[argv.index("--config") : argv.index("--config") + 2] = ["--checkpoint", str(tmp_path / "ckpt")]
    argv[argv.index("--spec") : argv.index("--spec") + 2] = []
    assert main(argv) == 0 and capsys.readouterr() == ("", "")
    assert open_activations(inputs["out"]).layers("hidden_states") == [0, 4]


def test_a_missing_text_field_fails_before_any_shard(inputs, capsys) -> None:
    assert main(command(inputs, "--text-field", "body")) == 1
    err = capsys.readouterr().err
    assert err.startswith(
        f"yamltrace extract: error: {inputs['data']}: 14 bad row(s):\n  line 1: no field 'body' (fields: n, text)"
    )
    assert not inputs["out"].exists()


def test_an_empty_file_fails_before_any_shard(inputs, capsys) -> None:
    inputs["data"].write_text("")
    assert main(command(inputs)) == 1
    assert "the file holds no rows" in capsys.readouterr().err and not inputs["out"].exists()


def test_an_unknown_key_fails_before_any_shard(inputs, capsys) -> None:
    assert main(command(inputs, "--outputs", "hidden_state")) == 1
    assert "output 'hidden_state' is not in the spec" in capsys.readouterr().err
    assert not any(inputs["out"].glob("*"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--model", "yamltrace.examples.tiny"], "write it as package.module:ClassName"),
        (["--model", "yamltrace.examples.tiny:Nope"], "yamltrace.examples.tiny has no Nope"),
        (["--split", "train"], "--split goes with --dataset"),
    ],
)
def test_usage_errors(inputs, capsys, change: list[str], message: str) -> None:
    argv = command(inputs)
    if change[0] in argv:
        argv[argv.index(change[0]) + 1] = change[1]
    else:
        argv += change
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_builtin_specs_are_read_from_the_library_when_it_ships(inputs, capsys) -> None:
    argv = command(inputs)
    argv[argv.index("--spec") + 1] = "builtin:no-such-spec"
    if (Path(yamltrace.__file__).parent / "specs" / "__init__.py").is_file():
        assert main(argv) == 1  # the library's own error for an unknown name
        assert "no-such-spec" in capsys.readouterr().err
    else:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "--spec builtin:no-such-spec: this version of yamltrace ships no builtin specs yet" in err
    assert not inputs["out"].exists()


def test_deeply_nested_json_is_reported_as_a_bad_row(inputs, capsys) -> None:
    with open(inputs["data"], "a", encoding="utf-8") as f:
        f.write('{"text": "x", "deep": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    assert main(command(inputs)) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"yamltrace extract: error: {inputs['data']}: 1 bad row(s):",
        "  line 15: JSON nested too deeply to read",
    ]


def resume_refused(inputs, capsys, argv: list[str], differs: str) -> None:
    """The run is refused in one line that names what differs from the run that wrote the folder."""
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "holds shards of another run" in err
    assert f": its {differs} differs from this run's. Use an empty directory" in err, err


def test_resume_is_refused_after_a_seed_a_data_or_a_tokenizer_change(inputs, tmp_path: Path, capsys) -> None:
    assert main(command(inputs, "--quiet")) == 0
    resume_refused(inputs, capsys, command(inputs, "--quiet", "--seed", "1"), "seed (--seed)")
    original = inputs["data"].read_bytes()
    inputs["data"].write_bytes(original.replace(b"the cat", b"the rat"))  # the same size, other rows
    assert len(inputs["data"].read_bytes()) == len(original)
    resume_refused(inputs, capsys, command(inputs, "--quiet"), "data file's content")
    inputs["data"].write_bytes(original)
    tiny_tokenizer(inputs["tokenizer"], [*TEXTS, "zebra zebra"])  # one more word: another vocabulary
    resume_refused(inputs, capsys, command(inputs, "--quiet"), "tokenizer")


def test_a_finished_rerun_says_it_is_finished_not_0_of_0(inputs, capsys) -> None:
    assert main(command(inputs)) == 0
    capsys.readouterr()
    assert main(command(inputs)) == 0
    out, err = capsys.readouterr()
    assert err == "extract: already finished: all 4 batch(es) are in finished shards\n"
    assert out.startswith("wrote 14 rows of")


def test_an_output_path_that_is_a_file_is_one_line(inputs, capsys) -> None:
    inputs["out"].write_text("not a folder")
    assert main(command(inputs, "--quiet")) == 1
    assert (
        capsys.readouterr().err
        == f"yamltrace extract: error: {inputs['out']}: cannot use it as the output folder (a file); choose another --out / out_dir.\n"
    )
