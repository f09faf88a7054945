"""`sglang-lite` command line: demo, serve, bench."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "serve":  # the server parses its own (many) flags
        from sglang_lite.server import main as serve_main

        return serve_main(argv[1:])
    if argv and argv[0] == "router":
        from sglang_lite.router import main as router_main

        return router_main(argv[1:])
    parser = argparse.ArgumentParser(prog="sglang-lite", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="generate a batch of chat completions on the default model")
    demo.add_argument("--model", default=None)
    demo.add_argument("--max-new-tokens", type=int, default=64)
    sub.add_parser("serve", help="OpenAI-compatible HTTP server (sglang-lite serve --help)")
    sub.add_parser("router", help="cache-aware router over serve replicas (sglang-lite router --help)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from sglang_lite.demo import run_demo

        return run_demo(args.model, args.max_new_tokens)
    return 2


if __name__ == "__main__":
    sys.exit(main())
