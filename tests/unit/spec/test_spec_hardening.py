"""A hostile spec can neither end the process, nor hang it, nor turn into a huge error (issue #12).

Each test names the finding it covers; each fails without the defence it checks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import DATA

from yamltrace.errors import MAX_ISSUES, MAX_MESSAGE_CHARS, SpecError, SpecIssue, did_you_mean
from yamltrace.spec import load_spec, read_spec_document, validate_spec
from helpers_spec import refused, spec


# 1. Importing a module a spec names never runs a program or ends the process.


@pytest.mark.parametrize("module", ["yamltrace.__main__", "torch.utils.model_dump.__main__"])
def test_main_modules_are_never_imported(module: str) -> None:
    before = module in sys.modules
    message = refused(spec(f"imports: [{module}]\noutputs: {{}}\n"), trust_imports=True)
    assert "a __main__ module: importing it runs a program" in message
    assert (module in sys.modules) == before


@pytest.mark.parametrize(
    "body",
    [
        "outputs:\n  h: yamltrace.__main__:Anything\n",
        "outputs:\n  h: [{target: yamltrace.__main__.Anything}]\n",
        "model: yamltrace.__main__:Model\n",
        "patches:\n  A: {replace_with: yamltrace.__main__:Anything}\n",
    ],
)
def test_main_module_is_refused_in_a_class_reference(body: str) -> None:
    assert "__main__ module" in refused(spec(body), trust_imports=True)


@pytest.fixture
def plugins_path(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(DATA / "plugins"))
    yield
    for name in [m for m in sys.modules if m == "ytplugins" or m.startswith("ytplugins.")]:
        del sys.modules[name]


def test_system_exit_while_importing_is_a_spec_error(plugins_path) -> None:
    with pytest.raises(SpecError, match=r"importing module 'ytplugins.exits' failed: SystemExit: 3"):
        load_spec(spec("imports: [ytplugins.exits]\noutputs: {}\n"), trust_imports=True)


def test_keyboard_interrupt_while_importing_passes_through(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    def interrupted(name: str, package: str | None = None):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib, "import_module", interrupted)
    with pytest.raises(KeyboardInterrupt):
        load_spec(spec("imports: [not_imported_anywhere_yet]\noutputs: {}\n"), trust_imports=True)


# 4. Uniqueness is checked in linear time, and lists are capped before jsonschema sees them.


def test_duplicates_are_found_among_unorderable_items() -> None:
    message = refused({"yamltrace": 1, "imports": [0, "m0", 1, "m1", "m0"]}, load=False)
    assert "'m0' is listed twice (items 1 and 4); keep one" in message


# 5. Errors are bounded: issue count, issue length, hint work.


def test_issues_are_capped_with_a_count_of_the_rest() -> None:
    outputs = "".join(f"  k{i}: {{target: A, index: one}}\n" for i in range(MAX_ISSUES + 30))
    with pytest.raises(SpecError) as info:
        validate_spec(spec("outputs:\n" + outputs))
    error = info.value
    assert len(error.issues) == MAX_ISSUES + 1 and error.total == MAX_ISSUES + 30
    assert error.issues[-1].message == "and 30 more problems not shown"


def test_an_issue_message_is_capped() -> None:
    issue = SpecIssue("x" * 10 * MAX_MESSAGE_CHARS, "$", "f" * 10 * MAX_MESSAGE_CHARS)
    assert len(issue.message) <= MAX_MESSAGE_CHARS and issue.message.endswith("more characters)")
    assert len(issue.file) <= MAX_MESSAGE_CHARS


def test_hint_work_is_bounded() -> None:
    choices = [f"unrelated{i}" for i in range(5000)] + ["TinyDecoderLayer"]
    assert did_you_mean("TinyDecoderLayr", choices) == ""  # past the first MAX_HINT_CHOICES
    assert did_you_mean("TinyDecoderLayr", ["TinyDecoderLayer", *choices]) == "; did you mean 'TinyDecoderLayer'?"
    assert did_you_mean("x" * 1000, ["x" * 1000]) == ""


def test_unresolved_names_get_hints_only_while_issues_are_shown() -> None:
    names = "".join(f"  k{i}: TinyDecoderLayr\n" for i in range(MAX_ISSUES + 10))
    with pytest.raises(SpecError) as info:
        load_spec(spec("imports: [yamltrace.examples.tiny]\noutputs:\n" + names))
    hinted = [i for i in info.value.issues if "did you mean" in i.message]
    assert 0 < len(hinted) <= MAX_ISSUES and info.value.total == MAX_ISSUES + 10


# 6 and 7. `extends` is capped in depth and confined to the spec's folder.


def chain(tmp_path: Path, length: int) -> Path:
    for i in range(length):
        (tmp_path / f"s{i}.yaml").write_text(spec(f"extends: s{i - 1}.yaml\n" if i else ""))
    return tmp_path / f"s{length - 1}.yaml"


def test_a_very_long_chain_is_a_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="MAX_EXTENDS_DEPTH"):
        read_spec_document(chain(tmp_path, 1200))


@pytest.mark.parametrize("target", ["/etc/passwd", "/proc/self/status", "../outside.yaml", "sub/../../outside.yaml", "~/x.yaml"])
def test_extends_cannot_leave_the_spec_folder(tmp_path: Path, target: str) -> None:
    (tmp_path / "outside.yaml").write_text(spec("outputs: {leak: A}\n"))
    folder = tmp_path / "ckpt"
    (folder / "sub").mkdir(parents=True)
    top = folder / "yamltrace.yaml"
    top.write_text(spec(f"extends: {target}\n"))
    message = refused(top, load=False)
    assert "must be a path relative to this file" in message or "leaves the spec's folder" in message
    assert "leak" not in message and "not found" not in message  # nothing said about what lies outside


def test_extends_cannot_follow_a_symlink_out(tmp_path: Path) -> None:
    (tmp_path / "outside.yaml").write_text(spec("outputs: {leak: A}\n"))
    folder = tmp_path / "ckpt"
    folder.mkdir()
    os.symlink(tmp_path / "outside.yaml", folder / "base.yaml")
    (folder / "yamltrace.yaml").write_text(spec("extends: base.yaml\n"))
    assert "leaves the spec's folder" in refused(folder / "yamltrace.yaml", load=False)


def test_extends_may_go_up_inside_the_folder(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(spec("outputs: {h: A}\n"))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yaml").write_text(spec("extends: ../base.yaml\n"))
    (tmp_path / "top.yaml").write_text(spec("extends: sub/b.yaml\n"))
    assert read_spec_document(tmp_path / "top.yaml").data["outputs"] == {"h": "A"}


# 8. Patch keys are vetted by validate too; every failure is a SpecError.


@pytest.mark.parametrize(
    "key, reason",
    [
        ("a{4294967296}", "not a valid regular expression"),
        ("(" * 1000 + "a" + ")" * 1000, "MAX_STRING_CHARS"),
        ("(" * 150 + "a" + ")" * 150, "MAX_PATTERN_CHARS"),
        ("(" * 100 + "a" + ")" * 100 + "{1001}", "invalid repetition size"),
        ("a{2147483648}", "repeats more than 1000 times"),
        (r"(a)\1", "needs a backtracking regex engine"),
        (r"Attention(?!Old)", "needs a backtracking regex engine"),
        (r"Attention\Z", "write $ for the end"),
        ("(unclosed", "not a valid regular expression"),
    ],
)
def test_bad_patch_keys_are_spec_errors(key: str, reason: str) -> None:
    message = refused({"yamltrace": 1, "patches": {key: "torch.nn:Identity"}})
    assert reason in message


# 9. Parse cost: node, key, text and byte caps, each named.


def test_node_cap_counts_mapping_sources() -> None:
    assert "(MAX_NODES)" in refused({"yamltrace": 1, "imports": [["a"] * 100] * 100})


def test_byte_cap_counts_the_whole_extends_chain(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(spec("# " + "x" * 100 + "\n"))
    (tmp_path / "top.yaml").write_text(spec("extends: base.yaml\n# " + "x" * 100 + "\n"))
    validate_spec(tmp_path / "top.yaml", max_bytes=300)
    with pytest.raises(SpecError, match="larger than 200 bytes"):  # each file alone is under 200 bytes
        validate_spec(tmp_path / "top.yaml", max_bytes=200)


# 10 and 11. Recorder fields and output keys that would load but break capture.


@pytest.mark.parametrize("key", ["__dict__", "__class__", "_private", "to_dict", "layers.count", "1st"])
def test_layer_count_key_must_be_a_public_config_attribute(key: str) -> None:
    recorder = {"target": "torch.nn:Linear", "num_hidden_layers_key": key}
    assert "num_hidden_layers_key" in refused({"yamltrace": 1, "outputs": {"h": recorder}})


def test_a_4000_digit_index_is_refused_briefly() -> None:
    message = refused(spec("outputs:\n  h: {target: torch.nn:Linear, index: " + "9" * 4000 + "}\n"))
    assert "MAX_INTEGER_DIGITS" in message and len(message) < 300


def test_capture_keys_are_not_reserved() -> None:
    outputs = {"hidden_states": "torch.nn:Linear", "attentions": "torch.nn:Linear", "cross_attentions": "torch.nn:Linear"}
    assert set(load_spec({"yamltrace": 1, "outputs": outputs}).outputs) == set(outputs)


# 12. Hidden line breaks.


@pytest.mark.parametrize("char", ["\x85", "\u2028", "\u2029"])
def test_hidden_line_breaks_are_refused(char: str) -> None:
    text = spec(f"outputs: {{}}{char}patches: {{A: torch.nn:Identity}}\n")
    message = refused(text)
    assert "<string>:2:12: $:" in message and "could hide a line" in message
    assert "could hide a line" in refused(text.encode("utf-8"), load=False)


# 14. Smaller findings.


@pytest.mark.parametrize("version", ["1.0", "true", "'1'"])
def test_format_version_must_be_the_integer_1(version: str) -> None:
    assert "$.yamltrace" in refused(f"yamltrace: {version}\n")


@pytest.mark.parametrize(
    "document",
    [
        {"imports": ["torch\n"]},
        {"model": "TinyModel\n"},
        {"outputs": {"h": "torch.nn:Linear\n"}},
        {"outputs": {"h": {"target": "torch.nn:Linear", "to": "cpu\n"}}},
        {"outputs": {"h": {"target": "torch.nn:Linear", "num_hidden_layers_key": "n_layer\n"}}},
        {"patches": {"A": "torch.nn:Identity\n"}},
    ],
)
def test_names_ending_in_a_newline_are_refused(document: dict) -> None:
    refused({"yamltrace": 1, **document})
