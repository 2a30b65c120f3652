"""Every limit a spec must keep, in one place, and the checks that are not JSON Schema's to make.

A spec may arrive with a downloaded checkpoint, so it is hostile until proven otherwise. These limits
keep the cost of reading and checking the worst accepted spec under about 2 s and 200 MB (figures in
docs/security.md); each refusal names the limit it hit. The checks here are plain data checks: they
import nothing and run before, or beside, the JSON Schema (`_schema`), so `validate` and `load_spec`
refuse the same specs.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._recorder_fields import EDIT_FIELDS, MAX_RECORDER_INDEX, RECORDER_FIELDS, RecorderField, default_index
from ._walk import Site, document_sections, sites

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
    "MAX_RECORDERS",
    "MAX_RECORDERS_PER_KEY",
    "MAX_INTERVENTIONS",
    "MAX_TENSOR_FILES",
    "MAX_TENSOR_FILE_BYTES",
    "MAX_TENSOR_BYTES",
    "MAX_TENSOR_HEADER_BYTES",
    "HIDDEN_LINE_BREAKS",
    "RESERVED_OUTPUT_KEYS",
    "Budget",
    "size_issues",
    "recorder_issues",
    "intervention_issues",
    "intervention_sites",
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
MAX_RECORDERS = 64  # recorders of a spec, root and scopes together (each one is a capture per forward)
MAX_RECORDERS_PER_KEY = 16  # recorders of one output key
MAX_INTERVENTIONS = 64  # interventions of a spec (each one is an edit per hooked module per forward)
# `{tensor: FILE.safetensors:NAME}` values: distinct files a spec reads, the size of one file, and the bytes
# of the tensors read, all files together (a steering vector is kilobytes; one layer's [1, 2048, 4096]
# float32 activations are 32 MiB).
MAX_TENSOR_FILES = 16
MAX_TENSOR_FILE_BYTES = 1 << 30
MAX_TENSOR_BYTES = 256 << 20
MAX_TENSOR_HEADER_BYTES = 256 << 10  # the JSON header of one such file: about 3,000 tensors

# Line breaks to YAML that most editors and diff viewers show inside one line: NEL, LS, PS.
HIDDEN_LINE_BREAKS = {"\x85": "NEL (U+0085)", "\u2028": "LINE SEPARATOR (U+2028)", "\u2029": "PARAGRAPH SEPARATOR (U+2029)"}

# Output keys that would overwrite a field or a method of the model's returned ModelOutput (a capture
# sets each key on it). hidden_states, attentions and cross_attentions are what captures are for.
RESERVED_OUTPUT_KEYS = frozenset(
    {
        # fields a model fills itself
        "last_hidden_state", "pooler_output", "logits", "loss", "past_key_values", "vision_hidden_states",
        # the cache field under every supported transformers version (5.24 names it cache)
        "cache", "cache_params",
        # ModelOutput's and dict's methods
        "to_tuple", "keys", "values", "items", "get", "pop", "popitem", "setdefault", "update", "clear",
        "copy", "fromkeys",
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
                    fail(
                        (*path, key), f"a key of {len(key)} characters is over the limit of {MAX_STRING_CHARS} (MAX_STRING_CHARS)"
                    )
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


def _targets(site: Site) -> list[tuple[tuple[str | int, ...], Any]]:
    """A recorder's class references with their paths: a bare reference, or its `target` (one or a list)."""
    if not isinstance(site.value, Mapping):
        return [(site.path, site.value)]
    target = site.value.get("target")
    if isinstance(target, list):
        return [((*site.path, "target", i), t) for i, t in enumerate(target)]
    return [((*site.path, "target"), target)]


def intervention_sites(data: Mapping[str, Any]) -> list[Site]:
    """Each intervention of a document as a `Site` (key: its name), for the checks recorders and edits share."""
    interventions = data.get("interventions")
    items = interventions.items() if isinstance(interventions, Mapping) else ()
    return [Site("", str(name), 0, ("interventions", name), value) for name, value in items]


def main_module_issues(data: Mapping[str, Any], fail: Issue) -> None:
    """Module names and class references under a `__main__` module (found without importing anything)."""
    imports = data.get("imports")
    for i, name in enumerate(imports if isinstance(imports, list) else ()):
        if _main_module(name):
            fail(("imports", i), f"{name!r} {_MAIN_MESSAGE}")
    if _main_module(data.get("model")):
        fail(("model",), f"{data['model']!r} {_MAIN_MESSAGE}")
    patches = data.get("patches")
    for key, value in patches.items() if isinstance(patches, Mapping) else ():
        path: tuple[str | int, ...] = ("patches", key, "replace_with") if isinstance(value, Mapping) else ("patches", key)
        reference = value.get("replace_with") if isinstance(value, Mapping) else value
        if _main_module(reference):
            fail(path, f"{reference!r} {_MAIN_MESSAGE}")
    recorders = [site for section in document_sections(data) for site in sites(section)]
    for site in recorders + intervention_sites(data):
        for path, reference in _targets(site):
            if _main_module(reference):
                fail(path, f"{reference!r} {_MAIN_MESSAGE}")


def recorder_issues(data: Mapping[str, Any], fail: Issue) -> None:
    """Output keys and recorders that would load but break capture, at the root and in every scope:
    reserved keys, repeated recorders, too many recorders, field values no capture can run."""
    main_module_issues(data, fail)
    total = 0
    for section in document_sections(data):
        for key in section.outputs:
            if key in RESERVED_OUTPUT_KEYS:
                fail((*section.path, key), f"output key {key!r} is reserved: it would overwrite the model output's own "
                     f"{key!r}; choose another name (reserved: {', '.join(sorted(RESERVED_OUTPUT_KEYS))})")  # fmt: skip
        seen: dict[tuple[str, str], int] = {}
        for site in sites(section):
            total += 1
            if total == MAX_RECORDERS + 1:
                fail(site.path, f"a spec may hold {MAX_RECORDERS} recorders in all (MAX_RECORDERS), root and scopes "
                     "together; this is one more: remove the recorders you do not need")  # fmt: skip
            if site.position == MAX_RECORDERS_PER_KEY:
                fail(site.path, f"output {site.key!r} has more than {MAX_RECORDERS_PER_KEY} recorders "
                     "(MAX_RECORDERS_PER_KEY); remove the ones you do not need")  # fmt: skip
            first = seen.setdefault((site.key, _recorder_key(site)), site.position)
            if first != site.position:
                fail(site.path, f"output {site.key!r}: recorder {site.position} repeats recorder {first} (each would "
                     "capture the same tensors again); keep one")  # fmt: skip
            _field_issues(site, RECORDER_FIELDS, fail)


def _field_issues(site: Site, fields: tuple[RecorderField, ...], fail: Issue) -> None:
    """The problems of each field of a recorder or intervention mapping (`RecorderField.check`), located below the field."""
    if not isinstance(site.value, Mapping):
        return
    for field in fields:
        value = site.value.get(field.key)
        if value is not None and isinstance(value, field.types) and (bool in field.types or not isinstance(value, bool)):
            for below, message in field.check(value):
                fail((*site.path, field.key, *below), message)


def intervention_issues(data: Mapping[str, Any], fail: Issue) -> None:
    """Interventions that would load but cannot run: too many, selector fields out of range, heads out of range, numbers that are not finite, an empty or reversed clamp, too
    many tensor files."""
    found = intervention_sites(data)
    if len(found) > MAX_INTERVENTIONS:
        fail(("interventions",), f"{len(found)} interventions are over the limit of {MAX_INTERVENTIONS} (MAX_INTERVENTIONS); "
             "remove the ones you do not need")  # fmt: skip
    files: set[str] = set()
    for site in found:
        if not isinstance(site.value, Mapping):
            continue
        _field_issues(site, EDIT_FIELDS, fail)
        for i, head in enumerate(site.value.get("heads") or ()):
            if isinstance(head, int) and head > MAX_RECORDER_INDEX:
                fail((*site.path, "heads", i), f"head {head} is out of range; use 0 .. {MAX_RECORDER_INDEX}")
        _number_issues(site, fail)
        reference = next((v.get("tensor") for v in map(site.value.get, ("add", "set")) if isinstance(v, Mapping)), None)
        if isinstance(reference, str) and reference.partition(":")[0] not in files:
            files.add(reference.partition(":")[0])
            if len(files) == MAX_TENSOR_FILES + 1:
                fail((*site.path, "add" if "add" in site.value else "set", "tensor"),
                     f"the interventions read more than {MAX_TENSOR_FILES} tensor files (MAX_TENSOR_FILES); "
                     "put the tensors in fewer safetensors files (one file holds many named tensors)")  # fmt: skip


def _number_issues(site: Site, fail: Issue) -> None:
    """Numbers of an operation that no edit should apply (NaN, infinities) and clamps that change nothing or everything."""
    for op in ("add", "set", "scale", "clamp"):
        value = site.value.get(op)
        numbers = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for i, number in numbers:
            if isinstance(number, float) and not math.isfinite(number):
                where = (*site.path, op) if i is None else (*site.path, op, i)
                fail(where, f"{number} is not a finite number; an edit takes finite values (write null for no clamp bound)")
    clamp = site.value.get("clamp")
    if isinstance(clamp, list) and len(clamp) == 2:
        low, high = clamp
        if low is None and high is None:
            fail(
                (*site.path, "clamp"),
                "clamp [null, null] changes nothing; give a low or a high bound, or remove the intervention",
            )
        elif _number(low) and _number(high) and low > high:
            fail((*site.path, "clamp"), f"clamp [{low}, {high}]: low is above high; write [{high}, {low}]")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _recorder_key(site: Site) -> str:
    """A recorder with every default filled in, as a key equal for recorders that capture the same."""
    value = site.value if isinstance(site.value, Mapping) else {"target": site.value}
    filled = {field.key: value.get(field.key, field.default) for field in RECORDER_FIELDS}
    if "index" not in value:
        filled["index"] = default_index(site.key)
    if isinstance(filled["target"], list):
        filled["target"] = sorted(map(str, filled["target"]))
    elif filled["target"] is not None:
        filled["target"] = [filled["target"]]
    return unique_key(filled)


def unique_key(value: Any) -> str:
    """A hashable key equal for JSON-equal values (1 and 1.0 alike, true and 1 apart), for linear uniqueness."""
    return json.dumps(value, sort_keys=True, default=repr, allow_nan=True)
