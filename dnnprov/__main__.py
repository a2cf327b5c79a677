"""``python -m dnnprov`` runs the CLI."""

import sys

from dnnprov.cli import main

sys.exit(main())
