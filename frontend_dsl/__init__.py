"""The frontend DSL: SGLang's frontend language, so ``import frontend_dsl as sgl`` runs
programs written for ``import sglang as sgl``.

    import frontend_dsl as sgl

    @sgl.function
    def qa(s, question):
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=64))

    sgl.set_default_backend(sgl.EngineBackend())
    print(qa(question="What is 2 + 2?", temperature=0)["answer"])
"""

from frontend_dsl.backends.base import Backend, BackendError, TokenUsage
from frontend_dsl.backends.engine import EngineBackend
from frontend_dsl.backends.openai_compat import OpenAI
from frontend_dsl.backends.runtime import Runtime
from frontend_dsl.backends.runtime_endpoint import RuntimeEndpoint
from frontend_dsl.errors import DSLError, ProgramError, VariableNotFoundError
from frontend_dsl.fork import ForkGroup
from frontend_dsl.global_config import global_config
from frontend_dsl.ir import (
    REGEX_BOOL,
    REGEX_FLOAT,
    REGEX_INT,
    REGEX_STR,
    assistant,
    assistant_begin,
    assistant_end,
    gen,
    gen_int,
    gen_string,
    image,
    select,
    separate_reasoning,
    system,
    system_begin,
    system_end,
    user,
    user_begin,
    user_end,
    video,
)
from frontend_dsl.program import (
    SglFunction,
    flush_cache,
    function,
    get_default_backend,
    get_server_info,
    set_default_backend,
)
from frontend_dsl.state import ProgramState

ProgramStateGroup = ForkGroup  # SGLang's name

__all__ = [
    "REGEX_BOOL", "REGEX_FLOAT", "REGEX_INT", "REGEX_STR", "Backend", "BackendError", "DSLError",
    "EngineBackend", "ForkGroup", "OpenAI", "ProgramError", "ProgramState", "ProgramStateGroup",
    "Runtime", "RuntimeEndpoint", "SglFunction", "TokenUsage", "VariableNotFoundError", "assistant",
    "assistant_begin", "assistant_end", "flush_cache", "function", "gen", "gen_int", "gen_string",
    "get_default_backend", "get_server_info", "global_config", "image", "select", "separate_reasoning", "set_default_backend",
    "system", "system_begin", "system_end", "user", "user_begin", "user_end", "video",
]
