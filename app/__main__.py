"""``python -m fabricwatch``: the same as the ``fabricwatch`` command."""

import sys

from fabricwatch.cli.main import main

sys.exit(main())
