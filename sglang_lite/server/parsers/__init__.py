"""Parsers of model output for the OpenAI API: tool calls per model family, and reasoning
(``<think>``) blocks."""

from sglang_lite.server.parsers.reasoning import (
           REASONING_PARSERS,
           ReasoningParser,
           ReasoningStream,
           reasoning_parser,
)
from sglang_lite.server.parsers.tool_calls import (
           TOOL_CALL_PARSERS,
           ToolCallParser,
           select_tool_call_parser,
)

__all__ = ["REASONING_PARSERS", "TOOL_CALL_PARSERS", "ReasoningParser", "ReasoningStream", "ToolCallParser",
           "reasoning_parser", "select_tool_call_parser"]
