"""Which model `yamltrace check` builds for a spec, and building it once on the meta device.

The model is `--model` (a class, or a factory: any callable returning an `nn.Module`), or
`--checkpoint`'s `config.json`, or else the spec's own `model:` key. A class with a `config_class` is
built from its default config or `--config FILE`, with the attention implementation the spec states;
a class with diffusers' `from_config` and `config_name` (`ModelMixin`) is built by `from_config` from
the JSON object of `--config FILE` (the `config.json` diffusers writes); anything else is called with `--model-kwargs JSON`, or with the JSON object of `--config FILE` as
keyword arguments, or with no arguments, its signature checked before the call. Models are built on the
meta device (no weight memory, no weights read); specs that need the same build share one.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from ._common import _Usage, checkpoint_class, import_class, import_object, model_config

__all__ = ["ModelSource", "Models", "source_from_arguments"]


class ModelSource(NamedTuple):
    """What `check` builds: a model class or a factory, the config file, and the factory's keyword arguments
    (`--model-kwargs`, as JSON text)."""

    build: Callable[..., Any]
    config_file: Path | None = None
    kwargs: str | None = None

    @property
    def name(self) -> str:
        return getattr(self.build, "__qualname__", repr(self.build))

    @property
    def configured(self) -> bool:
        """Whether the model is built from a config (a class with a `config_class`), not called with arguments."""
        return isinstance(self.build, type) and getattr(self.build, "config_class", None) is not None

    @property
    def from_config(self) -> bool:
        """Whether the model is built by the class's `from_config(dict)` (diffusers' `ConfigMixin`) from `--config FILE`."""
        return (
            isinstance(self.build, type)
            and self.config_file is not None
            and self.kwargs is None
            and isinstance(getattr(self.build, "config_name", None), str)
            and callable(getattr(self.build, "from_config", None))
        )

    def model_class(self) -> type | None:
        """The class, when the source names one (a factory's class is known once it has built its model)."""
        return self.build if isinstance(self.build, type) else None


def _from_checkpoint(directory: Path, model: str | None) -> ModelSource:
    cls = checkpoint_class(directory)  # checks config.json first, also under --model
    if model is not None:
        return ModelSource(import_class(model), directory / "config.json")
    if cls is None:
        raise _Usage(f"--checkpoint {directory}: config.json names no transformers architecture; add --model pkg.mod:Class")
    return ModelSource(cls, directory / "config.json")


def source_from_arguments(
    model: str | None, config: str | None, checkpoint: str | None, model_kwargs: str | None = None
) -> ModelSource | None:
    """The model the command line names, or None (each spec's `model:` key names its own)."""
    if checkpoint is not None:
        if model_kwargs is not None:
            raise _Usage("--model-kwargs goes with --model (a factory or a class called with them), not with --checkpoint")
        return _from_checkpoint(Path(checkpoint), model)
    if model is None:
        if config is not None or model_kwargs is not None:
            raise _Usage(f"{'--config' if config is not None else '--model-kwargs'} needs --model pkg.mod:Name")
        return None
    build = import_object(model)
    if not callable(build):
        raise _Usage(f"--model {model!r} is {type(build).__name__}, not a class or a function that returns a model")
    source = ModelSource(build, None if config is None else Path(config), model_kwargs)
    if source.configured and model_kwargs is not None:
        raise _Usage(
            f"--model {model!r} is built from its config class; give its settings with --config FILE, not --model-kwargs"
        )
    if not source.configured and config is not None and model_kwargs is not None:
        raise _Usage("give the keyword arguments of --model either as --model-kwargs JSON or as --config FILE, not both")
    _arguments(source)  # a JSON mistake is reported before any spec is read
    return source


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise _Usage(f"{what} is not JSON ({e}); write an object such as '{{\"num_classes\": 10}}'") from None
    if not isinstance(value, dict):
        raise _Usage(f"{what} is a JSON {type(value).__name__}, not an object of keyword arguments")
    return value


def _arguments(source: ModelSource) -> dict[str, Any]:
    """The keyword arguments a factory (or a class without a config class) is called with."""
    if source.kwargs is not None:
        return _json_object(source.kwargs, "--model-kwargs")
    if source.config_file is not None:
        try:
            text = source.config_file.read_text(encoding="utf-8")
        except OSError as e:
            raise _Usage(f"--config {source.config_file}: {e.strerror or e}") from None
        return _json_object(text, f"--config {source.config_file}")
    return {}


def _call(source: ModelSource) -> Any:
    """Call a factory with its arguments, on the meta device; the arguments are checked against its signature first."""
    import torch
    from torch import nn

    arguments = _arguments(source)
    if source.from_config:
        return _from_config(source, arguments)
    given = f"with {', '.join(f'{k}=' for k in arguments)}" if arguments else "with no arguments"
    try:
        inspect.signature(source.build).bind(**arguments)
    except TypeError as e:
        raise _Usage(
            f"--model {source.name} cannot be called {given} ({e}); give its keyword arguments with --model-kwargs JSON "
            "or --config FILE, or name a function that builds the model"
        ) from None
    except ValueError:  # no signature to read (a builtin): the call itself says what is wrong
        pass
    try:
        with torch.device("meta"):
            model = source.build(**arguments)
    except Exception as e:  # noqa: BLE001 - the user's code: its error, located at the call
        raise _Usage(f"--model {source.name} failed when called {given}: {type(e).__name__}: {e}") from e
    if not isinstance(model, nn.Module):
        raise _Usage(f"--model {source.name} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def _from_config(source: ModelSource, config: dict[str, Any]) -> Any:
    """`cls.from_config(config)` on the meta device: a diffusers model class and its `config.json`."""
    import torch
    from torch import nn

    try:
        with torch.device("meta"):
            model = getattr(source.build, "from_config")(config)
    except Exception as e:  # noqa: BLE001 - the library's code: its error, located at the call
        raise _Usage(
            f"--model {source.name} failed to build from --config {source.config_file} with {source.name}.from_config: "
            f"{type(e).__name__}: {e}"
        ) from e
    if not isinstance(model, nn.Module):
        raise _Usage(f"--model {source.name}.from_config returned {type(model).__name__}, not a torch.nn.Module")
    return model


class Models:
    """Models built on the meta device, one per source (class, config file, arguments) and attention implementation."""

    def __init__(self) -> None:
        self.built: dict[tuple[Any, ...], Any] = {}

    def get(self, source: ModelSource, spec: Any) -> Any:
        """The model for `source` (with the attention implementation `spec` states, for a config), built on first use."""
        if not source.configured:
            key: tuple[Any, ...] = (source.build, source.config_file, source.kwargs)
            if key not in self.built:
                self.built[key] = _call(source)
            return self.built[key]
        import torch

        from ..checkpoint import configure_attn_implementation

        config = model_config(source.build, source.config_file)  # type: ignore[arg-type]  # configured: a class
        key = (source.build, source.config_file, configure_attn_implementation(config, spec))
        if key not in self.built:
            with torch.device("meta"):
                self.built[key] = source.build(config)
        return self.built[key]
