"""``python -m cuvil_edge.cli``, as the ``cuvil-edge`` script."""

import sys

from .app import main

sys.exit(main())
