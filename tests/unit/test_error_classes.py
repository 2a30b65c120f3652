"""Every public exception class yamltrace defines lives in `yamltrace.errors`, under `YamltraceError`.

Private ones (`_Usage`, `_Refused`) are control flow caught inside the module that defines them."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import yamltrace
from yamltrace import errors


# The `vision` extra's libraries: the modules that import them are tested in their environment (tests/vision).
VISION_LIBRARIES = {"diffusers", "timm", "torchvision"}


def test_every_exception_class_is_in_errors_under_the_one_base() -> None:
    found = {}
    for info in pkgutil.walk_packages(yamltrace.__path__, "yamltrace."):
        if info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as e:  # a vision kernel, in an environment without the `vision` extra
            if e.name not in VISION_LIBRARIES:
                raise
            continue
        for name, value in vars(module).items():
            public = not value.__name__.startswith("_") if inspect.isclass(value) else False
            if public and issubclass(value, BaseException) and value.__module__.startswith("yamltrace"):
                found[f"{info.name}.{name}"] = value
    assert {value.__module__ for value in found.values()} == {"yamltrace.errors"}
    # Every error is a YamltraceError; the exceptions that are not errors are an interrupt, which
    # `except Exception` must not swallow, and the warnings (a newer transformers than the verified; a
    # key whose modules never ran).
    not_errors = {value for value in found.values() if not issubclass(value, errors.YamltraceError)}
    assert not_errors == {errors.ExtractInterrupted, errors.UnverifiedReleaseWarning, errors.NeverRanWarning}
    assert issubclass(errors.UnverifiedReleaseWarning, UserWarning) and issubclass(errors.NeverRanWarning, UserWarning)
    assert issubclass(errors.ExtractInterrupted, KeyboardInterrupt) and not issubclass(errors.ExtractInterrupted, Exception)
    # ...and each stays importable where its users import it today
    from yamltrace.extraction import ExtractError
    from yamltrace.kernels import UnsupportedModuleError

    assert ExtractError is errors.ExtractError and UnsupportedModuleError is errors.UnsupportedModuleError
