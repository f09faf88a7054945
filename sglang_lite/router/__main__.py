import sys

from sglang_lite.router import main

sys.exit(main(sys.argv[1:]))
