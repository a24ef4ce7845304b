"""``python -m flashsim``: the same as the ``flashsim`` command."""

import sys

from flashsim.cli import main

sys.exit(main())
