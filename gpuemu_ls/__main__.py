"""``python -m gpuemu_ls``: the bundled CLI."""

import sys

from .cli import gpuemu_main

sys.exit(gpuemu_main())
