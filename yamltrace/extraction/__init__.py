"""Extraction at scale: a dataset's activations streamed to sharded safetensors, read back lazily.

`extract` runs a model over batches under `trace` and writes every capture (after the spec's
`layers` and `dtype` selection) to `shard-*.safetensors` files and an `index.json`, on one process
or many (`torch.distributed`); `open_activations` reads them back by key, layer and row range.
See docs/extract.md.
"""

from ._index import ExtractError
from ._reader import Activations, open_activations
from ._run import DEFAULT_INPUTS, DEFAULT_SHARD_BYTES, ExtractInterrupted, extract

__all__ = [
    "Activations",
    "DEFAULT_INPUTS",
    "DEFAULT_SHARD_BYTES",
    "ExtractError",
    "ExtractInterrupted",
    "extract",
    "open_activations",
]
