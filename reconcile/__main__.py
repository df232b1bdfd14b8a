"""`python -m reconcile`: the operator process."""

import sys

from reconcile.main import main

sys.exit(main())
