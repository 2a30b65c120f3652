"""The transformers release whose semantics yamltrace follows is the installed one."""

from __future__ import annotations

import pytest

from yamltrace import _versions

pytestmark = pytest.mark.oracle


def test_the_followed_release_is_the_installed_one():
    import transformers

    assert _versions.transformers_version() == _versions.parse_version(transformers.__version__)
