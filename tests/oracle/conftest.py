"""Oracle tests compare yamltrace with transformers 5.23.0; without transformers they are skipped."""

import pytest

pytest.importorskip("transformers", reason="the oracle tests compare against transformers (pip install -e '.[test]')")
