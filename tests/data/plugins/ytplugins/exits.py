"""A module whose import-time code ends the process, as a `__main__` module's `sys.exit(main())` does."""

import sys

sys.exit(3)
