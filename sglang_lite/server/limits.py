"""Request-body limits, as plain ASGI in front of the routes.

- Bytes: a body over ``max_request_bytes`` is refused with 413 as soon as that is known, from
  Content-Length before reading anything, else while reading it (the rest is never read).
- Shape: a JSON body nested deeper than ``max_json_depth``, or holding a string that is not
  valid Unicode (a lone surrogate, ``"\\ud800"``), is a 400 naming where, before any route
  sees it (deep nesting would exhaust the stack, lone surrogates break the tokenizer and
  every encoder after it).

The body is buffered once and replayed to the app; after it, the client's own ``receive``
goes on (so disconnects are still seen).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from sglang_lite.server.errors import error_response

DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class BodyLimits:
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    max_json_depth: int = 100


class BodyLimitMiddleware:
    def __init__(self, app, limits: BodyLimits):
        self.app = app
        self.limits = limits

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        limit = self.limits.max_request_bytes
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(declared, limit)(scope, receive, send)
            return
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # disconnected while sending the body
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await _too_large(size, limit)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        refusal = self._check_json(scope, body)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, _replay(body, receive), send)

    def _check_json(self, scope, body: bytes):
        if not body or b"json" not in dict(scope["headers"]).get(b"content-type", b"application/json"):
            return None
        try:
            doc = json.loads(body)
        except UnicodeDecodeError:
            return _bad("body: not valid UTF-8", "body", "invalid_json")
        except RecursionError:
            return _bad(f"body: JSON nested deeper than {self.limits.max_json_depth} levels", "body",
                        "too_deep")
        except ValueError:
            return None  # malformed: the route's parser says where
        problem = check_document(doc, self.limits.max_json_depth)
        if problem is None:
            return None
        param, message, code = problem
        return _bad(f"{param}: {message}", param, code)


def check_document(doc, max_depth: int) -> tuple[str, str, str] | None:
    """(param, message, code) of the first problem in a parsed JSON document, or None."""
    stack = [(doc, (), 1)]
    while stack:
        node, path, depth = stack.pop()
        if depth > max_depth:
            return _dotted(path[:4]) or "body", f"nested deeper than {max_depth} levels", "too_deep"
        if isinstance(node, str):
            if not _valid_unicode(node):
                return _dotted(path) or "body", "not valid Unicode (a lone surrogate)", "invalid_unicode"
        elif isinstance(node, dict):
            for key, value in node.items():
                if not _valid_unicode(key):
                    return _dotted(path) or "body", "a key is not valid Unicode (a lone surrogate)", "invalid_unicode"
                stack.append((value, (*path, key), depth + 1))
        elif isinstance(node, list):
            stack.extend((value, (*path, i), depth + 1) for i, value in enumerate(node))
    return None


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _dotted(path: tuple) -> str:
    return ".".join(str(p) for p in path)


def _content_length(scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _too_large(size: int, limit: int):
    return error_response(413, f"body: the request body is more than {limit} bytes "
                               f"(max_request_bytes; got {size}+)", param="body", code="request_too_large")


def _bad(message: str, param: str, code: str):
    return error_response(400, message, param=param, code=code)


def _replay(body: bytes, receive):
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
