"""``python -m actorrt ...`` is the same as the ``actorrt`` command."""

import sys

from actorrt.cli import main

sys.exit(main())
