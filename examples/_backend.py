"""Shared by the examples: ``--url http://127.0.0.1:30000`` uses a running server,
otherwise the embedded model runs in this process."""

from __future__ import annotations

import argparse
import atexit

from frontend_dsl import EngineBackend, RuntimeEndpoint, set_default_backend


def setup(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", default=None, help="a running `sglang-lite serve` (default: in-process)")
    args = parser.parse_args()
    backend = RuntimeEndpoint(args.url) if args.url else EngineBackend()
    atexit.register(backend.shutdown)  # stop the engine's thread before the interpreter exits
    set_default_backend(backend)
    return args
