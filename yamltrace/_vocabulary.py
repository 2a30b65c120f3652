"""The shared vocabulary of capture keys (docs/vocabulary.md) as data: what each key holds and its shape.

`trace` and `yamltrace check` read it to tell attention weights apart (`ATTENTION_WEIGHT_KEYS`) and to
say whether what a recorder takes fits its key (`shape_fits`). Plain data: no torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

__all__ = [
    "ATTENTION_WEIGHT_KEYS",
    "VOCABULARY",
    "KeyDefinition",
    "returns_no_attention_weights",
    "shape_fits",
    "written_shape",
]

# Dimension names of a definition; a size a model does not state matches any size. "tokens" is one
# token dimension of batch*seq; a leading (batch, seq) may also be flattened to it (OPT's MLP keys).
BATCH, SEQ, HIDDEN, HEADS, EXPERTS, ANY = "batch", "seq", "hidden", "heads", "experts", "any"
TOKENS = "batch*seq"


class KeyDefinition(NamedTuple):
    """One vocabulary key: its `shape` (dimension names, see `shape_fits`), whether it is attention weights,
    and the shape it has in convolutional models (`image_shape`: feature maps), when it has one there."""

    shape: tuple[str, ...]
    attention_weights: bool = False
    image_shape: tuple[str, ...] | None = None


_TOKENWISE = (BATCH, SEQ, HIDDEN)
# A convolutional feature map: [batch, channels, height, width] (channels differ between stages).
_FEATURE_MAP = (BATCH, ANY, ANY, ANY)

VOCABULARY: Mapping[str, KeyDefinition] = {
    "hidden_states": KeyDefinition(_TOKENWISE, image_shape=_FEATURE_MAP),
    "attentions": KeyDefinition((BATCH, HEADS, SEQ, SEQ), attention_weights=True),
    "cross_attentions": KeyDefinition((BATCH, HEADS, SEQ, ANY), attention_weights=True),
    "router_logits": KeyDefinition((TOKENS, EXPERTS)),
    "embeddings": KeyDefinition((BATCH, ANY, HIDDEN)),
    "resid_mid": KeyDefinition(_TOKENWISE),
    "attention_outputs": KeyDefinition(_TOKENWISE),
    "mlp_outputs": KeyDefinition(_TOKENWISE),
    "mlp_activations": KeyDefinition((BATCH, SEQ, ANY)),
    "attention_heads": KeyDefinition((BATCH, SEQ, ANY)),
    "final_norm": KeyDefinition(_TOKENWISE),
    # Vision and diffusion models (docs/vision.md).
    "cross_attention_outputs": KeyDefinition((BATCH, SEQ, ANY)),
    "block_outputs": KeyDefinition(_FEATURE_MAP),
    "down_block_outputs": KeyDefinition(_FEATURE_MAP),
    "mid_block_outputs": KeyDefinition(_FEATURE_MAP),
    "up_block_outputs": KeyDefinition(_FEATURE_MAP),
}

ATTENTION_WEIGHT_KEYS = frozenset(key for key, definition in VOCABULARY.items() if definition.attention_weights)

# transformers attention implementations that return no attention weights (None), or something else in
# their place (flex attention's log-sum-exp on an accelerator); "paged|sdpa" and the like too.
_NO_WEIGHTS = ("sdpa", "flash_attention_2", "flash_attention_3", "flash_attention_4", "flex_attention")


def returns_no_attention_weights(implementation: object) -> bool:
    """Whether a config's `_attn_implementation` computes no attention weights (eager does; None: unknown)."""
    return isinstance(implementation, str) and implementation.rpartition("|")[2] in _NO_WEIGHTS


def _dims(definition: tuple[str, ...], flat: bool) -> tuple[str, ...]:
    if flat and definition[:2] == (BATCH, SEQ):
        return (TOKENS, *definition[2:])
    return definition


def _size(name: str, sizes: Mapping[str, int | None]) -> int | None:
    if name == TOKENS:
        batch, seq = sizes.get(BATCH), sizes.get(SEQ)
        return None if batch is None or seq is None else batch * seq
    return sizes.get(name)


def shape_fits(key: str, shape: Sequence[int], sizes: Mapping[str, int | None]) -> bool:
    """Whether `shape` fits `key`'s definition with the known `sizes` (batch, seq, hidden, heads, experts;
    a missing or None size matches any). A key outside the vocabulary fits any shape."""
    definition = VOCABULARY.get(key)
    if definition is None:
        return True
    candidates = [_dims(definition.shape, flat) for flat in (False, True)]
    if definition.image_shape is not None:
        candidates.append(definition.image_shape)
    for dims in candidates:
        if len(dims) == len(shape) and all(_size(d, sizes) in (None, n) for d, n in zip(dims, shape)):
            return True
    return False


def written_shape(key: str, sizes: Mapping[str, int | None]) -> str:
    """`key`'s definition with the known sizes filled in, e.g. `[batch*seq, experts] = (6, 4)`."""
    dims = VOCABULARY[key].shape
    names = f"[{', '.join(dims)}]"
    known = [_size(d, sizes) for d in dims]
    if any(n is None for n in known):
        return names
    return f"{names} = ({', '.join(str(n) for n in known)})"
