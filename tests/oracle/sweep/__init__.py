"""The architecture sweep: yamltrace's captures against transformers' own, on every class that records outputs.

`python -m oracle.sweep` (run with `tests` on the path; `make fidelity`) builds a tiny random model of
every enumerated class, compares three capture variants tensor for tensor and writes
`docs/fidelity.md`. `tests/oracle/test_sweep_popular.py` runs the popular families in the default suite.
"""

from ._compare import VARIANT_NAMES, VARIANTS, Built, Result, StageError, build, compare_target, run_variant
from ._enumerate import POPULAR, Target, enumerate_targets

__all__ = [
    "VARIANTS",
    "VARIANT_NAMES",
    "Built",
    "Result",
    "StageError",
    "build",
    "compare_target",
    "run_variant",
    "POPULAR",
    "Target",
    "enumerate_targets",
]
