"""`python -m yamltrace ...`: the same command line as `yamltrace ...`."""

import sys

from .cli import main

sys.exit(main())
