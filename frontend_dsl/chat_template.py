"""Role prefixes and suffixes, derived once from the model's chat template.

A program appends turns one at a time (and generates inside the assistant turn), so it needs
the text that opens and closes each role, not a whole rendered conversation. Rendering a
conversation with sentinel contents and cutting around the sentinels recovers both. A
template that renders a system turn of its own when a conversation starts without one has a
``default_system_prompt``; a program's first non-system turn gets it too (as in SGLang), so
its text is the one the server's chat route would render.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

ROLES = ("system", "user", "assistant")
_SENTINEL = "\x1fsgl-dsl-{}\x1f"


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    prefixes: dict[str, str]
    suffixes: dict[str, str]
    name: str = "model"
    default_system_prompt: str | None = None

    def begin(self, role: str) -> str:
        return self.prefixes[role]

    def end(self, role: str) -> str:
        return self.suffixes[role]


PLAIN = ChatTemplate(
    prefixes={"system": "System: ", "user": "User: ", "assistant": "Assistant: "},
    suffixes={r: "\n" for r in ROLES}, name="plain",
)


def derive(render: Callable[[list[dict]], str]) -> ChatTemplate:
    """``render(messages)`` renders without a generation prompt (the tokenizer's template).

    Raises ValueError if the template does not render turns as prefix + content + suffix.
    """
    convo = [{"role": r, "content": _SENTINEL.format(i)} for i, r in enumerate(ROLES)]
    text = render(convo)
    prefixes: dict[str, str] = {}
    suffixes: dict[str, str] = {}
    pos = 0
    for i, role in enumerate(ROLES):
        mark = _SENTINEL.format(i)
        start = text.find(mark, pos)
        if start < 0:
            raise ValueError(f"chat template: the {role} turn's content is not rendered verbatim")
        prefixes[role] = text[pos:start] if i == 0 else _split_between(suffixes, ROLES[i - 1], text[pos:start])
        pos = start + len(mark)
    suffixes[ROLES[-1]] = text[pos:]
    # The system turn's prefix may hold template preamble (BOS, a date line): keep it there.
    template = ChatTemplate(prefixes, suffixes)
    check = [{"role": r, "content": f"turn {i}"} for i, r in enumerate(ROLES + ("user",))]
    if render(check) != "".join(template.begin(m["role"]) + m["content"] + template.end(m["role"])
                                for m in check):
        raise ValueError("chat template: turns are not rendered as prefix + content + suffix")
    return ChatTemplate(prefixes, suffixes, default_system_prompt=_default_system(render, template))


def _default_system(render: Callable[[list[dict]], str], template: ChatTemplate) -> str | None:
    """The system text the template adds before a conversation that has no system turn."""
    mark = _SENTINEL.format("u")
    text = render([{"role": "user", "content": mark}])
    head = text[: max(text.find(template.begin("user") + mark), 0)]
    begin, end = template.begin("system"), template.end("system")
    if head.startswith(begin) and head.endswith(end) and len(head) > len(begin) + len(end):
        return head[len(begin): len(head) - len(end)]
    return None


def _split_between(suffixes: dict[str, str], prev_role: str, between: str) -> str:
    """Split the text between two contents into the previous suffix and the next prefix.

    The suffix ends at the first newline (``<|im_end|>\\n``, ``<|eot_id|>``...); a template
    with no newline between turns puts everything into the next prefix.
    """
    cut = between.find("\n") + 1
    suffixes[prev_role] = between[:cut]
    return between[cut:]


def from_tokenizer(tokenizer) -> ChatTemplate:
    """The model's template if it has one that fits, else the plain-text fallback."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return PLAIN

    def render(messages: list[dict]) -> str:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)

    try:
        return derive(render)
    except Exception:  # a template that reorders or rewrites turns: fall back, do not guess
        return PLAIN
