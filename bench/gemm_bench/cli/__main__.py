"""``python -m gemm_bench.cli``: the console script without an installed entry point (the GPU machine)."""

import sys

from gemm_bench.cli.commands import main

sys.exit(main())
