"""``python -m gpytorch_explain``: the ``gpytorch-explain`` command line (see :mod:`gpytorch_explain.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
