"""``python -m trainer`` is the ``trainer`` command."""

import sys

from trainer.cli import main

sys.exit(main())
