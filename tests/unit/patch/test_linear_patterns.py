"""Patch keys run in linear time (RE2) with transformers' lookup rules for ordinary patterns (issue #12, item 3)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import ROOT
from torch import nn

from yamltrace.errors import SpecError
from yamltrace.patch._registry import find_key, find_replacement
from yamltrace.spec import load_spec
from yamltrace.spec._patterns import MAX_PATTERN_CHARS, compile_pattern

HOSTILE = [r"^(\w+\w?)+!$", r"^((((\w+)+)+)+)+!$", "^(a|aa)*" + "(a|aa)*" * 30 + "!$", "(.*)*" * 40 + "!"]


class A(nn.Module):
    pass


class B(nn.Module):
    pass


def test_hostile_patterns_finish_at_once() -> None:
    # In a child process, so a backtracking engine would show as a timeout instead of hanging the suite;
    # Python's re takes minutes on each of these over a 30-character name.
    code = (
        "import torch\n"
        "from yamltrace.patch._registry import find_replacement\n"
        "from yamltrace.spec import load_spec\n"
        f"hostile = {HOSTILE!r}\n"
        "names = ['A' * 30, 'a' * 30, 'LlamaDecoderLayerForCausalLMxxxxxxxx']\n"
        "spec = load_spec({'yamltrace': 1, 'patches': {k: 'torch.nn:Identity' for k in hostile}})\n"
        "mapping = {p.pattern: p.replacement for p in spec.patches}\n"
        "assert all(find_replacement(n, mapping) is None for n in names)\n"
        "assert all(find_replacement(n, {k: torch.nn.Identity}) is None for n in names for k in hostile)\n"
        "print('done')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]


def test_exact_name_wins_then_first_pattern_in_order() -> None:
    mapping = {"Attention": A, "LlamaAttention": B, "^Llama": A}
    assert find_replacement("LlamaAttention", mapping) is B
    assert find_key("MyAttention", mapping) == "Attention"  # unanchored: search
    assert find_key("LlamaMLP", mapping) == "^Llama"
    assert find_replacement("GPT2MLP", mapping) is None


@pytest.mark.parametrize(
    "pattern, name, matches",
    [(r"^Llama\d+Attention$", "Llama2Attention", True), (r"(?i)^llama", "LlamaModel", True), (r"MLP$", "MLPs", False),
     ("Attn|Attention", "SelfAttention", True), (r"^(?P<p>Qwen)\d", "Qwen2Moe", True)],
)  # fmt: skip
def test_ordinary_patterns_mean_what_re_search_means(pattern: str, name: str, matches: bool) -> None:
    import re

    assert bool(compile_pattern(pattern).search(name)) is matches is bool(re.search(pattern, name))
    assert (find_replacement(name, {pattern: A}) is A) is matches


def test_python_code_may_still_register_backtracking_patterns() -> None:
    # Only a spec's keys are vetted: a lookahead registered from Python keeps transformers' meaning.
    assert find_replacement("LlamaAttention", {r"Attention(?!Old)": A}) is A
    assert find_replacement("LlamaAttentionOld", {r"Attention(?!Old)": A}) is None
    with pytest.raises(SpecError, match="needs a backtracking regex engine"):
        load_spec({"yamltrace": 1, "patches": {r"Attention(?!Old)": "torch.nn:Identity"}})


def test_invalid_python_patterns_never_match() -> None:
    assert find_replacement("A" * 10, {"a{4294967296}": A, "(unclosed": B, "(" * 2000: A}) is None


def test_pattern_length_cap() -> None:
    compile_pattern("A" * MAX_PATTERN_CHARS)
    with pytest.raises(ValueError, match="MAX_PATTERN_CHARS"):
        compile_pattern("A" * (MAX_PATTERN_CHARS + 1))
