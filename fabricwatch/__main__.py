"""``python -m fabricwatch``: the same as the ``fabricwatch`` command."""

import sys

from fabricwatch.cli import main

sys.exit(main())
