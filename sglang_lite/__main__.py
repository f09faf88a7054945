import sys

from sglang_lite.cli import main

sys.exit(main())
