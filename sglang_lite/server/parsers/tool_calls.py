"""Tool-call formats per model family (``--tool-call-parser``, else chosen from the chat
template): what a model writes when it calls tools, parsed into OpenAI ``tool_calls``.

* ``hermes`` (also ``qwen``, ``qwen25``): ``<tool_call>{"name": .., "arguments": {..}}</tool_call>``
  blocks, after optional text (Hermes, Qwen 2.5 / 3).
* ``llama3`` (also ``llama3_json``): ``<|python_tag|>`` (optional), then JSON objects
  ``{"name": .., "parameters": {..}}`` separated by ``;`` (Llama 3.1 / 3.2 / 3.3).
* ``mistral``: ``[TOOL_CALLS]`` then a JSON array of ``{"name", "arguments"}``, or (tokenizer
  v11+) ``[TOOL_CALLS]name[ARGS]{..}`` per call.

A reply that does not parse as calls of known tools is content, never a made-up call.
"""

from __future__ import annotations

import json
import re
import uuid
from abc import ABC, abstractmethod
from typing import Any

Calls = list[dict[str, Any]]
_DECODER = json.JSONDecoder()


class ToolCallParser(ABC):
    name: str
    # Its markers are special tokens (<|python_tag|>, [TOOL_CALLS]): the reply must be
    # detokenized with them kept.
    needs_special_tokens: bool = False

    @abstractmethod
    def parse(self, text: str, names: set[str]) -> tuple[str | None, Calls] | None:
        """(content before the calls or None, the calls), or None when ``text`` is not calls."""

    @abstractmethod
    def may_start(self, head: str) -> bool:
        """Whether a streamed reply that begins with ``head`` (left-stripped) may be calls."""


class HermesParser(ToolCallParser):
    name = "hermes"
    _BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)

    def parse(self, text, names):
        idx = text.find("<tool_call>")
        if idx < 0:
            return None
        items = []
        for body in self._BLOCK.findall(text[idx:]):
            value = _json_value(body.strip())
            items.extend(value if isinstance(value, list) else [value])
        calls = _calls(items, names)
        return (text[:idx].strip() or None, calls) if calls else None

    def may_start(self, head):
        return _may_be_marker(head, "<tool_call>")


class Llama3JsonParser(ToolCallParser):
    name = "llama3"
    needs_special_tokens = True

    def parse(self, text, names):
        s = text.strip().removeprefix("<|python_tag|>").strip()
        items, pos = [], 0
        while pos < len(s):
            try:
                obj, end = _DECODER.raw_decode(s, pos)
            except json.JSONDecodeError:
                return None
            items.append(obj)
            pos = end
            while pos < len(s) and s[pos] in " \t\r\n;":
                pos += 1
        calls = _calls(items, names)
        return (None, calls) if calls else None

    def may_start(self, head):
        return not head or head[0] == "{" or _may_be_marker(head, "<|python_tag|>")


class MistralParser(ToolCallParser):
    name = "mistral"
    needs_special_tokens = True
    _MARKER = "[TOOL_CALLS]"
    _NAMED = re.compile(r"\s*([A-Za-z0-9_-]{1,64})\s*(?:\[CALL_ID\][A-Za-z0-9]*)?\s*(?:\[ARGS\])?\s*(\{.*)", re.S)

    def parse(self, text, names):
        idx = text.find(self._MARKER)
        content, rest = (text[:idx].strip() or None, text[idx:]) if idx >= 0 else (None, text.strip())
        segments = [seg for seg in rest.split(self._MARKER) if seg.strip()]
        if not segments:
            return None
        if segments[0].lstrip().startswith("["):  # one JSON array of calls
            items = _json_value(segments[0].strip())
            calls = _calls(items, names) if isinstance(items, list) and len(segments) == 1 else None
            return (content, calls) if calls else None
        if idx < 0:
            return None
        items = []
        for seg in segments:  # v11+: name[ARGS]{arguments} per call
            m = self._NAMED.match(seg)
            args = _json_value(m.group(2).strip()) if m else None
            if not isinstance(args, dict):
                return None
            items.append({"name": m.group(1), "arguments": args})
        calls = _calls(items, names)
        return (content, calls) if calls else None

    def may_start(self, head):
        return not head or head[0] == "[" or _may_be_marker(head, self._MARKER)


TOOL_CALL_PARSERS: dict[str, type[ToolCallParser]] = {
    "hermes": HermesParser, "qwen": HermesParser, "qwen25": HermesParser,
    "llama3": Llama3JsonParser, "llama3_json": Llama3JsonParser,
    "mistral": MistralParser,
}


def select_tool_call_parser(name: str | None, chat_template: str | None) -> ToolCallParser | None:
    """The parser called ``name``, else the one the chat template's tool format implies, else
    None (the generic parser in ``tools``)."""
    if name is not None:
        if name not in TOOL_CALL_PARSERS:
            raise ValueError(f"tool_call_parser: unknown {name!r} (known: {', '.join(TOOL_CALL_PARSERS)})")
        return TOOL_CALL_PARSERS[name]()
    template = chat_template or ""
    if "<tool_call>" in template:
        return HermesParser()
    if "<|python_tag|>" in template or "Environment: ipython" in template:
        return Llama3JsonParser()
    if "[TOOL_CALLS]" in template or "[AVAILABLE_TOOLS]" in template:
        return MistralParser()
    return None


def _may_be_marker(head: str, marker: str) -> bool:
    return head.startswith(marker) or marker.startswith(head)


def _json_value(s: str) -> Any:
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        return None


def _calls(items: Any, names: set[str]) -> Calls | None:
    """OpenAI tool calls for ``items`` ({"name", "arguments" | "parameters"}), or None if any
    is not a call of a known tool with an object of arguments."""
    if not isinstance(items, list) or not items:
        return None
    calls = []
    for item in items:
        if not isinstance(item, dict) or item.get("name") not in names:
            return None
        args = item.get("arguments", item.get("parameters", {}))
        if isinstance(args, str):
            args = _json_value(args)
        if not isinstance(args, dict):
            return None
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": item["name"], "arguments": json.dumps(args, ensure_ascii=False)}})
    return calls
