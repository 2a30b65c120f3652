"""What `values=` (the tensors of a spec's `{value: NAME}` interventions) may hold, checked before a run.

A key is a NAME (a string) and every value holds data: a tensor on the `meta` device has none, and an
edit with it fails deep inside torch (`Cannot copy out of meta tensor`). Each problem is a `SpecError`
located at the intervention that takes the name (else at the spec's `$.interventions`), naming the
spec file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .engine import RuntimeValue
from .engine._editing import edit_issue
from .errors import SpecError, SpecIssue
from .spec import Spec

__all__ = ["check_run_values"]


def check_run_values(spec: Spec | None, values: Any) -> None:
    """SpecError when `values` is not a mapping of names to tensors (or lists of them) that hold data."""
    if values is None:
        return
    source = None if spec is None else spec.source
    if not isinstance(values, Mapping):
        raise SpecError.single(f"values= takes a mapping NAME -> tensor, got {type(values).__name__}.", "$.interventions", source)
    takers = {iv.value.name: iv for iv in (spec.interventions if spec is not None else ()) if isinstance(iv.value, RuntimeValue)}
    issues: list[SpecIssue] = []
    for name, given in values.items():
        if not isinstance(name, str):
            issues.append(
                SpecIssue(
                    f"values= has the key {name!r:.80} ({type(name).__name__}); its keys are the NAMEs of the "
                    f"interventions' {{value: NAME}} ({', '.join(map(repr, takers)) or 'none'}): use the name as a string.",
                    "$.interventions",
                    source,
                )
            )
            continue
        for i, value in enumerate(given if isinstance(given, (list, tuple)) else [given]):
            if isinstance(value, torch.Tensor) and value.is_meta:
                shown = f"values[{name!r}]" + (f"[{i}]" if isinstance(given, (list, tuple)) else "")
                message = (
                    f"{shown} is a tensor on the meta device, which holds no data to edit with: give it on a real "
                    "device (a meta tensor is a shape only; load or compute its values first)."
                )
                iv = takers.get(name)
                issues.append(edit_issue(iv, message) if iv is not None else SpecIssue(message, "$.interventions", source))
    if issues:
        raise SpecError(issues)
