"""`python -m dg_lsp.cli`: the `dg-lsp` console script, as tests and editors' settings run it."""

import sys

from dg_lsp.cli import main

sys.exit(main())
