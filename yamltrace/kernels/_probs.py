"""`AttentionProbabilities`: the identity module an eager attention passes its probabilities through.

A replacement attention that computes its probabilities as a plain tensor calls
`self.attn_probs(probabilities)` and uses what it returns, so the probabilities become the output of a
module: a recorder can capture them (`target: AttentionProbabilities`) and an intervention can edit
them (zero one token's column, scale a head) before they weigh the values. It holds no state, so the
replacement keeps the original's parameter names.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["AttentionProbabilities"]


class AttentionProbabilities(nn.Module):
    """Returns the attention probabilities it is given, `[batch, heads, query, key]`, unchanged."""

    def forward(self, probabilities: torch.Tensor) -> torch.Tensor:
        return probabilities
