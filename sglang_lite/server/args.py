"""`sglang-lite serve` command-line arguments: server options, plus every EngineConfig field
as a --kebab-case flag (only the flags given are passed to the engine)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields
from typing import Any

from sglang_lite.config import EngineConfig
from sglang_lite.router.args import add_routing_flags
from sglang_lite.server.limits import DEFAULT_MAX_REQUEST_BYTES
from sglang_lite.server.parsers import REASONING_PARSERS, TOOL_CALL_PARSERS
from sglang_lite.server.tenancy import SALT_BY


@dataclass(slots=True)
class ServerArgs:
    model: str | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    api_key: list[str] | None = None
    api_key_file: str | None = None
    open_metrics: bool = False
    served_model_name: list[str] | None = None
    shutdown_timeout: float = 30.0
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    cache_salt_by: str = "none"
    log_level: str = "info"
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    chat_template: str | None = None
    generation_config: str = "auto"
    override_generation_config: str | None = None
    allowed_origins: list[str] | None = None
    allowed_methods: list[str] | None = None
    allowed_headers: list[str] | None = None
    allow_credentials: bool = False
    engine_options: dict[str, Any] = field(default_factory=dict)
    dp: int = 1
    router_options: dict[str, Any] = field(default_factory=dict)  # --dp: the router's flags


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sglang-lite serve",
                                description="OpenAI-compatible and SGLang-native HTTP server.")
    p.add_argument("--model", default=None, help="HF directory, GGUF file, or 'dummy' (default: embedded model)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--api-key", action="append", default=None,
                   help="require 'Authorization: Bearer KEY' (repeatable; see also --api-key-file "
                        "and $SGLANG_LITE_API_KEYS, which keep keys out of `ps`)")
    p.add_argument("--api-key-file", default=None, help="file of API keys, one a line")
    p.add_argument("--open-metrics", action="store_true",
                   help="serve /metrics without an API key (for scrapers)")
    p.add_argument("--served-model-name", nargs="+", default=None,
                   help="model name(s) clients may use; responses carry the first (vLLM takes several)")
    p.add_argument("--chat-template", default=None,
                   help="chat template: a jinja file or the template itself (default: the tokenizer's)")
    p.add_argument("--generation-config", default="auto",
                   help="sampling defaults: 'auto' (the model's generation_config.json), 'vllm' "
                        "(none), or a directory/file; request fields override them")
    p.add_argument("--override-generation-config", default=None,
                   help='JSON object over the generation config, e.g. \'{"temperature": 0.5}\'')
    p.add_argument("--allowed-origins", nargs="*", default=None,
                   help="CORS origins (a JSON list or names); CORS is off without this")
    p.add_argument("--allowed-methods", nargs="*", default=None, help="CORS methods (default: all)")
    p.add_argument("--allowed-headers", nargs="*", default=None, help="CORS headers (default: all)")
    p.add_argument("--allow-credentials", action="store_true", help="CORS: allow credentials")
    p.add_argument("--scheduling-policy", choices=["fcfs", "priority"], default=None,
                   help="vLLM's flag: 'priority' = --enable-priority-scheduling with lower values "
                        "first and preemption on any difference")
    p.add_argument("--shutdown-timeout", type=float, default=30.0,
                   help="seconds running requests get to finish after SIGTERM before they are aborted")
    p.add_argument("--max-request-bytes", type=int, default=DEFAULT_MAX_REQUEST_BYTES,
                   help="bodies larger than this are refused with 413 before they are read")
    p.add_argument("--cache-salt-by", choices=SALT_BY, default="none",
                   help="give each API key (or each `user`) its own prefix-cache namespace")
    p.add_argument("--log-level", default="info")
    p.add_argument("--tool-call-parser", default=None, choices=sorted(TOOL_CALL_PARSERS),
                   help="the model's tool-call format (default: from the chat template, else generic)")
    p.add_argument("--reasoning-parser", default=None, choices=sorted(REASONING_PARSERS),
                   help="split <think> blocks into reasoning_content")
    dp = p.add_argument_group("data parallelism (sglang_lite/router/launcher.py)")
    dp.add_argument("--dp", "--dp-size", dest="dp", type=int, default=1,
                    help="start this many replicas on free local ports behind a cache-aware "
                         "router on --host/--port (default: 1, no router)")
    add_routing_flags(dp, policy_flag="--router-policy", dest_prefix="router__")
    engine = p.add_argument_group("engine options")
    engine.add_argument("--enable-deterministic-inference", dest="engine__deterministic", action="store_true",
                        default=argparse.SUPPRESS, help="SGLang's name for --deterministic")
    engine.add_argument("--tp-size", dest="engine__tp", type=int, default=argparse.SUPPRESS,
                        help="SGLang's name for --tp (tensor-parallel ranks)")
    for f in fields(EngineConfig):
        if f.name == "model":
            continue
        _add_engine_flag(engine, f.name, str(f.type), f.default)
    return p


def _add_engine_flag(group, name: str, type_name: str, default: Any) -> None:
    flag = "--" + name.replace("_", "-")
    kw: dict[str, Any] = {"dest": "engine__" + name, "default": argparse.SUPPRESS,
                          "help": f"(default: {default})"}
    if type_name == "bool":
        group.add_argument(flag, action=argparse.BooleanOptionalAction, **kw)
        return
    if type_name.startswith("int"):
        kw["type"] = int
    elif type_name.startswith("float"):
        kw["type"] = float
    group.add_argument(flag, **kw)


def parse_args(argv: list[str]) -> ServerArgs:
    ns = vars(build_parser().parse_args(argv))
    engine_options = {k.removeprefix("engine__"): v for k, v in ns.items() if k.startswith("engine__")}
    if ns.pop("scheduling_policy") == "priority":  # vLLM: lower values first; flags given win
        engine_options = {"enable_priority_scheduling": True, "schedule_low_priority_values_first": True,
                          "priority_scheduling_preemption_threshold": 0, **engine_options}
    router_options = {k.removeprefix("router__"): v for k, v in ns.items() if k.startswith("router__")}
    server = {k: v for k, v in ns.items() if not k.startswith(("engine__", "router__"))}
    if server["dp"] < 1:
        raise SystemExit("sglang-lite serve: --dp must be >= 1")
    return ServerArgs(**server, engine_options=engine_options, router_options=router_options)
