"""Every limit a spec must keep, in one place, and the checks that are not JSON Schema's to make.

A spec may arrive with a downloaded checkpoint, so it is hostile until proven otherwise. These limits
keep the cost of reading and checking the worst accepted spec under about 2 s and 200 MB (figures in
docs/security.md); each refusal names the limit it hit. The checks here are plain data checks: they
import nothing and run before, or beside, the JSON Schema (`_schema`), so `validate` and `load_spec`
refuse the same specs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_MAX_BYTES",
    "MAX_DEPTH",
    "MAX_NODES",
    "MAX_MAPPING_KEYS",
    "MAX_PATCH_KEYS",
    "MAX_LIST_ITEMS",
    "MAX_STRING_CHARS",
    "MAX_INTEGER_DIGITS",
    "MAX_EXTENDS_DEPTH",
    "MAX_RECORDER_INDEX",
    "HIDDEN_LINE_BREAKS",
    "RESERVED_OUTPUT_KEYS",
    "Budget",
    "size_issues",
    "recorder_issues",
    "unique_key",
]

# Bytes of one spec file, and of all the files of an `extends` chain together.
DEFAULT_MAX_BYTES = 256 * 1024
# Nesting a spec needs is about 5 levels; the cap keeps composing far from the recursion limit.
MAX_DEPTH = 64
# YAML nodes (scalars, mappings, lists) in a spec, all the files of an `extends` chain together.
MAX_NODES = 8_000
MAX_MAPPING_KEYS = 1_000  # keys of one mapping (outputs, a recorder)
MAX_PATCH_KEYS = 128  # keys of `patches` (each is a pattern compiled twice when validated)
MAX_LIST_ITEMS = 1_000  # items of one list (imports, recorders of a key, layers)
MAX_STRING_CHARS = 1_000  # characters of one text value or key
MAX_INTEGER_DIGITS = 18  # digits of one integer (anything longer is no index or layer)
MAX_EXTENDS_DEPTH = 16  # files in an `extends` chain, the first included
MAX_RECORDER_INDEX = 1 << 16  # |index| and |layers[i]| of a recorder

# Line breaks to YAML that most editors and diff viewers show inside one line: NEL, LS, PS.
HIDDEN_LINE_BREAKS = {"\x85": "NEL (U+0085)", "\u2028": "LINE SEPARATOR (U+2028)", "\u2029": "PARAGRAPH SEPARATOR (U+2029)"}

# Output keys that would overwrite a field or a method of the model's returned ModelOutput (a capture
# sets each key on it). hidden_states, attentions and cross_attentions are what captures are for.
RESERVED_OUTPUT_KEYS = frozenset(
    {
        # fields a model fills itself
        "last_hidden_state", "pooler_output", "logits", "loss", "past_key_values", "vision_hidden_states",
        # ModelOutput's and dict's methods
        "to_tuple", "keys", "values", "items", "get", "pop", "popitem", "setdefault", "update", "clear",
        "copy", "fromkeys",
    }
)  # fmt: skip

# A config attribute name: an identifier that is not private or a dunder, and not a config method.
_CONFIG_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_CONFIG_METHODS = frozenset(
    {
        "to_dict", "to_json_string", "to_json_file", "to_diff_dict", "save_pretrained", "from_pretrained",
        "from_dict", "from_json_file", "get_config_dict", "update", "load", "save", "get", "keys", "values", "items",
    }
)  # fmt: skip


@dataclass
class Budget:
    """What is left to read of one spec, shared by every file of its `extends` chain."""

    nodes: int = MAX_NODES
    bytes: int = DEFAULT_MAX_BYTES

    def spend_bytes(self, size: int) -> bool:
        """Take `size` bytes; False (taking nothing) when fewer are left."""
        if size > self.bytes:
            return False
        self.bytes -= size
        return True


Issue = Callable[[tuple[str | int, ...], str], None]


def size_issues(data: Any, fail: Issue) -> None:
    """Report every mapping, list, text or integer larger than its limit (`fail(path, message)`)."""
    patches = data.get("patches") if isinstance(data, Mapping) else None
    if isinstance(patches, Mapping) and len(patches) > MAX_PATCH_KEYS:
        fail(("patches",), f"{len(patches)} patch keys are over the limit of {MAX_PATCH_KEYS} (MAX_PATCH_KEYS)")
        return
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, Mapping):
            if len(value) > MAX_MAPPING_KEYS:
                fail(path, f"a mapping of {len(value)} keys is over the limit of {MAX_MAPPING_KEYS} (MAX_MAPPING_KEYS)")
                continue
            for key, item in value.items():
                if isinstance(key, str) and len(key) > MAX_STRING_CHARS:
                    fail((*path, key), f"a key of {len(key)} characters is over the limit of {MAX_STRING_CHARS} (MAX_STRING_CHARS)")
                else:
                    stack.append(((*path, key), item))
        elif isinstance(value, list):
            if len(value) > MAX_LIST_ITEMS:
                fail(path, f"a list of {len(value)} items is over the limit of {MAX_LIST_ITEMS} (MAX_LIST_ITEMS)")
                continue
            stack.extend(((*path, i), item) for i, item in enumerate(value))
        elif isinstance(value, str) and len(value) > MAX_STRING_CHARS:
            fail(path, f"a text of {len(value)} characters is over the limit of {MAX_STRING_CHARS} (MAX_STRING_CHARS)")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**MAX_INTEGER_DIGITS:
            fail(path, f"an integer of more than {MAX_INTEGER_DIGITS} digits is over the limit (MAX_INTEGER_DIGITS)")


_MAIN_MESSAGE = "names a __main__ module: importing it runs a program; a spec may import only library modules"


def _main_module(reference: Any) -> bool:
    return isinstance(reference, str) and "__main__" in re.split(r"[.:]", reference)


def main_module_issues(data: Mapping[str, Any], fail: Issue) -> None:
    """Module names and class references under a `__main__` module (found without importing anything)."""
    imports = data.get("imports")
    for i, name in enumerate(imports if isinstance(imports, list) else ()):
        if _main_module(name):
            fail(("imports", i), f"{name!r} {_MAIN_MESSAGE}")
    if _main_module(data.get("model")):
        fail(("model",), f"{data['model']!r} {_MAIN_MESSAGE}")
    for section, field in (("outputs", "target"), ("patches", "replace_with")):
        entries = data.get(section)
        for key, value in entries.items() if isinstance(entries, Mapping) else ():
            items: Iterable[tuple[int | None, Any]] = enumerate(value) if isinstance(value, list) else [(None, value)]
            for position, item in items:
                path = (section, key) if position is None else (section, key, position)
                reference = item.get(field) if isinstance(item, Mapping) else item
                if _main_module(reference):
                    fail((*path, field) if isinstance(item, Mapping) else path, f"{reference!r} {_MAIN_MESSAGE}")


def recorder_issues(data: Mapping[str, Any], fail: Issue) -> None:
    """Output keys and recorder fields that would load but break capture (reserved keys, config keys, indices)."""
    main_module_issues(data, fail)
    outputs = data.get("outputs")
    if not isinstance(outputs, Mapping):
        return
    for key, value in outputs.items():
        if key in RESERVED_OUTPUT_KEYS:
            fail(("outputs", key), f"output key {key!r} is reserved: it would overwrite the model output's own "
                 f"{key!r}; choose another name (reserved: {', '.join(sorted(RESERVED_OUTPUT_KEYS))})")  # fmt: skip
        located = [((i,), v) for i, v in enumerate(value)] if isinstance(value, list) else [((), value)]
        for where, recorder in located:
            if isinstance(recorder, Mapping):
                _recorder_fields(("outputs", key, *where), recorder, fail)


def _recorder_fields(path: tuple[str | int, ...], recorder: Mapping[str, Any], fail: Issue) -> None:
    config_key = recorder.get("num_hidden_layers_key")
    if isinstance(config_key, str) and (not _CONFIG_KEY.fullmatch(config_key) or config_key in _CONFIG_METHODS):
        fail((*path, "num_hidden_layers_key"), f"{config_key!r} is not a config attribute that counts layers: "
             "write a public attribute name such as num_hidden_layers or n_layer (no leading _, not a method)")  # fmt: skip
    index = recorder.get("index")
    if _out_of_range(index):
        fail((*path, "index"), f"index {index} is out of range; use -{MAX_RECORDER_INDEX} .. {MAX_RECORDER_INDEX}")
    layers = recorder.get("layers")
    if isinstance(layers, list):
        for i, layer in enumerate(layers):
            if _out_of_range(layer):
                fail((*path, "layers", i), f"layer {layer} is out of range; use -{MAX_RECORDER_INDEX} .. {MAX_RECORDER_INDEX}")


def _out_of_range(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_RECORDER_INDEX


def unique_key(value: Any) -> str:
    """A hashable key equal for JSON-equal values (1 and 1.0 alike, true and 1 apart), for linear uniqueness."""
    return json.dumps(value, sort_keys=True, default=repr, allow_nan=True)
