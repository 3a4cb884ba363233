"""``python -m tumbler``: the ``tumbler`` command, where its script is not on the PATH."""

import sys

from tumbler.cli import main

sys.exit(main())
