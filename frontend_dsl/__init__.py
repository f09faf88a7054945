"""The frontend DSL: SGLang-style ``@function`` programs over an engine.

    from frontend_dsl import function, gen, select, user, assistant, set_default_backend, EngineBackend

    @function
    def qa(s, question):
        s += user(question)
        s += assistant(gen("answer", max_tokens=64))

    set_default_backend(EngineBackend())
    print(qa.run(question="What is 2 + 2?")["answer"])
"""

from frontend_dsl.backends.base import Backend, BackendError
from frontend_dsl.backends.engine import EngineBackend
from frontend_dsl.backends.runtime_endpoint import RuntimeEndpoint
from frontend_dsl.errors import DSLError, ProgramError, VariableNotFoundError
from frontend_dsl.ir import assistant, gen, select, system, user
from frontend_dsl.program import SglFunction, function, get_default_backend, set_default_backend
from frontend_dsl.state import ForkGroup, ProgramState

__all__ = [
    "Backend", "BackendError", "DSLError", "EngineBackend", "ForkGroup", "ProgramError",
    "ProgramState", "RuntimeEndpoint", "SglFunction", "VariableNotFoundError", "assistant",
    "function", "gen", "get_default_backend", "select", "set_default_backend", "system", "user",
]
