"""Build one tiny model and compare yamltrace's captures with what the model itself returns.

Before the reference, the model runs one warm-up forward without flags: every variant runs after the
reference, so the reference must be a later forward too. Some models change on their first forward
(BigBird swaps its block-sparse attention modules for full attention on short sequences, after
transformers has installed its hooks on the old ones, so a first forward returns no attentions).
The reference is one forward with every flag of the class's map on (`output_<key>=True`, and
`output_attentions` for cross/mask-decoder attentions). The variants:
  a  `yamltrace.trace(model)` around a forward without flags;
  b  `yamltrace.trace(model, load_spec(spec_from_model(cls).to_yaml()))`, same forward;
  c  the forward code under yamltrace's decorators (see `_redecorate`), with the reference's flags.
A composite that returns its parts' captures inside nested outputs (`CLIPModel`'s `text_model_output`,
`vision_model_output`) is compared there too: each nested field `<part>_output(s)` holds the captures
of the submodule `<part>...`, which `trace` exposes under the key's name whose values' module paths
lie in that submodule (`text_model_hidden_states`, see `nested_captures`).
A class whose forward carries the capture decorator with an empty map of its own (`M2M100Model`,
`GitForCausalLM`: the decorated encoder, decoder or base model inside records) is compared on its
nested models' keys. For a key the output does not return plainly (such a class, or
`AutoformerModel`, whose map hooks nothing outside its decorated encoder and decoder), its fields
`<label>_<key>` holding a tuple are compared (`encoder_hidden_states`, `decoder_attentions`): the
names `trace` exposes them under, with the nested models' other keys (a decoder's
`cross_attentions`).
Variant b exports from the class, except for a class whose default config does not build on the meta
device (transformers ships some with `None` fields the model needs): `spec_from_model(cls)` cannot
see its structure (which models it holds, which recorders its configuration has: an EsmModel built
without cross-attention), so the spec is exported from the swept instance, `spec_from_model(model)`,
the documented route for that case; the same for a model that replaced modules during its warm-up
forward (its structure is no longer the one its config builds). The result records why (`Result.b_export`).
Every tensor is compared with `torch.equal`; the seed is reset before every forward, so models that
draw random numbers in eval mode (masking, noise) draw the same ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ._configs import LEVELS, tiny_config
from ._enumerate import Target
from ._inputs import build_inputs
from ._redecorate import redecorate

__all__ = ["Built", "Result", "VARIANTS", "build", "output_keys", "reference", "run_variant", "compare_target", "StageError"]

VARIANTS = ("a", "b", "c")
VARIANT_NAMES = {
    "a": "trace(model)",
    "b": "trace(model, load_spec(spec_from_model(cls).to_yaml()))",
    "c": "forward re-decorated with yamltrace's decorators",
}
SEED = 0


@dataclass
class Built:
    """A tiny model, its inputs, its output keys and the reference outputs (one per key, or None)."""

    target: Target
    model: nn.Module
    inputs: dict[str, torch.Tensor]
    keys: list[str]
    expected: dict[str, Any]
    level: str = "small"
    nested_map: bool = False  # the keys are those of nested models' maps (the class's own map is empty)
    prefixed: bool = False  # some keys compared on `<label>_<key>` fields: the output does not return them plainly
    b_export: str = ""  # set by variant b when it exported from the instance: why not from the class
    swapped: str = ""  # the module classes the warm-up forward replaced, if it replaced any

    @property
    def compared(self) -> list[str]:
        """The reference's entries to compare: the keys returned at the top, then `<field>.<key>` for
        each nested output field that returns a key."""
        top = [key for key in self.keys if self.expected[key] is not None] + self.expected[PREFIXED]
        return top + [f"{name}.{key}" for name in self.expected[NESTED] for key in self.keys if f"{name}.{key}" in self.expected]


@dataclass
class Result:
    """What happened to one class. `status` is "compared" or the stage that failed."""

    target: str
    family: str
    name: str
    status: str
    reason: str = ""
    level: str = ""  # the shrinking level the model was built at
    keys: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # map keys the model's own output does not return
    nested_map: bool = False  # compared on nested models' keys: the class's own map is empty
    prefixed: bool = False  # compared on `<label>_<key>` fields (`encoder_hidden_states`)
    b_export: str = ""  # variant b exported from the instance: why not from the class (no meta build, swapped modules)
    variants: dict[str, str] = field(default_factory=dict)  # variant -> "equal" | "differs: ..." | "error: ..."


def short(error: BaseException, limit: int = 160) -> str:
    text = " ".join(str(error).split())
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(error).__name__}: {text}"


def output_keys(model_cls: type) -> list[str]:
    """The keys of the class's `_can_record_outputs`, in declaration order."""
    return list(getattr(model_cls, "_can_record_outputs", None) or {})


def nested_keys(model: nn.Module) -> list[str]:
    """The keys of the maps of the models a model holds (in `named_modules` order): what a class with an
    empty map of its own returns, recorded by its decorated encoder, decoder or base model."""
    return list(
        dict.fromkeys(
            key for _, module in model.named_modules() for key in (getattr(type(module), "_can_record_outputs", None) or {})
        )
    )


def flags(keys: list[str]) -> dict[str, bool]:
    requested = {f"output_{key}": True for key in keys}
    if {"cross_attentions", "mask_decoder_attentions"} & set(keys):
        requested["output_attentions"] = True
    return requested


NESTED = "<nested>"  # the reference's entry listing nested outputs that carry the map's keys
PREFIXED = "<prefixed>"  # the reference's entry listing its `<label>_<key>` fields (keys not returned plainly)


def _field(output: Any, key: str) -> Any:
    """`output[key]` for a ModelOutput or dict (None when absent), else the attribute."""
    if hasattr(output, "keys") and hasattr(output, "get"):
        return output.get(key)
    return getattr(output, key, None)


def fresh(inputs: dict[str, Any]) -> dict[str, Any]:
    """A copy of the inputs for one forward (tensors cloned, lists copied): a forward that writes into
    an input in place (MoonshineStreaming adds position embeddings to its encoder states, hybrid
    encoders assign into their feature-map list) leaves the next forward's inputs as they were."""

    def copied(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.clone()
        if isinstance(value, (list, tuple)):
            return type(value)(copied(item) for item in value)
        return value

    return {key: copied(inputs[key]) for key in inputs}


def reference(model: nn.Module, inputs: dict[str, torch.Tensor], keys: list[str]) -> dict[str, Any]:
    """The model's own output with every flag on: key -> its value (None when not returned at the top);
    under `NESTED`, the fields of the output that hold a nested output carrying one of the keys, and
    `<field>.<key>` -> each key such a nested output returns; under `PREFIXED`, for each key not
    returned at the top, the fields `<label>_<key>` holding a tuple (`encoder_hidden_states`), each
    also an entry."""
    torch.manual_seed(SEED)
    with torch.no_grad():
        output = model(**fresh(inputs), **flags(keys))
    found = {key: _field(output, key) for key in keys}
    names = list(output.keys()) if hasattr(output, "keys") else []
    found[PREFIXED] = [
        name
        for name in names
        if name not in keys
        and any(name.endswith("_" + key) and found[key] is None for key in keys)
        and isinstance(output[name], (tuple, list))
    ]
    found.update((name, output[name]) for name in found[PREFIXED])
    found[NESTED] = [
        name
        for name in (output.keys() if hasattr(output, "keys") else ())
        if any(_field(output[name], key) is not None for key in keys) and hasattr(output[name], "keys")
    ]
    for name in found[NESTED]:
        for key in keys:
            if (value := _field(output[name], key)) is not None:
                found[f"{name}.{key}"] = value
    return found


def _part_of(field: str) -> str:
    """The submodule a nested output field reports: `text_model_output` -> `text_model`."""
    for suffix in ("_outputs", "_output"):
        if field.endswith(suffix):
            return field[: -len(suffix)]
    return field


def _in_part(path: str, part: str) -> bool:
    """Whether a module path (`vision_model.encoder.layers.0`, `<layer>:input`) lies in a submodule
    named `part` or `part_...` (`vision` for `vision_model`)."""
    return any(c == part or c.startswith(part + "_") for c in path.partition(":")[0].split("."))


def nested_captures(captures: Any, entries: list[str]) -> dict[str, Any]:
    """For each `<field>.<key>` entry, the exposed key (`<key>` or `<label>_<key>`) whose values all
    come from the field's submodule; None when no key, or several, fit."""
    found = {}
    for entry in entries:
        field, _, key = entry.partition(".")
        part = _part_of(field)
        fits = [
            name
            for name in captures
            if (name == key or name.endswith("_" + key))
            and captures.paths(name)
            and all(_in_part(path, part) for path in captures.paths(name))
        ]
        found[entry] = captures[fits[0]] if len(fits) == 1 else None
    return found


class StageError(Exception):
    """A build stage failed: `stage` is "config", "model", "inputs" or "forward"; the cause is chained."""

    def __init__(self, stage: str, error: Exception) -> None:
        super().__init__(f"{stage}: {short(error)}")
        self.stage, self.error = stage, error


def build(target: Target) -> Built:
    """The tiny model of `target` in eval mode, its inputs and its reference outputs.

    Tries each shrinking level in turn (see `_configs.LEVELS`); raises the first level's StageError
    when none works."""
    first = None
    for level in LEVELS:
        try:
            return _build(target, level)
        except StageError as failure:
            first = first or failure
    raise first


def _build(target: Target, level: str) -> Built:
    stage = "config"
    try:
        cls = target.load()
        config = tiny_config(cls, level)
        stage = "model"
        torch.manual_seed(SEED)
        model = cls(config).eval()
        stage = "inputs"
        inputs = build_inputs(model)
        keys = output_keys(cls)
        nested_map = not keys
        keys = keys or nested_keys(model)
        stage = "forward"
        swapped = warm_up(model, inputs)
        expected = reference(model, inputs, keys)
        plain = any(expected[key] is not None for key in keys)
        if expected[PREFIXED] and not plain and (more := [k for k in nested_keys(model) if k not in keys]):
            keys = keys + more  # the nested models' other keys (a decoder's cross_attentions), asked for too
            expected = reference(model, inputs, keys)
        return Built(target, model, inputs, keys, expected, level, nested_map, bool(expected[PREFIXED]), swapped=swapped)
    except Exception as error:
        raise StageError(stage, error) from error


def warm_up(model: nn.Module, inputs: dict[str, torch.Tensor]) -> str:
    """Run one forward without flags; "" or which module classes it replaced (`A -> B`, sorted)."""
    before = {path: type(module).__name__ for path, module in model.named_modules()}
    torch.manual_seed(SEED)
    with torch.no_grad():
        model(**fresh(inputs))
    after = {path: type(module).__name__ for path, module in model.named_modules()}
    changes = {f"{before[p]} -> {after[p]}" for p in before.keys() & after.keys() if before[p] != after[p]}
    return f"its first forward replaced {', '.join(sorted(changes))}" if changes else ""


def _equal(actual: torch.Tensor, expected: torch.Tensor) -> bool:
    """`torch.equal`, except that NaNs at the same positions count as equal (NaN != NaN otherwise)."""
    if torch.equal(actual, expected):
        return True
    if not actual.is_floating_point():
        return False
    nan = actual.isnan()
    return torch.equal(nan, expected.isnan()) and torch.equal(actual[~nan], expected[~nan])


def difference(actual: Any, expected: Any, where: str) -> str | None:
    """None if equal (same structure, `torch.equal` tensors), else where and how they differ."""
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
            return f"{where}: {type(actual).__name__} vs {type(expected).__name__}"
        if actual.shape != expected.shape:
            return f"{where}: shape {tuple(actual.shape)} vs {tuple(expected.shape)}"
        if actual.dtype != expected.dtype:
            return f"{where}: dtype {actual.dtype} vs {expected.dtype}"
        if not _equal(actual, expected):
            gap = (actual.double() - expected.double()).abs().max().item()
            return f"{where}: values differ (max |diff| {gap:.3g})"
        return None
    if isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list)):
        if len(actual) != len(expected):
            return f"{where}: {len(actual)} entries vs {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            found = difference(a, e, f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(expected, dict) and isinstance(actual, dict):
        if list(actual) != list(expected):
            return f"{where}: keys {list(actual)} vs {list(expected)}"
        for name in expected:
            found = difference(actual[name], expected[name], f"{where}[{name!r}]")
            if found:
                return found
        return None
    if actual is None and expected is None:
        return None
    return f"{where}: {type(actual).__name__} vs {type(expected).__name__}"


def meta_failure(cls: type) -> str | None:
    """Why `cls` cannot be built from its default config on the meta device, or None if it can."""
    try:
        with torch.device("meta"):
            cls(cls.config_class())
    except Exception as error:
        return short(error, 100)
    return None


def exported_spec(built: Built) -> Any:
    """Variant b's spec through YAML: exported from the class, or from the instance when the class's
    default config does not build on the meta device or its warm-up forward replaced modules (then
    `built.b_export` says why)."""
    import yamltrace

    cls = type(built.model)
    why = meta_failure(cls)
    built.b_export = f"its default config does not build on the meta device ({why})" if why else built.swapped
    spec = yamltrace.spec_from_model(built.model if built.b_export else cls)
    return yamltrace.load_spec(spec.to_yaml())


def _captures(built: Built, variant: str) -> dict[str, Any]:
    import yamltrace

    model, inputs = built.model, built.inputs
    if variant == "c":
        twin, switched = redecorate(model)
        if not switched:
            raise LookupError("no module of the model carries transformers' capture decorator")
        return reference(twin, inputs, built.keys)
    if variant == "a":
        spec = None
    else:
        spec = exported_spec(built)
    torch.manual_seed(SEED)
    with torch.no_grad(), yamltrace.trace(model, spec) as captures:
        model(**fresh(inputs))
    found = {key: captures[key] if key in captures else None for key in built.keys + built.expected[PREFIXED]}
    found[EXPOSED] = {name: captures[name] for name in captures}
    return found | nested_captures(captures, [entry for entry in built.compared if "." in entry])


EXPOSED = "<exposed>"  # every key the trace yielded (variants a, b): named in a difference when one equals the entry


def _equal_under(actual: dict[str, Any], expected: Any, entry: str) -> str:
    """ "; equal to trace's `name`" when another key the trace yielded holds exactly the entry's values
    (a naming difference, still a difference), else ""."""
    names = [n for n, v in actual.get(EXPOSED, {}).items() if n != entry and v and difference(v, expected, n) is None]
    return f"; equal to trace's {', '.join(f'`{n}`' for n in names)}" if names else ""


def run_variant(built: Built, variant: str) -> str:
    """ "equal", or "differs: <first difference>" / "error: <exception>" for one variant."""
    try:
        actual = _captures(built, variant)
    except Exception as error:
        return f"error: {short(error)}"
    for key in built.compared:
        found = difference(actual.get(key), built.expected[key], key)
        if found:
            return f"differs: {found}{_equal_under(actual, built.expected[key], key)}"
    return "equal"


def compare_target(target: Target, variants: tuple[str, ...] = VARIANTS) -> Result:
    """Build, run and compare one class; never raises (a failure is the result's status)."""
    result = Result(target.id, target.family, target.name, "build")
    try:
        built = build(target)
    except StageError as failure:
        result.status, result.reason = failure.stage, short(failure.error)
        return result
    result.keys, result.level, result.nested_map, result.prefixed = built.keys, built.level, built.nested_map, built.prefixed
    result.missing = [key for key in built.keys if built.expected[key] is None]
    if not built.compared:
        result.status = "no-output"
        result.reason = f"the model's own output returns none of {built.keys}"
        return result
    result.status = "compared"
    result.variants = {variant: run_variant(built, variant) for variant in variants}
    result.b_export = built.b_export
    return result
