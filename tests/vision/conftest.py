"""The vision suite (`make test-vision`, .venv-vision): timm, torchvision and diffusers models built tiny and
random in-process (nothing is downloaded). The libraries are imported here unconditionally: run without
them, the suite fails at collection instead of skipping."""

from __future__ import annotations

import diffusers  # noqa: F401 - the vision extra must be installed
import timm  # noqa: F401
import torchvision  # noqa: F401
