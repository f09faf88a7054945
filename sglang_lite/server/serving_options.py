"""What an operator sets for the OpenAI-compatible frontend, beside the engine: the chat
template (``--chat-template``, a file or inline jinja), sampling defaults from the model's
``generation_config.json`` (``--generation-config``, as vLLM reads it), and CORS
(``--allowed-origins``; off unless given). Resolved once at start, then read-only."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglang_lite.errors import InvalidRequest

# generation_config.json keys that become request defaults (vLLM's set), as engine keys.
_GENERATION_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_new_tokens")


@dataclass(frozen=True, slots=True)
class ServingOptions:
    chat_template: str | None = None  # overrides the tokenizer's
    generation_defaults: dict[str, Any] = field(default_factory=dict)  # engine keys
    allowed_origins: tuple[str, ...] = ()  # CORS off when empty
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    allow_credentials: bool = False

    def with_defaults(self, params: dict[str, Any], given: set[str]) -> dict[str, Any]:
        """``params`` with the model's defaults for every key the client did not set
        (``given``: engine keys); ``max_new_tokens`` is left to the caller."""
        out = dict(params)
        for key, value in self.generation_defaults.items():
            if key != "max_new_tokens" and key not in given:
                out[key] = value
        return out

    @property
    def default_max_new_tokens(self) -> int | None:
        return self.generation_defaults.get("max_new_tokens")


# apply_chat_template's own parameters: a request's chat_template_kwargs may not set them
# (a template from the client, or token ids instead of text).
_RESERVED_TEMPLATE_KWARGS = frozenset({
    "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "padding", "truncation", "max_length", "return_tensors",
    "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs"})


def template_kwargs(kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """A request's ``chat_template_kwargs`` (variables for the template, e.g.
    ``enable_thinking``); InvalidRequest naming a reserved key."""
    for key in kwargs or {}:
        if key in _RESERVED_TEMPLATE_KWARGS:
            raise InvalidRequest(f"chat_template_kwargs.{key}", "reserved; not settable per request")
    return dict(kwargs or {})


def load_chat_template(value: str | None) -> str | None:
    """A template file's text, or ``value`` itself when it is inline jinja; ValueError
    naming ``chat_template`` otherwise, or when the template does not parse."""
    if value is None:
        return None
    path = Path(value).expanduser()
    if len(value) < 4096 and "\n" not in value and path.is_file():
        text = path.read_text(encoding="utf-8")
    elif "{{" in value or "{%" in value:
        text = value
    else:
        raise ValueError(f"chat_template: {value!r} is neither a file nor a jinja template")
    from jinja2 import TemplateSyntaxError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    try:
        ImmutableSandboxedEnvironment().parse(text)
    except TemplateSyntaxError as e:
        raise ValueError(f"chat_template: line {e.lineno}: {e.message}") from None
    return text


def load_generation_defaults(setting: str, model_path: Path | None,
                             overrides: str | dict | None = None) -> dict[str, Any]:
    """Sampling defaults, as engine keys: ``setting`` is ``auto`` (the model directory's
    generation_config.json), ``vllm`` or ``none`` (no defaults), or a directory or file;
    ``overrides`` (a JSON object) wins over the file."""
    config: dict[str, Any] = {}
    if setting not in ("vllm", "none"):
        file = _generation_config_file(setting, model_path)
        if file is not None:
            try:
                config = json.loads(file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                raise ValueError(f"generation_config: cannot read {file}: {e}") from None
    if isinstance(overrides, str):
        try:
            overrides = json.loads(overrides)
        except ValueError as e:
            raise ValueError(f"override_generation_config: not JSON: {e}") from None
    if overrides is not None and not isinstance(overrides, dict):
        raise ValueError("override_generation_config: must be a JSON object")
    merged = {**config, **(overrides or {})}
    return {k: merged[k] for k in _GENERATION_KEYS if merged.get(k) is not None}


def _generation_config_file(setting: str, model_path: Path | None) -> Path | None:
    if setting == "auto":
        if model_path is None:
            return None
        base = Path(model_path)
        file = (base if base.is_dir() else base.parent) / "generation_config.json"
        return file if file.is_file() else None
    path = Path(setting).expanduser()
    file = path / "generation_config.json" if path.is_dir() else path
    if not file.is_file():
        raise ValueError(f"generation_config: no generation_config.json at {setting!r} "
                         "(use auto, vllm, or a directory or file)")
    return file


def parse_origins(values: list[str] | None) -> tuple[str, ...]:
    """``--allowed-origins`` as vLLM takes it (a JSON list) or as a comma-separated list."""
    out: list[str] = []
    for v in values or []:
        v = v.strip()
        if v.startswith("["):
            try:
                items = json.loads(v)
            except ValueError as e:
                raise ValueError(f"allowed_origins: not a JSON list: {e}") from None
            if not isinstance(items, list) or not all(isinstance(x, str) for x in items):
                raise ValueError("allowed_origins: must be a JSON list of strings")
            out += items
        else:
            out += [x.strip() for x in v.split(",") if x.strip()]
    return tuple(out)
