"""Oracle tests compare yamltrace with the installed transformers (one release of the supported
range, pyproject's `transformers` extra); without transformers they are skipped."""

import pytest

pytest.importorskip("transformers", reason="the oracle tests compare against transformers (pip install -e '.[test]')")
