"""Which modules a failed load forgets: only packages the load itself imported first, never torch's,
transformers', numpy's, yamltrace's or a submodule of a package the session had already."""

from __future__ import annotations

from yamltrace.checkpoint._load import forgettable


def test_only_packages_first_imported_by_the_load_are_forgotten() -> None:
    before = {"torch", "torch.nn", "mypkg", "mypkg.a", "os"}
    imported = {"torch._dynamo", "transformers.models.x", "mypkg.b", "newpkg", "newpkg.kernels", "numpy.linalg", "yamltrace.x"}
    assert forgettable(imported, before) == {"newpkg", "newpkg.kernels"}
