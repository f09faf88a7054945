"""Find a program's constant leading text by running it on placeholder arguments.

Everything appended before the first argument-dependent text, ``gen``, ``select`` or read is
the same for every input of a batch: ``run_batch`` prefills it once so every program hits
the cache for it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from frontend_dsl.chat_template import ChatTemplate
from frontend_dsl.ir import Role, RoleBegin, RoleEnd, Seq, VarScopeBegin, VarScopeEnd

_MARK = "\x1fSGLDSL-ARG\x1f"


class _StopTrace(Exception):
    pass


class _Placeholder:
    """Stands for an argument: formatting it yields a marker; anything else stops the trace."""

    def __str__(self) -> str:
        return _MARK

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        return _MARK

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, str):
            return other + _MARK
        raise _StopTrace

    def __getattr__(self, name: str) -> Any:
        raise _StopTrace

    def _stop(self, *args: Any, **kwargs: Any) -> Any:
        raise _StopTrace

    __add__ = __getitem__ = __iter__ = __len__ = __call__ = __bool__ = __eq__ = __lt__ = _stop
    __hash__ = object.__hash__


class TraceState:
    """Stands for the state: appends constant text; anything model- or input-dependent stops."""

    def __init__(self, template: ChatTemplate):
        self.template = template
        self.text = ""
        self._turns = 0

    def _begin(self, role: str) -> None:
        default = self.template.default_system_prompt
        if role != "system" and default and not self._turns:  # as ProgramState does
            self.text += self.template.begin("system") + default + self.template.end("system")
        self._turns += 1
        self.text += self.template.begin(role)

    def __iadd__(self, expr: Any) -> TraceState:
        self._add(expr)
        return self

    def _add(self, expr: Any) -> None:
        if isinstance(expr, str):
            cut = expr.find(_MARK)
            self.text += expr if cut < 0 else expr[:cut]
            if cut >= 0:
                raise _StopTrace
        elif isinstance(expr, Role):
            self._begin(expr.role)
            for part in expr.content:
                self._add(part)
            self.text += self.template.end(expr.role)
        elif isinstance(expr, RoleBegin):
            self._begin(expr.role)
        elif isinstance(expr, RoleEnd):
            self.text += self.template.end(expr.role)
        elif isinstance(expr, (VarScopeBegin, VarScopeEnd)):
            pass
        elif isinstance(expr, (list, Seq)) or type(expr) is tuple:
            for part in expr:
                self._add(part)
        else:  # gen, select, anything else: from here on the text depends on the model
            raise _StopTrace

    def _role(self, role: str, expr: Any = None):
        if expr is not None:
            self._add(Role(role, [expr]))
            return expr
        return self._block(RoleBegin(role), RoleEnd(role))

    @contextmanager
    def _block(self, begin: Any, end: Any):
        self._add(begin)
        yield self
        self._add(end)

    def system(self, expr: Any = None):
        return self._role("system", expr)

    def user(self, expr: Any = None):
        return self._role("user", expr)

    def assistant(self, expr: Any = None):
        return self._role("assistant", expr)

    def var_scope(self, name: str):
        return self._block(VarScopeBegin(name), VarScopeEnd(name))

    def __setitem__(self, name: str, value: Any) -> None:
        pass

    def set_var(self, name: str, value: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        raise _StopTrace


def constant_prefix(func: Callable[..., Any], template: ChatTemplate) -> str:
    """The text every run of ``func`` starts with, whatever its arguments ("" if none)."""
    params = list(inspect.signature(func).parameters.values())[1:]
    kwargs = {p.name: _Placeholder() for p in params
              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    state = TraceState(template)
    try:
        func(state, **kwargs)
    except Exception:  # _StopTrace, or the program choked on a placeholder: stop here
        pass
    return state.text
