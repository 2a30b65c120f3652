"""Checkpoints that carry their spec: `yamltrace.yaml` beside `config.json` and the weights.

`_spec_file` decides which spec a load uses (shipped, replaced, overlaid) and writes it as written;
`_weights` reads and writes the weights (safetensors, shards, `pytorch_model.bin` without pickled
code); `_hub` fetches a Hub id's spec and files with the weights' revision and cache; `_load` builds
the model under the spec (all or nothing), with the attention implementation it states (`_options`); `_save` writes a checkpoint. Works for yamltrace's own
models and for transformers model classes. See docs/checkpoints.md.
"""

from ._load import from_pretrained, load_yamltrace_model
from ._options import configure_attn_implementation
from ._save import save_pretrained, save_yamltrace_model
from ._spec_file import SPEC_FILE, SpecSource, checkpoint_spec, overlay_spec

__all__ = [
    "SPEC_FILE",
    "SpecSource",
    "checkpoint_spec",
    "configure_attn_implementation",
    "from_pretrained",
    "load_yamltrace_model",
    "overlay_spec",
    "save_pretrained",
    "save_yamltrace_model",
]
