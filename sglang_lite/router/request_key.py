"""What the router reads from a request body: the text its prefix is matched on, whether it
streams, and its session. The body itself is forwarded unchanged."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sglang_lite.router.sessions import SESSION_HEADER


@dataclass(slots=True, frozen=True)
class RequestKey:
    text: str
    stream: bool
    session: str | None


def request_key(path: str, body: dict[str, Any], headers: dict[str, str]) -> RequestKey:
    """``body``: the parsed JSON object of a /v1/chat/completions, /v1/completions or
    /generate request (already checked to be an object)."""
    if path.endswith("/chat/completions"):
        text = _messages_text(body.get("messages"))
    elif path.endswith("/completions"):
        text = _prompt_text(body.get("prompt"))
    else:  # /generate: SGLang's text or input_ids
        text = _prompt_text(body.get("text") if body.get("text") is not None else body.get("input_ids"))
    session = headers.get(SESSION_HEADER) or body.get("user")
    return RequestKey(text, bool(body.get("stream")), session if isinstance(session, str) else None)


def _messages_text(messages: Any) -> str:
    if not isinstance(messages, list):
        return ""
    parts = []
    for m in messages:
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, list):  # content parts: the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<{m.get('role')}>{content if isinstance(content, str) else ''}")
    return "".join(parts)


def _prompt_text(prompt: Any) -> str:
    """A string as it is; a batch by its first prompt; token ids as JSON text (a prefix of
    ids is a prefix of its JSON, less the closing bracket)."""
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    return json.dumps(prompt)[:-1] if isinstance(prompt, list) else ""
