"""Devices a capture moves tensors to must exist: checked when a capture plans its hooks, not mid-forward.

A spec's `to: cuda` is valid text anywhere (a spec is written once and used on many machines), so the
spec loads on a CPU-only machine; capturing with it there fails at once with a `CaptureError` that
names the key and the device, instead of torch's assertion from inside a hook.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from ..errors import CaptureError
from ._recorder import OutputRecorder

__all__ = ["require_devices"]


def _available(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_available() and (device.index is None or device.index < torch.cuda.device_count())
    if device.type == "mps":
        return torch.backends.mps.is_available()
    return True


def require_devices(tasks: Iterable[tuple[str, OutputRecorder]]) -> None:
    """CaptureError unless every recorder's `to` device is available on this machine."""
    for key, recorder in tasks:
        if recorder.to is not None and not _available(torch.device(recorder.to)):
            raise CaptureError(
                f"output {key!r}: its recorder moves captures to {recorder.to!r}, which this machine does not have "
                f"(torch sees {torch.cuda.device_count()} CUDA device(s)); remove `to:` or capture on a machine with it."
            )
