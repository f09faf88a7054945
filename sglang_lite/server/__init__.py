"""The HTTP server: ``sglang-lite serve`` (OpenAI-compatible and SGLang-native routes)."""

from __future__ import annotations

import logging
import signal
import sys

import uvicorn

from sglang_lite.server.app import create_app
from sglang_lite.server.args import ServerArgs, parse_args
from sglang_lite.server.serving_options import (
    ServingOptions,
    load_chat_template,
    load_generation_defaults,
    parse_origins,
)

__all__ = ["create_app", "main", "ServerArgs"]

log = logging.getLogger(__name__)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from sglang_lite.engine import Engine

    try:
        serving = serving_options(args, None)  # bad flags fail before the model loads
        engine = Engine(args.model, **args.engine_options)
        serving = serving_options(args, engine.source.path)
    except ValueError as e:
        print(f"sglang-lite serve: {e}", file=sys.stderr)
        return 2
    app = create_app(engine, args.served_model_name, args.api_key, serving)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=args.shutdown_timeout, lifespan="off")
    server = _DrainingServer(config, app.state)
    # uvicorn re-raises the signal it caught once it has shut down; make that a no-op so a
    # graceful SIGTERM ends with exit status 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    log.info("serving %s on http://%s:%d", app.state.served_model_name, args.host, args.port)
    try:
        server.run()
    finally:
        engine.shutdown()
    return 0


def serving_options(args: ServerArgs, model_path) -> ServingOptions:
    """The frontend's options from the flags; ``model_path`` (None: not loaded yet) is where
    ``--generation-config auto`` looks."""
    return ServingOptions(
        chat_template=load_chat_template(args.chat_template),
        generation_defaults=load_generation_defaults(args.generation_config, model_path,
                                                     args.override_generation_config),
        allowed_origins=parse_origins(args.allowed_origins),
        allowed_methods=tuple(args.allowed_methods or ("*",)),
        allowed_headers=tuple(args.allowed_headers or ("*",)),
        allow_credentials=args.allow_credentials)


class _DrainingServer(uvicorn.Server):
    """uvicorn's server, but a shutdown signal first marks the app as draining (503s)."""

    def __init__(self, config: uvicorn.Config, state):
        super().__init__(config)
        self.app_state = state

    def handle_exit(self, sig, frame) -> None:
        self.app_state.draining = True
        super().handle_exit(sig, frame)
