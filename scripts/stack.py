#!/usr/bin/env python3
"""The launcher, kept at this path for the commands people type: it is ``devtools/stack/``
(``python -m devtools.stack``; ``--help`` says what it does).

It needs the project's packages (psycopg, redis, rq, the servers' wheels): started by a
Python without them, it hands over to the project's own, .venv's, when there is one.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_PYTHON = REPO / ".venv" / "bin" / "python"

if __name__ == "__main__":
    if importlib.util.find_spec("psycopg") is None and VENV_PYTHON.exists():
        os.execv(VENV_PYTHON, [str(VENV_PYTHON), __file__, *sys.argv[1:]])  # noqa: S606
    sys.path.insert(0, str(REPO))
    from devtools.stack.cli import main

    sys.exit(main())
