"""read_spec_document: safe parsing, strict scalars, located problems, sources, size cap and `extends`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from yamltrace.errors import SpecError
from yamltrace.spec import MAX_DEPTH, SpecDocument, read_spec_document


def messages(text: str | bytes, **kwargs: object) -> list[str]:
    with pytest.raises(SpecError) as caught:
        read_spec_document(text, **kwargs)
    return [issue.render() for issue in caught.value.issues]


# Safety.


def test_python_tags_are_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    text = f"yamltrace: 1\nmodel: !!python/object/apply:os.system ['touch {marker}']\n"
    assert messages(text) == [
        "<string>:2:8: $.model: tag !!python/object/apply:os.system is not allowed; "
        "a spec holds only text, numbers, true/false, null, mappings and lists"
    ]
    assert not marker.exists()


@pytest.mark.parametrize("tag", ["!custom", "!!binary", "!!timestamp", "!!set", "!!omap", "!!python/name:os.system"])
def test_unknown_tags_are_refused(tag: str) -> None:
    (message,) = messages(f"yamltrace: 1\nmodel: {tag} x\n")
    assert message.startswith("<string>:2:8: $.model: tag ") and "is not allowed" in message


def test_explicit_str_tag_is_text() -> None:
    assert read_spec_document("a: !!str 12\n").data == {"a": "12"}


def test_alias_is_refused() -> None:
    assert messages("a: 1\nb: *x\n") == ["<string>:2:4: $: aliases (*x) are not allowed in a spec; write the value out"]


def test_anchor_is_refused_even_without_alias() -> None:
    assert messages("a: &x 1\n") == ["<string>:1:4: $: anchors (&x) are not allowed in a spec; write the value out"]


def test_duplicate_keys_are_errors_at_the_second_occurrence() -> None:
    text = "yamltrace: 1\noutputs:\n  a: X\n  b: Y\n  a: Z\n"
    assert messages(text) == ["<string>:5:3: $.outputs.a: duplicate key 'a' (first at line 3); keep one"]


def test_every_duplicate_is_reported() -> None:
    text = "a: 1\na: 2\nb: {c: 1, c: 2}\n"
    assert messages(text) == [
        "<string>:2:1: $.a: duplicate key 'a' (first at line 1); keep one",
        "<string>:3:11: $.b.c: duplicate key 'c' (first at line 3); keep one",
    ]


def test_merge_key_is_refused() -> None:
    assert messages("a:\n  <<: {b: 1}\n") == [
        "<string>:2:3: $.a['<<']: merge keys (<<) are not supported in a spec; write the keys out"
    ]


def test_deep_nesting_is_a_spec_error_not_recursion_error() -> None:
    for text in ["a: " + "[" * 100_000, "a: " + "{b: " * 5000, "a:\n" + "".join("  " * i + "- \n" for i in range(200))]:
        with pytest.raises(SpecError, match="nesting is deeper than"):
            read_spec_document(text)


def test_nesting_up_to_the_limit_is_read() -> None:
    depth = MAX_DEPTH - 1  # the root mapping is one level
    data = read_spec_document("a: " + "[" * (depth - 1) + "]" * (depth - 1)).data
    for _ in range(depth - 1):
        data = data["a"] if isinstance(data, dict) else data[0] if data else data
    assert data == []


# YAML 1.1 surprises: plain scalars stay text unless they are YAML 1.2 core booleans, nulls or decimals.


@pytest.mark.parametrize(
    "word",
    [
        "on",
        "off",
        "yes",
        "no",
        "On",
        "NO",
        "y",
        "n",
        "0o17",
        "0x1F",
        "1_000",
        "012",
        "+1",
        "1:30",
        "2001-12-14",
        ".inf",
        ".nan",
        "1.",
    ],
)
def test_yaml_1_1_scalars_keep_their_text(word: str) -> None:
    assert read_spec_document(f"{word}: {word}\n").data == {word: word}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("False", False),
        ("TRUE", True),
        ("null", None),
        ("~", None),
        ("", None),
        ("0", 0),
        ("-12", -12),
        ("1.5", 1.5),
        ("-2e3", -2000.0),
        ("'on'", "on"),
        ('"12"', "12"),
    ],
)
def test_core_scalars_resolve(text: str, value: object) -> None:
    assert read_spec_document(f"a: {text}\n").data == {"a": value}


@pytest.mark.parametrize("key", ["on", "~", "null", "true", "12", "1.5", "''"])
def test_mapping_keys_are_always_text_as_written(key: str) -> None:
    assert read_spec_document(f"outputs:\n  {key}: X\n").data == {"outputs": {key.strip("'"): "X"}}


@pytest.mark.parametrize(("tag", "value"), [("!!int", "0o17"), ("!!bool", "yes"), ("!!float", "1_0.5"), ("!!null", "x")])
def test_explicit_scalar_tags_follow_the_same_strict_rules(tag: str, value: str) -> None:
    assert messages(f"a: {tag} {value}\n") == [f"<string>:1:4: $.a: {value!r} is not a valid {tag}; quote it to make it text"]


def test_overlong_integer_is_a_spec_error() -> None:
    (message,) = messages("a: " + "9" * 5000 + "\n")
    assert message.startswith("<string>:1:4: $.a: number 99999") and message.endswith("is too long")


def test_complex_keys_are_refused() -> None:
    assert messages("? [a]\n: 1\n") == ["<string>:1:3: $: mapping keys must be plain text, not a list"]


# Document shape and YAML errors.


def test_one_document_only() -> None:
    assert messages("a: 1\n---\nb: 2\n") == ["<string>:2:1: $: a spec is one YAML document; remove the second one"]


@pytest.mark.parametrize("text", ["", "# nothing\n", "---\n"])
def test_empty_spec(text: str) -> None:
    assert messages(text) == ["<string>: $: the spec is empty; it needs at least 'yamltrace: 1'"]


@pytest.mark.parametrize(("text", "kind"), [("- a\n", "a list"), ("just text\n", "a scalar"), ("12\n", "a scalar")])
def test_top_level_must_be_a_mapping(text: str, kind: str) -> None:
    assert messages(text) == [
        f"<string>:1:1: $: the top level of a spec must be a mapping (yamltrace: 1, outputs: ...), not {kind}"
    ]


def test_syntax_errors_are_located() -> None:
    assert messages("a: [b\nc: d\n") == ["<string>:2:2: $: expected ',' or ']', but got ':' (while parsing a flow sequence)"]


def test_control_characters_are_located() -> None:
    assert messages("a: 1\nb: x\x00y\n") == ["<string>:2:5: $: unacceptable character #x0000: special characters are not allowed"]


# Size, encoding and sources.


def test_size_is_capped_for_text_bytes_and_files(tmp_path: Path) -> None:
    text = "a: " + "x" * 100 + "\n"
    message = "the spec is larger than 50 bytes; pass a larger max_bytes= to read it"
    assert messages(text, max_bytes=50) == [f"<string>: $: {message}"]
    assert messages(text.encode(), max_bytes=50) == [f"<string>: $: {message}"]
    path = tmp_path / "big.yaml"
    path.write_text(text)
    assert messages(path, max_bytes=50) == [f"{path}: $: {message}"]
    assert read_spec_document(text, max_bytes=len(text)).data == {"a": "x" * 100}


def test_default_cap_is_256_kibibytes() -> None:
    comment = "#" + "x" * (256 << 10) + "\n"
    assert messages("a: 1\n" + comment) == [
        "<string>: $: the spec is larger than 262144 bytes; pass a larger max_bytes= to read it"
    ]


def test_multibyte_text_is_measured_in_bytes() -> None:
    text = "a: " + "é" * 30 + "\n"  # 34 characters, 64 bytes
    assert messages(text, max_bytes=40)[0].endswith("larger than 40 bytes; pass a larger max_bytes= to read it")


def test_bytes_must_be_utf8() -> None:
    assert messages(b"a: 1\nb: caf\xe9\n") == ["<string>:2:7: $: not UTF-8: byte 0xe9 cannot be decoded; save the file as UTF-8"]
    assert read_spec_document("a: café\n".encode()).data == {"a": "café"}


def test_utf8_byte_order_mark_is_accepted() -> None:
    assert read_spec_document("\ufeffa: 1\n".encode()).data == {"a": 1}


def test_path_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text("yamltrace: 1\n")
    assert read_spec_document(path) == SpecDocument({"yamltrace": 1}, str(path), (str(path),))
    assert read_spec_document(str(path)).file == str(path)
    monkeypatch.chdir(tmp_path)
    assert read_spec_document("spec.yaml").file == "spec.yaml"


def test_one_line_yaml_text_is_text() -> None:
    assert read_spec_document("yamltrace: 1").file is None


def test_missing_and_non_regular_files(tmp_path: Path) -> None:
    assert messages(tmp_path / "nope.yaml") == [f"{tmp_path / 'nope.yaml'}: $: file not found"]
    assert messages(str(tmp_path / "nope.yml")) == [f"{tmp_path / 'nope.yml'}: $: file not found"]
    assert messages(tmp_path) == [f"{tmp_path}: $: not a regular file; a spec must be a YAML file"]


@pytest.mark.slow  # a FIFO
@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    assert messages(fifo) == [f"{fifo}: $: not a regular file; a spec must be a YAML file"]


def test_mapping_source_is_copied_to_plain_data() -> None:
    source = {"yamltrace": 1, "outputs": {"a": ("X", {"target": "Y", "layers": (0, -1)})}}
    document = read_spec_document(source)
    assert document.data == {"yamltrace": 1, "outputs": {"a": ["X", {"target": "Y", "layers": [0, -1]}]}}
    assert document.file is None


def test_mapping_source_problems() -> None:
    looped: dict = {"yamltrace": 1}
    looped["self"] = looped
    assert messages({1: "a", "b": object()}) == [
        "<mapping>: $: mapping keys must be text, got 1",
        "<mapping>: $.b: object is not allowed; a spec holds only text, numbers, true/false, null, mappings and lists",
    ]
    assert any("nesting is deeper than" in m for m in messages(looped))


def test_other_sources_are_refused() -> None:
    assert messages(42) == ["<string>: $: cannot read a spec from int; pass a path, YAML text, bytes or a mapping"]  # type: ignore[arg-type]


# Locations.


def test_issue_locates_values_keys_and_falls_back_to_ancestors() -> None:
    document = read_spec_document("yamltrace: 1\noutputs:\n  attentions: {target: A, index: one}\n")
    assert document.issue(("outputs", "attentions", "index"), "m").render() == "<string>:3:34: $.outputs.attentions.index: m"
    assert document.issue(("outputs", "attentions"), "m", at_key=True).render() == "<string>:3:3: $.outputs.attentions: m"
    assert (
        document.issue(("outputs", "attentions", "layers", 0), "m").render() == "<string>:3:15: $.outputs.attentions.layers[0]: m"
    )


# extends.


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_extends_merges_sections_and_replaces_other_keys(tmp_path: Path) -> None:
    write(
        tmp_path,
        "base/base.yaml",
        "yamltrace: 1\nmodel: A\nimports: [x]\noutputs: {h: H, a: A}\noptions: {tie_last_hidden_states: false}\n",
    )
    child = write(tmp_path, "child.yaml", "yamltrace: 1\nextends: base/base.yaml\nimports: [y]\noutputs: {a: B, r: R}\n")
    document = read_spec_document(child)
    assert document.data == {
        "yamltrace": 1,
        "imports": ["y"],
        "outputs": {"a": "B", "r": "R", "h": "H"},
        "model": "A",
        "options": {"tie_last_hidden_states": False},
    }
    assert list(document.data["outputs"]) == ["a", "r", "h"]
    assert document.files == (str(child), str(tmp_path / "base/base.yaml"))


def test_extends_keeps_each_node_located_in_its_own_file(tmp_path: Path) -> None:
    base = write(tmp_path, "base.yaml", "yamltrace: 1\noutputs:\n  h: H\n")
    child = write(tmp_path, "child.yaml", "yamltrace: 1\nextends: base.yaml\noutputs:\n  a: A\n")
    document = read_spec_document(child)
    assert document.issue(("outputs", "a"), "m").render() == f"{child}:4:6: $.outputs.a: m"
    assert document.issue(("outputs", "h"), "m").render() == f"{base}:3:6: $.outputs.h: m (extends chain: {child} -> {base})"


def test_extends_chain_of_three(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "yamltrace: 1\noutputs: {a: A}\n")
    write(tmp_path, "sub/b.yaml", "yamltrace: 1\nextends: ../a.yaml\noutputs: {b: B}\n")
    c = write(tmp_path, "c.yaml", "yamltrace: 1\nextends: sub/b.yaml\noutputs: {c: C}\n")
    assert read_spec_document(c).data["outputs"] == {"c": "C", "b": "B", "a": "A"}


def test_extends_cycle_names_the_chain(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yaml", "yamltrace: 1\nextends: b.yaml\n")
    b = write(tmp_path, "b.yaml", "yamltrace: 1\nextends: a.yaml\n")
    assert messages(a) == [
        f"{b}:2:10: $.extends: extends cycle: {a} -> {b} -> {a}; remove one of these extends (extends chain: {a} -> {b})"
    ]


def test_extends_missing_base(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yaml", "yamltrace: 1\nextends: gone.yaml\n")
    assert messages(a) == [f"{a}:2:10: $.extends: base spec 'gone.yaml' not found (looked for {tmp_path / 'gone.yaml'})"]


def test_extends_from_text_is_relative_to_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "base.yaml", "yamltrace: 1\noutputs: {h: H}\n")
    monkeypatch.chdir(tmp_path)
    assert read_spec_document("yamltrace: 1\nextends: base.yaml\n").data == {"yamltrace": 1, "outputs": {"h": "H"}}
    assert read_spec_document({"yamltrace": 1, "extends": "base.yaml"}).data == {"yamltrace": 1, "outputs": {"h": "H"}}


def test_base_problems_name_the_chain(tmp_path: Path) -> None:
    base = write(tmp_path, "base.yaml", "yamltrace: 1\nmodel: &m A\n")
    child = write(tmp_path, "child.yaml", "yamltrace: 1\nextends: base.yaml\n")
    assert messages(child) == [
        f"{base}:2:8: $: anchors (&m) are not allowed in a spec; write the value out (extends chain: {child} -> {base})"
    ]


def test_base_size_is_capped(tmp_path: Path) -> None:
    base = write(tmp_path, "base.yaml", "yamltrace: 1\n# " + "x" * 100 + "\n")
    child = write(tmp_path, "child.yaml", "yamltrace: 1\nextends: base.yaml\n")
    assert messages(child, max_bytes=60) == [
        f"{base}: $: the spec is larger than 60 bytes; pass a larger max_bytes= to read it (extends chain: {child} -> {base})"
    ]
