"""Patch keys run in linear time (RE2) with transformers' lookup rules for ordinary patterns (issue #12, item 3)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT
from torch import nn

from yamltrace.errors import SpecError
from yamltrace.spec import load_spec
from yamltrace.spec._patch_rule import PatchRule
from yamltrace.spec._patterns import MAX_PATTERN_CHARS, compile_pattern

HOSTILE = [r"^(\w+\w?)+!$", r"^((((\w+)+)+)+)+!$", "^(a|aa)*" + "(a|aa)*" * 30 + "!$", "(.*)*" * 40 + "!"]


class A(nn.Module):
    pass


class B(nn.Module):
    pass


@pytest.mark.slow  # a child process under a timeout
def test_hostile_patterns_finish_at_once() -> None:
    # In a child process, so a backtracking engine would show as a timeout instead of hanging the suite;
    # Python's re takes minutes on each of these over a 30-character name.
    code = (
        "import torch\n"
        "from yamltrace.spec._patch_rule import PatchRule\n"
        "from yamltrace.spec import load_spec\n"
        f"hostile = {HOSTILE!r}\n"
        "names = ['A' * 30, 'a' * 30, 'LlamaDecoderLayerForCausalLMxxxxxxxx']\n"
        "spec = load_spec({'yamltrace': 1, 'patches': {k: 'torch.nn:Identity' for k in hostile}})\n"
        "mapping = {p.pattern: p.replacement for p in spec.patches}\n"
        "assert all(PatchRule(mapping).replacement_for(n) is None for n in names)\n"
        "assert all(PatchRule({k: torch.nn.Identity}).replacement_for(n) is None for n in names for k in hostile)\n"
        "print('done')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]


def test_exact_name_wins_then_first_pattern_in_order() -> None:
    mapping = {"Attention": A, "LlamaAttention": B, "^Llama": A}
    assert PatchRule(mapping).replacement_for("LlamaAttention") is B
    assert PatchRule(mapping).key_for("MyAttention") == "Attention"  # unanchored: search
    assert PatchRule(mapping).key_for("LlamaMLP") == "^Llama"
    assert PatchRule(mapping).replacement_for("GPT2MLP") is None


@pytest.mark.parametrize(
    "pattern, name, matches",
    [(r"^Llama\d+Attention$", "Llama2Attention", True), (r"(?i)^llama", "LlamaModel", True), (r"MLP$", "MLPs", False),
     ("Attn|Attention", "SelfAttention", True), (r"^(?P<p>Qwen)\d", "Qwen2Moe", True)],
)  # fmt: skip
def test_ordinary_patterns_mean_what_re_search_means(pattern: str, name: str, matches: bool) -> None:
    import re

    assert bool(compile_pattern(pattern).search(name)) is matches is bool(re.search(pattern, name))
    assert (PatchRule({pattern: A}).replacement_for(name) is A) is matches


def test_python_code_may_still_register_backtracking_patterns() -> None:
    # Only a spec's keys are vetted: a lookahead registered from Python keeps transformers' meaning.
    assert PatchRule({r"Attention(?!Old)": A}).replacement_for("LlamaAttention") is A
    assert PatchRule({r"Attention(?!Old)": A}).replacement_for("LlamaAttentionOld") is None
    with pytest.raises(SpecError, match="needs a backtracking regex engine"):
        load_spec({"yamltrace": 1, "patches": {r"Attention(?!Old)": "torch.nn:Identity"}})


def test_invalid_python_patterns_never_match() -> None:
    assert PatchRule({"a{4294967296}": A, "(unclosed": B, "(" * 2000: A}).replacement_for("A" * 10) is None


def test_pattern_length_cap() -> None:
    compile_pattern("A" * MAX_PATTERN_CHARS)
    with pytest.raises(ValueError, match="MAX_PATTERN_CHARS"):
        compile_pattern("A" * (MAX_PATTERN_CHARS + 1))
