"""`yamltrace extract`: the same rows as the Python API, errors before any shard, progress output."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from helpers import ROOT
from helpers_extract import TEXTS, tiny_tokenizer

import yamltrace
from yamltrace.cli import main
from yamltrace.examples.tiny import TinyConfig, TinyModel
from yamltrace.extraction import extract, open_activations
from yamltrace.extraction._data import TokenizedBatches, load_tokenizer, open_texts
from yamltrace.extraction._progress import Progress

SPEC = str(ROOT / "specs" / "tiny-last-layers.yaml")
MODEL = "yamltrace.examples.tiny:TinyModel"


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    config = tmp_path / "config.json"
    TinyConfig().save(config)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(TEXTS * 2)), encoding="utf-8")
    return {"config": config, "data": data, "tokenizer": tiny_tokenizer(tmp_path / "tok"), "out": tmp_path / "out"}


def command(inputs: dict[str, Path], *extra: str) -> list[str]:
    return [
        "extract", "--model", MODEL, "--config", str(inputs["config"]), "--spec", SPEC, "--data", str(inputs["data"]),
        "--tokenizer", str(inputs["tokenizer"]), "--max-length", "6", "--batch-size", "4", "--out", str(inputs["out"]), *extra,
    ]  # fmt: skip


def test_the_command_stores_what_the_api_stores(inputs, tmp_path: Path, capsys) -> None:
    from yamltrace.extraction._data import file_sha256, tokenizer_sha256

    assert main(command(inputs)) == 0
    out, err = capsys.readouterr()
    assert out == f"wrote 14 rows of hidden_states, attentions, input_ids, attention_mask in 1 shard(s) to {inputs['out']}\n"
    assert "extract: 4/4 batches, 14 rows" in err
    torch.manual_seed(0)
    model = TinyModel(TinyConfig()).eval()
    tokenizer = load_tokenizer(inputs["tokenizer"])
    batches = TokenizedBatches(open_texts(inputs["data"]), tokenizer, batch_size=4, max_length=6)
    expected = extract(model, SPEC, batches, tmp_path / "api", progress=False)
    got = open_activations(inputs["out"])
    assert got.keys() == expected.keys() and len(got) == len(expected) == 14
    for key in got:
        assert torch.equal(got.get(key), expected.get(key)), key
    assert got.index["run"]["data"] == {
        "data": str(inputs["data"]), "bytes": inputs["data"].stat().st_size, "sha256": file_sha256(inputs["data"]),
        "text_field": "text", "tokenizer": str(inputs["tokenizer"]), "tokenizer_sha256": tokenizer_sha256(tokenizer),
        "max_length": 6, "batch_size": 4, "seed": 0,
    }  # fmt: skip


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


def test_progress_on_a_terminal_redraws_one_line_with_an_eta() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

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


def test_a_full_disk_is_one_line(inputs, capsys, monkeypatch) -> None:
    import yamltrace.extraction._writer as writer_module

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer_module, "write_safetensors", disk_full)
    assert main(command(inputs, "--quiet")) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"yamltrace extract: error: writing activation shards to {inputs['out']} failed: No space left on device."
    )
    assert "run the same command again to resume" in line
    assert not any(p.name.endswith(".tmp") for p in inputs["out"].iterdir())


def test_an_interrupted_bar_ends_its_line() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    Progress(10, stream=stream, redraw=1e9).stop()
    assert stream.getvalue() == "", "nothing drawn, nothing to end"
    progress = Progress(10, stream=stream, redraw=1e9)
    progress.update(1, 4)
    progress.stop()
    shown = stream.getvalue()
    assert shown.startswith("\r\033[Kextract [##") and shown.endswith("\n") and shown.count("\n") == 1
