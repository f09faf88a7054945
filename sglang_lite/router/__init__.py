"""``sglang-lite router``: a cache-aware HTTP router in front of ``sglang-lite serve`` replicas
(and ``sglang-lite serve --dp N``, which starts N replicas behind one)."""

from __future__ import annotations

import logging
import signal
import sys

from sglang_lite.router.app import create_router_app
from sglang_lite.router.args import RouterConfig, parse_args

__all__ = ["RouterConfig", "create_router_app", "main", "run_router"]


def run_router(config: RouterConfig) -> None:
    """Serve the router until SIGINT / SIGTERM."""
    import uvicorn

    app = create_router_app(config)
    logging.getLogger(__name__).info("routing %s over %s on http://%s:%d", config.policy,
                                     ", ".join(config.worker_urls), config.host, config.port)
    # uvicorn re-raises the signal it caught once it has shut down; a no-op handler makes a
    # graceful SIGTERM end with exit status 0 (and lets `serve --dp` stop its replicas after).
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    uvicorn.run(app, host=config.host, port=config.port, log_level=config.log_level,
                lifespan="on", timeout_graceful_shutdown=5)


def main(argv: list[str]) -> int:
    try:
        config = parse_args(argv)
    except ValueError as e:
        print(f"sglang-lite router: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=config.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per proxied request
    run_router(config)
    return 0
