"""OpenAI tool calling for chat completions, on top of structured generation.

``tool_choice``:
  * ``"none"``: a plain chat reply; the tools are not shown to the model.
  * ``{"type": "function", "function": {"name": F}}``: the output is constrained to F's
    ``parameters`` JSON Schema and becomes one call to F.
  * ``"required"``: the output is constrained to a JSON array of ``{"name", "arguments"}``
    objects, each matching one tool (exactly one element when ``parallel_tool_calls`` is
    false), and becomes those calls.
  * ``"auto"`` (the default with tools): the model decides. The tools go into the prompt (the
    chat template's own ``tools`` support, else a system message in the Hermes
    ``<tool_call>`` format) and the reply is parsed: ``<tool_call>{...}</tool_call>`` blocks,
    or a bare JSON object / array of ``{"name", "arguments"}`` naming known tools, become
    calls; anything else is ordinary content. With a family's parser (``parsers.tool_calls``:
    ``--tool-call-parser`` or the chat template's format) its format is parsed instead.

Constrained output is valid by construction; an "auto" reply that does not parse as calls of
known tools is returned as content, never as a made-up call. Streamed, a named call's
arguments go out as they are generated; other calls go out whole when the reply ends.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from sglang_lite.errors import InvalidRequest
from sglang_lite.server.parsers.tool_calls import ToolCallParser

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOOLS = 128
_TOOL_CALL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)


@dataclass(frozen=True, slots=True)
class ToolPlan:
    """How one request uses its tools: ``mode`` is none / auto / required / named."""

    mode: str
    tools: list[dict[str, Any]]  # the validated {"type": "function", "function": {...}} entries
    function: str | None = None  # the named function
    parallel: bool = True
    parser: ToolCallParser | None = None  # the model family's format in "auto" mode; None: generic

    @property
    def keeps_special_tokens(self) -> bool:
        """The auto-mode parser reads markers that are special tokens."""
        return self.mode == "auto" and self.parser is not None and self.parser.needs_special_tokens

    def split(self, text: str) -> tuple[str | None, list[dict[str, Any]] | None]:
        """(content, tool calls or None) of a whole reply: the text a family's parser finds
        before its calls stays content."""
        if self.mode == "auto" and self.parser is not None:
            found = self.parser.parse(text, self.names)
            return (text, None) if found is None else found
        calls = self.calls(text)
        return (None, calls) if calls else (text, None)

    @property
    def names(self) -> set[str]:
        return {t["function"]["name"] for t in self.tools}

    @property
    def constrained(self) -> bool:
        return self.mode in ("required", "named")

    def schema(self) -> dict[str, Any] | None:
        """The JSON Schema the output is constrained to, or None."""
        params = {t["function"]["name"]: _parameters(t) for t in self.tools}
        if self.mode == "named":
            return params[self.function]
        if self.mode != "required":
            return None
        call = {"anyOf": [{"type": "object", "properties": {"name": {"const": name}, "arguments": schema},
                           "required": ["name", "arguments"], "additionalProperties": False}
                          for name, schema in params.items()]}
        return {"type": "array", "items": call, "minItems": 1, **({} if self.parallel else {"maxItems": 1})}

    def calls(self, text: str) -> list[dict[str, Any]] | None:
        """The tool calls in a reply, or None when it is ordinary content."""
        if self.mode == "named":
            return [_call(self.function, text)]
        if self.mode == "required":
            try:
                items = json.loads(text)
            except json.JSONDecodeError:  # cut short by max_tokens
                return None
            return [_call(item["name"], json.dumps(item["arguments"], ensure_ascii=False)) for item in items]
        if self.mode == "auto":
            if self.parser is not None:
                found = self.parser.parse(text, self.names)
                return found[1] if found else None
            return parse_tool_calls(text, self.names)
        return None

    @property
    def streams_arguments(self) -> bool:
        """A named call streams its arguments as they are generated (the name is known up
        front); other calls are whole only at the end."""
        return self.mode == "named"

    def may_be_calls(self, text: str) -> bool:
        """Whether a streamed reply that begins with ``text`` can still turn into tool calls
        (so it is held back rather than streamed as content)."""
        if self.constrained:
            return True
        if self.mode != "auto":
            return False
        head = text.lstrip()
        if self.parser is not None:
            return self.parser.may_start(head)
        return not head or head[0] in "{[" or "<tool_call>".startswith(head[:11])


def plan_tools(tools: list[dict[str, Any]] | None, tool_choice: Any, parallel_tool_calls: bool | None,
               parser: ToolCallParser | None = None) -> ToolPlan:
    """Validate ``tools`` and ``tool_choice``; every error is a 400 naming the field. ``parser``:
    the model family's tool-call format, for "auto" replies."""
    if not tools:
        if tool_choice not in (None, "none"):
            raise InvalidRequest("tool_choice", "requires tools")
        return ToolPlan("none", [])
    if len(tools) > MAX_TOOLS:
        raise InvalidRequest("tools", f"at most {MAX_TOOLS} tools")
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise InvalidRequest(f"tools.{i}.type", "must be 'function'")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise InvalidRequest(f"tools.{i}.function", "must be an object")
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise InvalidRequest(f"tools.{i}.function.name", "must be 1-64 letters, digits, '_' or '-'")
        if name in seen:
            raise InvalidRequest(f"tools.{i}.function.name", f"duplicate tool {name!r}")
        seen.add(name)
        params = fn.get("parameters")
        if params is not None and (not isinstance(params, dict) or params.get("type", "object") != "object"):
            raise InvalidRequest(f"tools.{i}.function.parameters", "must be a JSON Schema of type object")
    parallel = True if parallel_tool_calls is None else bool(parallel_tool_calls)
    choice = "auto" if tool_choice is None else tool_choice
    if choice in ("none", "auto", "required"):
        return ToolPlan(choice, tools, parallel=parallel, parser=parser)
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if name not in seen:
            raise InvalidRequest("tool_choice", f"no tool named {name!r}")
        return ToolPlan("named", tools, function=name, parallel=parallel, parser=parser)
    raise InvalidRequest("tool_choice", "must be 'none', 'auto', 'required' or "
                        "{'type': 'function', 'function': {'name': ...}}")


def render_tools_prompt(messages: list[dict[str, Any]], plan: ToolPlan, template_has_tools: bool
                        ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(messages, extra chat-template kwargs) that show the tools to the model in "auto" mode
    (constrained modes need no description: the grammar decides the shape)."""
    if plan.mode != "auto":
        return messages, {}
    if template_has_tools:
        return messages, {"tools": plan.tools}
    specs = "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in plan.tools)
    guide = ("You can call these tools:\n<tools>\n" + specs + "\n</tools>\n"
             "To call a tool, reply with only <tool_call>{\"name\": <tool name>, \"arguments\": "
             "<arguments object>}</tool_call>, one block per call. Otherwise, reply normally.")
    if messages and messages[0]["role"] == "system":
        return [{**messages[0], "content": messages[0]["content"] + "\n\n" + guide}, *messages[1:]], {}
    return [{"role": "system", "content": guide}, *messages], {}


def history_message(role: str, content: str | None, tool_calls: list[dict] | None,
                    tool_call_id: str | None, template_has_tools: bool) -> dict[str, Any]:
    """A past assistant tool call or a tool result, for the chat template."""
    msg: dict[str, Any] = {"role": role, "content": content or ""}
    if template_has_tools:
        if tool_calls:
            msg["tool_calls"] = tool_calls
        if tool_call_id:
            msg["tool_call_id"] = tool_call_id
        return msg
    if tool_calls:  # the Hermes text the fallback prompt asks for
        blocks = []
        for call in tool_calls:
            fn = call.get("function", {})
            args = fn.get("arguments", "{}")
            try:
                args = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                pass
            blocks.append("<tool_call>" + json.dumps({"name": fn.get("name"), "arguments": args},
                                                     ensure_ascii=False) + "</tool_call>")
        msg["content"] = (msg["content"] + "\n" if msg["content"] else "") + "\n".join(blocks)
    return msg


def parse_tool_calls(text: str, names: set[str]) -> list[dict[str, Any]] | None:
    """Hermes ``<tool_call>`` blocks or a bare JSON object / array of calls of known tools."""
    s = text.strip()
    if s.startswith("<tool_call>"):
        bodies = [b.strip() for b in _TOOL_CALL_BLOCK.findall(s)]
    elif s[:1] in ("{", "["):
        bodies = [s]
    else:
        return None
    calls = []
    for body in bodies:
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:
            return None
        for item in obj if isinstance(obj, list) else [obj]:
            if not isinstance(item, dict) or item.get("name") not in names:
                return None
            args = item.get("arguments", item.get("parameters", {}))
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except json.JSONDecodeError:
                    return None
            if not isinstance(args, dict):
                return None
            calls.append(_call(item["name"], json.dumps(args, ensure_ascii=False)))
    return calls or None


def _parameters(tool: dict[str, Any]) -> dict[str, Any]:
    return tool["function"].get("parameters") or {"type": "object", "properties": {}}


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"id": new_call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}
