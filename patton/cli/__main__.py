"""``python -m patton.cli``: the ``patton`` command."""

import sys

from patton.cli import main

sys.exit(main())
