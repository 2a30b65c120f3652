"""Patch keys run in linear time (RE2) with transformers' lookup rules for ordinary patterns (issue #12, item 3)."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
from helpers import ROOT, selected
from torch import nn

from yamltrace.errors import SpecError
from yamltrace.spec import load_spec

HOSTILE = [r"^(\w+\w?)+!$", r"^((((\w+)+)+)+)+!$", "^(a|aa)*" + "(a|aa)*" * 30 + "!$", "(.*)*" * 40 + "!"]
MAX_PATTERN_CHARS = 256  # characters of one patch key (docs/security.md)


class A(nn.Module):
    pass


class B(nn.Module):
    pass


class C(nn.Module):
    pass


def spec_with_key(pattern: str) -> Any:
    """A spec whose one patch key is `pattern` (validated as every spec's keys are) -> torch.nn.Identity."""
    return load_spec({"yamltrace": 1, "patches": {pattern: "torch.nn:Identity"}})


@pytest.mark.slow  # a child process under a timeout
def test_hostile_patterns_finish_at_once() -> None:
    # In a child process, so a backtracking engine would show as a timeout instead of hanging the suite;
    # Python's re takes minutes on each of these over a 30-character name.
    code = (
        "import types\n"
        "from torch import nn\n"
        "from yamltrace.patch import apply_patches\n"
        "from yamltrace.spec import load_spec\n"
        f"hostile = {HOSTILE!r}\n"
        "names = ['A' * 30, 'a' * 30, 'LlamaDecoderLayerForCausalLMxxxxxxxx']\n"
        "module = types.ModuleType('patch_lookup')\n"
        "for n in names:\n"
        "    setattr(module, n, type(n, (nn.Module,), {}))\n"
        "spec = load_spec({'yamltrace': 1, 'patches': {k: 'torch.nn:Identity' for k in hostile}})\n"
        "mapping = {p.pattern: p.replacement for p in spec.patches}\n"
        "for patches in [spec, mapping, *({k: nn.Identity} for k in hostile)]:\n"
        "    with apply_patches(patches, modules=module) as replaced:\n"
        "        assert replaced == (), replaced\n"
        "print('done')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]


def test_exact_name_wins_then_first_pattern_in_order() -> None:
    mapping = {"Attention": A, "LlamaAttention": B, "^Llama": C}
    assert selected(mapping, "LlamaAttention") is B
    assert selected(mapping, "MyAttention") is A  # unanchored: search
    assert selected(mapping, "LlamaMLP") is C
    assert selected(mapping, "GPT2MLP") is None


@pytest.mark.parametrize(
    "pattern, name, matches",
    [(r"^Llama\d+Attention$", "Llama2Attention", True), (r"(?i)^llama", "LlamaModel", True), (r"MLP$", "MLPs", False),
     ("Attn|Attention", "SelfAttention", True), (r"^(?P<p>Qwen)\d", "Qwen2Moe", True)],
)  # fmt: skip
def test_ordinary_patterns_mean_what_re_search_means(pattern: str, name: str, matches: bool) -> None:
    # A spec's key loads only once RE2 compiles it, and is then matched by RE2.
    assert (selected(spec_with_key(pattern), name) is nn.Identity) is matches is bool(re.search(pattern, name))
    assert (selected({pattern: A}, name) is A) is matches


def test_python_code_may_still_register_backtracking_patterns() -> None:
    # Only a spec's keys are vetted: a lookahead registered from Python keeps transformers' meaning.
    assert selected({r"Attention(?!Old)": A}, "LlamaAttention") is A
    assert selected({r"Attention(?!Old)": A}, "LlamaAttentionOld") is None
    with pytest.raises(SpecError, match="needs a backtracking regex engine"):
        load_spec({"yamltrace": 1, "patches": {r"Attention(?!Old)": "torch.nn:Identity"}})


def test_invalid_python_patterns_never_match() -> None:
    assert selected({"a{4294967296}": A, "(unclosed": B, "(" * 2000: A}, "A" * 10) is None


def test_pattern_length_cap() -> None:
    assert selected(spec_with_key("A" * MAX_PATTERN_CHARS), "A" * MAX_PATTERN_CHARS) is nn.Identity
    with pytest.raises(
        ValueError, match=rf"of {MAX_PATTERN_CHARS + 1} characters is over the limit of {MAX_PATTERN_CHARS} \(MAX_PATTERN_CHARS\)"
    ):
        spec_with_key("A" * (MAX_PATTERN_CHARS + 1))
