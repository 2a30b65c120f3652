"""Checkpoint -> model: read the spec first, build under its patches, load the weights, attach the spec.

A checkpoint is a local folder or a Hugging Face Hub id (`org/name`, see `_hub`). A failed load
changes nothing: the patched classes are back and the spec's imports are forgotten.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import torch
from torch import nn

from .._folder import folder_file, read_json
from ..engine import CAPTURE_MAP_ATTRIBUTE, RuntimeValue, attach_interventions, attach_spec
from ..engine._editing import edit_issue
from ..errors import PatchError, SpecError
from ..intervening import apply_interventions
from ..patch import apply_patches, patch_output_recorders
from ..patch._construct import construction_modules
from ..patch._state import renames_not_honoured
from ..spec import Spec
from ..spec._patch_rule import PatchRule, record_swaps, retarget_spec
from ._hub import HUB_OPTIONS, hub_options, hub_snapshot, hub_spec_file, is_hub_id
from ._options import with_attn_implementation
from ._spec_file import SPEC_FILE, SpecSource, checkpoint_spec
from ._weights import CONFIG_FILE, load_strict, read_weights, weights_file

__all__ = ["from_pretrained", "is_yamltrace_model", "load_yamltrace_model"]

M = TypeVar("M", bound=nn.Module)


# Packages whose modules are never forgotten: they register process-wide state when imported (torch
# operator libraries, dynamo's and transformers' registries), so a second import of them raises or
# leaves two copies of one registry.
NEVER_FORGOTTEN = frozenset(
    {
        "torch", "torchvision", "torchaudio", "functorch", "triton", "transformers", "tokenizers", "safetensors",
        "huggingface_hub", "accelerate", "numpy", "sympy", "mpmath", "networkx", "jinja2", "yamltrace",
    }
)  # fmt: skip


def _torch_registrations() -> tuple[int, int]:
    """How many operator definitions and libraries torch holds (a module that adds some cannot be re-imported)."""
    library = torch.library
    return len(getattr(library, "_defs", ())), len(getattr(library, "_keep_alive", ()))


def forgettable(imported: set[str], before: set[str]) -> set[str]:
    """The modules of `imported` that a failed load may forget: those of packages first imported by it,
    outside `NEVER_FORGOTTEN`. A module of a package that was already (partly) imported stays."""
    roots_before = {name.partition(".")[0] for name in before}
    return {name for name in imported if (root := name.partition(".")[0]) not in NEVER_FORGOTTEN and root not in roots_before}


@contextlib.contextmanager
def _spec_imports_undone_on_failure() -> Iterator[Callable[[], None]]:
    """On failure, forget the modules the spec's resolution imported, where that is safe (see `forgettable`).

    Yields a function to call once the spec is resolved. Modules that torch or transformers import
    lazily afterwards, while building or loading, are left alone: removing those would leave two
    copies of one library module in the process. If the load registered torch operators, nothing is
    forgotten: re-importing the module that registered them would fail. What imported code did besides
    (a logging handler, an environment variable) is not undone; see docs/security.md.
    """
    before = set(sys.modules)
    registrations = _torch_registrations()
    spec_imports: set[str] | None = None

    def spec_resolved() -> None:
        nonlocal spec_imports
        spec_imports = set(sys.modules) - before

    try:
        yield spec_resolved
    except BaseException:
        imported = (set(sys.modules) - before) if spec_imports is None else spec_imports
        if _torch_registrations() == registrations:
            for name in forgettable(imported, before):
                sys.modules.pop(name, None)
        raise


_RECURSIVE_PATCH = (
    "building the model under the spec's patches recursed without end: a replacement class builds a class "
    "that the same patches replace by it (a '.*' key replaces every class of the model's module, the model's "
    "own parts included). Anchor the pattern (^Name$) so it selects only the classes to replace."
)


def _attach(model: M, spec: Spec | None, device: str | torch.device | None) -> M:
    """Give the model the spec's capture map (per instance); it and the model's own maps retargeted to
    the classes the spec's patches replaced while the model was built (the same rule, `_build_rule`)."""
    if spec is None:
        return model
    rule = _build_rule(spec, device)
    patch_output_recorders(model, rule)  # the maps of the model's own (decorated) modules, per instance
    # setattr: nn.Module's __setattr__ is typed for modules and tensors only.
    setattr(model, CAPTURE_MAP_ATTRIBUTE, retarget_spec(spec, rule).capture_map())
    attach_spec(model, spec)
    return model


def _build_rule(spec: Spec | None, device: str | torch.device | None) -> PatchRule:
    """The patch rule a load builds under and retargets by: the spec's entries for the load's device."""
    return PatchRule.for_entries(() if spec is None else spec.patches, "cpu" if device is None else str(torch.device(device)))


MAX_CONFIG_BYTES = 16 * 2**20  # bytes of a yamltrace model's config.json (a real one is under 10 KB)


def _local_spec_file(directory: str | os.PathLike[str], subfolder: str | None = None) -> Path | None:
    """The checkpoint's `yamltrace.yaml`, None when there is none; a FolderError when it is there but not a
    regular file inside the folder (a FIFO, a folder, a device, a link out), never a load without it."""
    return _shipped_spec(Path(directory, subfolder or "", SPEC_FILE))


def _shipped_spec(path: Path | None) -> Path | None:
    return None if path is None else folder_file(path.parent, path.name, what="checkpoint spec", missing_ok=True)


def load_yamltrace_model(
    cls: type[M],
    path: str | os.PathLike[str],
    *,
    spec: SpecSource | None = None,
    overrides: SpecSource | None = None,
    trust_imports: bool = False,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    **hub: Any,
) -> M:
    """Load a yamltrace `PreTrainedModel` subclass from a checkpoint folder or Hub id (see module docstring).

    `hub` takes the Hub options `revision`, `cache_dir`, `local_files_only`, `token`, `subfolder`.
    """
    unknown = sorted(set(hub) - set(HUB_OPTIONS))
    if unknown:
        raise TypeError(f"Unexpected arguments for a yamltrace model: {unknown}; it accepts {', '.join(HUB_OPTIONS)}.")
    options = hub_options(hub)
    if is_hub_id(path):
        directory = hub_snapshot(str(path), options)
    else:
        directory = Path(path, options.get("subfolder") or "")
    if folder_file(directory, CONFIG_FILE, what="config", missing_ok=True) is None:
        raise FileNotFoundError(f"{directory} is not a checkpoint: {CONFIG_FILE} is missing.")
    read_json(directory, CONFIG_FILE, max_bytes=MAX_CONFIG_BYTES, what="config")  # capped, not too deep
    config = getattr(cls, "config_class").load(directory / CONFIG_FILE)
    weights = weights_file(directory)
    model, resolved = _build_under_spec(
        cls,
        _local_spec_file(directory) if spec is None else None,
        lambda _: cls(config),
        lambda model: load_strict(model, read_weights(weights), weights),
        spec=spec,
        overrides=overrides,
        trust_imports=trust_imports,
        device=device,
    )
    model.to(device=device, dtype=dtype)
    return _attach(cast(M, model), resolved, device)


def _build_under_spec(
    model_cls: type,
    shipped: Path | None,
    construct: Callable[[Spec | None], nn.Module],
    finish: Callable[[nn.Module], None] | None = None,
    *,
    spec: SpecSource | None,
    overrides: SpecSource | None,
    trust_imports: bool,
    device: str | torch.device | None,
) -> tuple[nn.Module, Spec | None]:
    """Resolve the checkpoint's spec, `construct` the model (given that spec) under its patches, then `finish` it.

    All or nothing: on failure the patched classes are back and the spec's imports are forgotten.
    """
    with _spec_imports_undone_on_failure() as spec_resolved:
        resolved = checkpoint_spec(model_cls, shipped, spec=spec, overrides=overrides, trust_imports=trust_imports)
        spec_resolved()
        with apply_patches(_build_rule(resolved, device), modules=construction_modules(model_cls)) as swapped:
            try:
                model = construct(resolved)
            except RecursionError:
                raise PatchError([_RECURSIVE_PATCH]) from None
        record_swaps(model, [(r.original, r.replacement) for r in swapped if isinstance(r.original, type)])
        if finish is not None:
            finish(model)
        _intervene_persistently(model, resolved)
    return model, resolved


def _intervene_persistently(model: nn.Module, spec: Spec | None) -> None:
    """Put the spec's interventions on the loaded model for every call (`apply_interventions`, which
    checks them all before installing any), the handle attached as `model.yamltrace_interventions`.
    A load has no run-time values: a `{value: NAME}` is a located `SpecError`."""
    if spec is None or not spec.interventions:
        return
    issues = [
        edit_issue(
            iv,
            f"intervention {iv.name!r} takes {{value: {iv.value.name}}}, which a checkpoint load cannot supply: ship "
            "the tensor beside yamltrace.yaml ({tensor: FILE.safetensors:NAME}), or load with spec= a spec "
            "without it and pass the value to intervene(..., values=).",
        )
        for iv in spec.interventions
        if isinstance(iv.value, RuntimeValue)
    ]
    if issues:
        raise SpecError(issues)
    attach_interventions(model, apply_interventions(model, spec))


def _transformers_model_class(cls: type, path: str | os.PathLike[str], options: dict[str, Any]) -> type:
    """The concrete class a transformers (Auto) class builds for this checkpoint."""
    mapping = getattr(cls, "_model_mapping", None)
    if mapping is None:
        return cls
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, **options)
    concrete: type = mapping[type(config)]
    return concrete


def is_yamltrace_model(cls: Any) -> bool:
    """Whether `cls` is a yamltrace model class: an `nn.Module` whose `config_class` reads a
    `config.json` with `load` (the `yamltrace.modeling.Config` protocol; transformers' configs have none)."""
    config_class = getattr(cls, "config_class", None)
    return isinstance(cls, type) and issubclass(cls, nn.Module) and callable(getattr(config_class, "load", None))


def from_pretrained(
    cls: type[M],
    path: str | os.PathLike[str],
    *,
    spec: SpecSource | None = None,
    overrides: SpecSource | None = None,
    trust_imports: bool = False,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    **kwargs: Any,
) -> M:
    """Load `cls` (a yamltrace model class, a transformers model class or Auto class) with its spec.

    `path` is a local folder or a Hub id (`org/name`; `revision=`, `cache_dir=`, `local_files_only=`,
    `token=`, `subfolder=` apply to the spec as to the weights). Reads the checkpoint's `yamltrace.yaml`
    when present; `spec=` replaces it, `overrides=` overlays it key by key. Patches apply while the model
    is built (scoped to that load; the process-wide patch registry is not touched), recorders are
    retargeted to the replacements, and `trace(model)` uses the spec. Other keyword arguments go to
    transformers' `from_pretrained`; a spec's `options: {attn_implementation: eager}` is passed as its
    `attn_implementation=` (a different `attn_implementation=` of the caller is a `SpecError`).

    Args:
        cls: the model class to build (`TinyModel`, `LlamaForCausalLM`, `AutoModelForCausalLM`).
        path: a checkpoint folder, or a Hub id.
        spec: replaces the checkpoint's spec: a path, YAML text, a mapping or a `Spec`.
        overrides: laid over the checkpoint's (or `spec`'s) entries, key by key.
        trust_imports: allow the spec to import modules outside the model's package, torch and
            yamltrace (a checkpoint's spec is untrusted data; see docs/security.md).
        device: where to build the model; also selects device-conditioned patches.
        dtype: the parameters' dtype.

    Returns:
        The model with its weights and its spec attached (`model.yamltrace_spec`). A yamltrace model
        is returned in training mode, as built: call `.eval()` for inference.

    Raises:
        SpecError: the spec (or an override) cannot be read, resolved or applied, or it states an
            `attn_implementation` that the caller's `attn_implementation=` contradicts; nothing is built.
        PatchError: a patch cannot build its replacement (a constructor that does not fit).
        FileNotFoundError: the folder has no `config.json`, or no weights.
        FolderError: a file of the checkpoint folder is not a regular file inside it (a FIFO, a folder, a
            link out of it), a shard name is not a bare file name, or a JSON file or header is over its cap.

    Example:
        >>> model = yamltrace.from_pretrained(TinyModel, "ckpt",                     # doctest: +SKIP
        ...     overrides={"patches": {"TinyAttention": "yamltrace.kernels:SdpaTinyAttention"}})
    """
    if is_yamltrace_model(cls):
        return load_yamltrace_model(
            cls, path, spec=spec, overrides=overrides, trust_imports=trust_imports, device=device, dtype=dtype, **kwargs
        )
    options = hub_options(kwargs)
    if is_hub_id(path):
        shipped = _shipped_spec(hub_spec_file(str(path), SPEC_FILE, options)) if spec is None else None
    else:
        shipped = _local_spec_file(path, options.get("subfolder")) if spec is None else None
    model_cls = _transformers_model_class(cls, path, options)
    if dtype is not None:
        kwargs["dtype"] = dtype
    load: Callable[..., nn.Module] = getattr(cls, "from_pretrained")
    with renames_not_honoured():  # transformers' loader sets weights by name, not by `_load_from_state_dict`
        model, resolved = _build_under_spec(
            model_cls,
            shipped,
            lambda resolved: load(path, **with_attn_implementation(kwargs, resolved)),
            spec=spec,
            overrides=overrides,
            trust_imports=trust_imports,
            device=device,
        )
    if device is not None:
        model.to(device)
    return _attach(cast(M, model), resolved, device)
