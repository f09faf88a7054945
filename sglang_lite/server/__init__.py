"""The HTTP server: ``sglang-lite serve`` (OpenAI-compatible and SGLang-native routes)."""

from __future__ import annotations

import logging
import signal
import sys

import uvicorn

from sglang_lite.errors import RankFailed
from sglang_lite.server.app import create_app
from sglang_lite.server.args import ServerArgs, parse_args
from sglang_lite.server.auth import load_api_keys
from sglang_lite.server.limits import BodyLimits
from sglang_lite.server.serving_options import (
    ServingOptions,
    load_chat_template,
    load_generation_defaults,
    parse_origins,
)
from sglang_lite.server.shutdown import DrainingServer

__all__ = ["create_app", "main", "ServerArgs"]

log = logging.getLogger(__name__)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.dp > 1:
        from sglang_lite.router.launcher import launch_replicas_and_router

        return launch_replicas_and_router(args, argv)
    from sglang_lite.engine import Engine

    try:
        api_keys = load_api_keys(args.api_key, args.api_key_file)
        serving = serving_options(args, None)  # bad flags fail before the model loads
        # A server compiles constraints in worker processes unless told otherwise.
        engine = Engine(args.model, **{"grammar_compile_workers": 2, **args.engine_options})
        serving = serving_options(args, engine.source.path)
    except (ValueError, RankFailed) as e:  # a bad option, or a rank that died while starting
        print(f"sglang-lite serve: {e}", file=sys.stderr)
        return 2
    app = create_app(engine, args.served_model_name, api_keys, open_metrics=args.open_metrics,
                     limits=BodyLimits(max_request_bytes=args.max_request_bytes),
                     cache_salt_by=args.cache_salt_by, tool_call_parser=args.tool_call_parser,
                     reasoning_parser=args.reasoning_parser, serving_options=serving)
    # The startup heap (model, tokenizer, imports) never becomes garbage: out of the collector's
    # reach, a full collection no longer stalls the scheduler for ~100 ms (Engine.freeze_gc).
    log.info("froze %d startup objects out of the garbage collector's reach", engine.freeze_gc())
    # Draining is ours (DrainingServer); uvicorn's own grace is for the last bytes.
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=5, lifespan="off")
    server = DrainingServer(config, app.state, args.shutdown_timeout)
    engine.on_failure(lambda error: _stop_on_engine_failure(server, error))
    # uvicorn re-raises the signal it caught once it has shut down; make that a no-op so a
    # graceful SIGTERM ends with exit status 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    log.info("serving %s on http://%s:%d", app.state.served_model_name, args.host, args.port)
    try:
        server.run()
    finally:
        engine.shutdown()
    if engine.failure is not None:
        print(f"sglang-lite serve: {engine.failure}", file=sys.stderr)
        return 1
    return 0


def _stop_on_engine_failure(server: DrainingServer, error: Exception) -> None:
    """The engine stopped on its own (a tensor-parallel rank died): its requests have failed
    with the error; the server goes down instead of answering 503 for ever."""
    log.error("engine failed, shutting the server down: %s", error)
    server.should_exit = True


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
