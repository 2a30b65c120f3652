"""Records which test modules have been imported, so a test can tell whether a spec imported one."""

IMPORTED: list[str] = []
