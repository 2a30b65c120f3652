"""The YAML loader is a safe loader, and an alias bomb fails at the first anchor over the cap,
without expanding."""

from __future__ import annotations


import pytest
import yaml

from yamltrace.spec import _yaml as source_module
from yamltrace.errors import SpecError
from yamltrace.spec import read_spec_document


def messages(text: str | bytes, **kwargs: object) -> list[str]:
    with pytest.raises(SpecError) as caught:
        read_spec_document(text, **kwargs)
    return [issue.render() for issue in caught.value.issues]


def test_the_loader_is_a_safe_loader() -> None:
    assert issubclass(source_module._SpecLoader, yaml.SafeLoader)


def test_alias_bomb_fails_at_the_first_anchor_without_expanding(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    rows += [f"{b}: &{b} [{', '.join(['*' + a] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")]
    bomb = "\n".join(rows) + "\n"
    composed = []
    original = source_module._SpecLoader.compose_node

    def counting(self: object, parent: object, index: object) -> object:
        composed.append(index)
        return original(self, parent, index)

    monkeypatch.setattr(source_module._SpecLoader, "compose_node", counting)
    assert messages(bomb) == ["<string>:1:4: $: anchors (&a) are not allowed in a spec; write the value out"]
    # The root mapping, the key `a` and its anchored value: nothing past the first anchor is composed.
    assert len(composed) <= 3
