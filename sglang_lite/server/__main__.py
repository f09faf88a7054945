"""``python -m sglang_lite.server [serve options]``: the same as ``sglang-lite serve``."""

import sys

from sglang_lite.server import main

sys.exit(main(sys.argv[1:]))
