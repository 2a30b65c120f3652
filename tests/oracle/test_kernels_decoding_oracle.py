"""Every shipped family decodes with the kernels swapped in exactly as without them (CPU, float32).

A prefill then one cached decode step gives the full forward's last logits, with the cache filled by
the replacement attention (a kernel that lost the cache leaves it empty), and greedy `generate` of 8
tokens equals the unpatched model's token for token, with the same logits at every step, both with
the kernels swapped in by `patch_model` and with a model loaded by `from_pretrained` whose spec's
`patches:` build them by their constructors. Generation uses untied output embeddings: with the tiny models' tied ones, Gemma repeats one token whatever the
cache holds. The cache is passed under the installed
transformers' name; these tests run on every release of the CI matrix, so a renamed argument fails
here instead of in a user's generation.
"""

from __future__ import annotations

import pytest
import torch
from kernel_families import FAMILIES, SEQ, build, cached, ids, model_class, replacements, with_cache

from yamltrace.checkpoint import from_pretrained
from yamltrace.patch import patch_model

pytestmark = pytest.mark.oracle

FLOAT32 = dict(atol=1e-5, rtol=0)
NEW_TOKENS = 8
GREEDY = dict(
    max_new_tokens=NEW_TOKENS,
    min_new_tokens=NEW_TOKENS,
    do_sample=False,
    pad_token_id=0,
    return_dict_in_generate=True,
    output_logits=True,
)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_prefill_and_a_cached_step_with_the_kernels_equal_the_full_forward(family):
    from transformers import DynamicCache

    model = cached(family)
    inputs = ids(1)
    with torch.no_grad():
        full = model(inputs, use_cache=False).logits
        with patch_model(model, replacements(family)):
            cache = DynamicCache(config=model.config)
            prefill = model(inputs[:, :-1], **with_cache(cache)).logits
            assert cache.get_seq_length() == SEQ - 1
            step = model(inputs[:, -1:], **with_cache(cache)).logits
            assert cache.get_seq_length() == SEQ
    torch.testing.assert_close(prefill, full[:, :-1], **FLOAT32)
    torch.testing.assert_close(step, full[:, -1:], **FLOAT32)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_generation_with_the_kernels_equals_the_original_token_for_token(family):
    model = build(family, tie_word_embeddings=False)
    inputs = ids(1)
    with torch.no_grad():
        expected = model.generate(inputs, **GREEDY)
        with patch_model(model, replacements(family)):
            got = model.generate(inputs, **GREEDY)
    assert expected.sequences.shape == (1, SEQ + NEW_TOKENS)
    assert len(set(expected.sequences[0, SEQ:].tolist())) > 1, "a degenerate model: every token the same"
    assert got.sequences.tolist() == expected.sequences.tolist()
    torch.testing.assert_close(torch.stack(got.logits), torch.stack(expected.logits), **FLOAT32)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_model_loaded_with_the_kernels_as_patches_generates_the_original_tokens(family, tmp_path):
    reference = build(family, tie_word_embeddings=False)
    reference.save_pretrained(tmp_path)
    patches = "".join(f"  {key!r}: yamltrace.kernels:{cls.__name__}\n" for key, cls in replacements(family).items())
    model = from_pretrained(model_class(family), tmp_path, spec=f"yamltrace: 1\npatches:\n{patches}", attn_implementation="eager")
    assert set(replacements(family).values()) <= {type(m) for m in model.modules()}
    inputs = ids(1)
    with torch.no_grad():
        expected = reference.generate(inputs, **GREEDY)
        got = model.eval().generate(inputs, **GREEDY)
    assert got.sequences.tolist() == expected.sequences.tolist()
    torch.testing.assert_close(torch.stack(got.logits), torch.stack(expected.logits), **FLOAT32)
