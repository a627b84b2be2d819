"""`python -m gdsio ...` is the `gdsio` command."""

import sys

from .tools.cli import main

sys.exit(main())
