from __future__ import annotations

import sys

from devtools.stack.cli import main

sys.exit(main())
