"""Importing is consent: a spec imports only what the user allowed, and names only nn.Module classes."""

from __future__ import annotations

import sys

import pytest
from helpers import DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from yamltrace.errors import SpecError
from yamltrace.spec import default_registry
from yamltrace.spec import validate_spec
from yamltrace.spec import load_spec

PLUGINS = DATA / "plugins"
SIDE_EFFECT = "ytplugins.side_effect"


@pytest.fixture
def flags(monkeypatch: pytest.MonkeyPatch):
    """tests/data/plugins on sys.path and its import log; its modules are forgotten afterwards."""
    default_registry.list()  # discover the default registry's plugins before the test plugin is on the path
    monkeypatch.syspath_prepend(str(PLUGINS))
    from ytplugins import flags

    assert SIDE_EFFECT not in sys.modules and flags.IMPORTED == []
    yield flags
    for name in [m for m in sys.modules if m == "ytplugins" or m.startswith("ytplugins.")]:
        del sys.modules[name]


def _spec(*, outputs: str = "", imports: str = "", patches: str = "") -> str:
    text = "yamltrace: 1\n"
    if imports:
        text += f"imports: [{imports}]\n"
    text += f"outputs:\n  hidden_states: {outputs or 'torch.nn:Identity'}\n"
    if patches:
        text += f"patches:\n  Linear: {patches}\n"
    return text


REFERENCES = {
    "path": _spec(outputs=f"{SIDE_EFFECT}:SideEffectLayer"),
    "dotted path": _spec(outputs=f"{SIDE_EFFECT}.SideEffectLayer"),
    "imports": _spec(outputs="SideEffectLayer", imports=SIDE_EFFECT),
    "patch": _spec(patches=f"{SIDE_EFFECT}:SideEffectLayer"),
}


@pytest.mark.parametrize("text", REFERENCES.values(), ids=REFERENCES.keys())
def test_a_module_is_not_imported_without_consent(flags, text: str) -> None:
    with pytest.raises(SpecError) as info:
        load_spec(text)
    message = str(info.value)
    assert f"module {SIDE_EFFECT!r} is not imported yet" in message
    assert "trust_imports=True" in message
    assert flags.IMPORTED == [] and SIDE_EFFECT not in sys.modules


@pytest.mark.parametrize("text", REFERENCES.values(), ids=REFERENCES.keys())
def test_trust_imports_imports_it(flags, text: str) -> None:
    spec = load_spec(text, trust_imports=True)
    assert flags.IMPORTED == [SIDE_EFFECT]
    layer = sys.modules[SIDE_EFFECT].SideEffectLayer
    resolved = [r.target_class for r in spec.outputs["hidden_states"]] + [p.replacement for p in spec.patches]
    assert layer in resolved


def test_an_already_imported_module_needs_no_consent(flags) -> None:
    import ytplugins.side_effect

    flags.IMPORTED.clear()
    spec = load_spec(REFERENCES["path"])
    assert spec.outputs["hidden_states"][0].target_class is ytplugins.side_effect.SideEffectLayer
    assert flags.IMPORTED == []


def test_the_model_package_is_an_allowed_root(flags) -> None:
    from ytplugins.objects import Identity

    spec = load_spec(REFERENCES["imports"], for_model=Identity)
    assert flags.IMPORTED == [SIDE_EFFECT]
    assert spec.outputs["hidden_states"][0].target_class.__name__ == "SideEffectLayer"


def test_a_lookalike_of_an_allowed_root_is_refused(flags) -> None:
    with pytest.raises(SpecError, match="module 'torch_kernels.attn' is not imported yet"):
        load_spec(_spec(outputs="torch_kernels.attn:Fused"))


def test_validation_alone_imports_nothing(flags) -> None:
    for text in REFERENCES.values():
        document = validate_spec(text)
        assert document.data["yamltrace"] == 1
    assert flags.IMPORTED == [] and SIDE_EFFECT not in sys.modules


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("os:system", "'os:system' is the function"),
        ("os.system", "'os.system' is the function"),
        ("builtins:eval", "'builtins:eval' is the function"),
        (
            "ytplugins.objects:make_layer",
            "'ytplugins.objects:make_layer' is the function ytplugins.objects.make_layer, not a class",
        ),
        ("ytplugins.objects:layer", "'ytplugins.objects:layer' is an instance of Identity, not a class"),
        ("ytplugins.objects:NotAModule", "resolves to class ytplugins.objects.NotAModule, which is not a subclass of torch.nn"),
        ("subprocess:Popen", "resolves to class subprocess.Popen, which is not a subclass of torch.nn"),
    ],
)
def test_only_module_classes_are_accepted_even_with_trust(flags, reference: str, expected: str) -> None:
    for text in (_spec(outputs=reference), _spec(patches=reference)):
        with pytest.raises(SpecError, match="^" + r"<string>:\d+:\d+: \$\.(outputs|patches)\.\w+: ") as info:
            load_spec(text, trust_imports=True)
        assert expected in str(info.value)


def test_the_checks_apply_to_the_object_not_the_string(flags) -> None:
    # A name that looks like a module class but is bound to something else is refused.
    import ytplugins.objects

    ytplugins.objects.FakeLayer = nn.Identity()
    with pytest.raises(SpecError, match="is an instance of Identity, not a class"):
        load_spec(_spec(outputs="ytplugins.objects:FakeLayer"))


_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
_DOTTED = st.lists(_NAME, min_size=1, max_size=3).map(".".join)
_KNOWN = st.sampled_from(
    [
        "os:system",
        "os.path",
        "subprocess:Popen",
        "importlib:import_module",
        "torch.nn:Linear",
        "torch.nn.Identity",
        "yamltrace.examples.tiny:TinyMLP",
        "TinyAttention",
        "Identity",
        SIDE_EFFECT,
        f"{SIDE_EFFECT}:SideEffectLayer",
        "ytplugins.objects:layer",
    ]
)
_REFERENCE = _KNOWN | _DOTTED | st.tuples(_DOTTED, _DOTTED).map(":".join)
_MODULE = st.sampled_from([SIDE_EFFECT, "ytplugins.objects", "torch.nn", "yamltrace.examples.tiny", "os"]) | _DOTTED
_RECORDER = _REFERENCE | st.fixed_dictionaries({"target": _REFERENCE}, optional={"index": st.integers(-3, 3)})
_DOCUMENT = st.fixed_dictionaries(
    {
        "yamltrace": st.just(1),
        "outputs": st.dictionaries(_NAME, _RECORDER | st.lists(_RECORDER, min_size=1, max_size=2), min_size=1, max_size=3),
    },
    optional={
        "imports": st.lists(_MODULE, max_size=3),
        "patches": st.dictionaries(st.text(max_size=6), _REFERENCE, max_size=2),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(document=_DOCUMENT)
def test_no_spec_imports_without_consent(flags, document: dict) -> None:
    load_spec(_spec())  # warm up: anything loading a spec imports on first use is imported by now
    before = set(sys.modules)
    try:
        spec = load_spec(document)
    except SpecError:
        pass
    else:
        resolved = [r.target_class for rs in spec.outputs.values() for r in rs] + [p.replacement for p in spec.patches]
        assert all(isinstance(c, type) and issubclass(c, nn.Module) for c in resolved)
    new = {m.partition(".")[0] for m in set(sys.modules) - before}
    assert new <= {"torch", "yamltrace"}
    assert flags.IMPORTED == []
