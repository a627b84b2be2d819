"""`python -m gdsio ...` is the `gdsio` command."""

import sys

from .cli import main

sys.exit(main())
