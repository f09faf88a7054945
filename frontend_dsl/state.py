"""A running program's state: its text, chat messages, variables, and request metadata.

``s += expr`` executes ``expr`` against the backend. The state of a ``run`` executes in the
caller's thread (``run(stream=True)``: in one background thread); each fork gets a worker
thread, so ``forks[i] += gen(...)`` returns at once and the branches' requests batch together
in the engine. Reads (``s["x"]``, ``text()``) wait for the state's pending work and re-raise
its error; ``sync()`` and ``error()`` wait without raising.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from frontend_dsl.backends.base import Backend
from frontend_dsl.errors import ProgramError, VariableNotFoundError, describe
from frontend_dsl.fork import ForkGroup, Worker
from frontend_dsl.ir import (
    REQUEST_KEYS,
    Gen,
    Role,
    RoleBegin,
    RoleEnd,
    Select,
    SeparateReasoning,
    VarScopeBegin,
    VarScopeEnd,
)
from frontend_dsl.scoring import score_choices
from frontend_dsl.streaming import StreamLog


class ProgramState:
    def __init__(self, backend: Backend, defaults: dict[str, Any] | None = None,
                 stream: StreamLog | None = None):
        self.backend = backend
        self.defaults = dict(defaults or {})
        self.ret_value: Any = None  # what the program function returned
        self._error: BaseException | None = None
        self._text = ""
        self._messages: list[dict[str, str]] = []
        self._variables: dict[str, Any] = {}
        self._var_meta: dict[str, Any] = {}
        self._metas: list[dict[str, Any]] = []
        self._role: tuple[str, int] | None = None  # open role and where its content starts
        self._scopes: dict[str, int] = {}  # open var_scope -> where its text starts
        self._fork_start = 0  # len(text) when this branch was forked
        self._stream = stream
        self._worker: Worker | None = None  # fork branches run their appends in order here
        self._runner: threading.Thread | None = None  # the thread of a run(stream=True)

    # ---- appending --------------------------------------------------------------------------
    def __iadd__(self, expr: Any) -> ProgramState:
        if expr is None:
            raise ValueError("s += None: append a str, gen(...), select(...), or a role block")
        self._submit(lambda: self._execute(expr))
        return self

    def _submit(self, fn: Callable[[], None]) -> None:
        if self._worker is not None:
            self._worker.submit(fn)
        else:
            fn()

    def _execute(self, expr: Any) -> None:
        if isinstance(expr, str):
            self._append(expr)
        elif isinstance(expr, Gen):
            self._run_gen(expr)
        elif isinstance(expr, Select):
            self._run_select(expr)
        elif isinstance(expr, Role):
            self._begin_role(expr.role)
            for part in expr.content:
                self._execute(part)
            self._end_role(expr.role)
        elif isinstance(expr, RoleBegin):
            self._begin_role(expr.role)
        elif isinstance(expr, RoleEnd):
            self._end_role(expr.role)
        elif isinstance(expr, VarScopeBegin):
            self._scopes[expr.name] = len(self._text)
        elif isinstance(expr, VarScopeEnd):
            if expr.name not in self._scopes:
                raise ProgramError(f"var_scope({expr.name!r}): closed but never opened")
            self._variables[expr.name] = self._text[self._scopes.pop(expr.name):]
        elif isinstance(expr, SeparateReasoning):
            self._execute(expr.expr)
            self._separate_reasoning(expr.expr)
        elif isinstance(expr, (list, tuple)):
            for part in expr:
                self._execute(part)
        else:
            raise TypeError(f"s += {type(expr).__name__}: append a str, gen(...), select(...), "
                            "or a role block")

    def _append(self, text: str, var: str | None = None, log: bool = True) -> None:
        self._text += text
        if log and self._stream is not None:
            self._stream.put(var, text)

    def _begin_role(self, role: str) -> None:
        if self._role is not None:
            raise ProgramError(f"{role}(): opened inside the {self._role[0]} turn; close it first")
        default_system = self.backend.chat_template.default_system_prompt
        if role != "system" and default_system and not self._messages:
            self._begin_role("system")
            self._append(default_system)
            self._end_role("system")
        self._append(self.backend.chat_template.begin(role))
        self._role = (role, len(self._text))

    def _end_role(self, role: str) -> None:
        if self._role is None or self._role[0] != role:
            open_role = f"the {self._role[0]} turn is open" if self._role else "no turn is open"
            raise ProgramError(f"{role}_end(): {open_role}")
        start = self._role[1]
        self._messages.append({"role": role, "content": self._text[start:].lstrip()})
        self._role = None
        self._append(self.backend.chat_template.end(role))

    def _separate_reasoning(self, expr: Any) -> None:
        """Move a leading ``<think>`` block out of each named gen/select in ``expr`` (and out
        of the text): ``name`` keeps the answer, ``name_reasoning_content`` the reasoning."""
        if isinstance(expr, (list, tuple, SeparateReasoning)):
            for part in (expr.expr,) if isinstance(expr, SeparateReasoning) else expr:
                self._separate_reasoning(part)
            return
        name = getattr(expr, "name", None)
        value = self._variables.get(name) if name is not None else None
        if not isinstance(value, str):
            return
        body = value.lstrip()
        body = body[len("<think>"):] if body.startswith("<think>") else body
        reasoning, sep, answer = body.partition("</think>")
        if not sep:
            return
        if self._text.endswith(value):
            self._text = self._text[: len(self._text) - len(value)] + answer.lstrip()
        self._variables[name] = answer.lstrip()
        self._variables[f"{name}_reasoning_content"] = reasoning.strip()

    # ---- roles and scopes as blocks -----------------------------------------------------------
    def _role_common(self, role: str, expr: Any = None):
        if expr is not None:
            self += Role(role, list(expr) if isinstance(expr, list) else [expr])
            return expr
        return self._role_block(role)

    @contextmanager
    def _role_block(self, role: str):
        self += RoleBegin(role)
        yield self
        self += RoleEnd(role)

    def system(self, expr: Any = None):
        """``s.system("...")`` appends a turn; ``with s.system(): s += ...`` is a block."""
        return self._role_common("system", expr)

    def user(self, expr: Any = None):
        return self._role_common("user", expr)

    def assistant(self, expr: Any = None):
        return self._role_common("assistant", expr)

    @contextmanager
    def var_scope(self, name: str):
        """``with s.var_scope("json"): s += ...``: the text appended inside becomes ``s["json"]``."""
        self += VarScopeBegin(name)
        yield self
        self += VarScopeEnd(name)

    # ---- gen / select -----------------------------------------------------------------------
    def _resolve(self, g: Gen) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run defaults under the call's own options (the call wins, as in SGLang)."""
        sampling = {k: v for k, v in self.defaults.items() if k not in REQUEST_KEYS}
        request = {k: v for k, v in self.defaults.items() if k in REQUEST_KEYS}
        return {**sampling, **g.sampling}, {**request, **g.request}

    def _prompt(self, kind: str, name: str | None, where: str | None) -> str | list[dict[str, str]]:
        """The text so far, or for a chat model the closed turns (the gen opens a reply)."""
        if not self.backend.is_chat_model:
            return self._text
        if self._role is None or self._role[0] != "assistant" or self._role[1] != len(self._text):
            raise ProgramError(f"{describe(kind, name, where)}: on a chat model a gen must open the "
                               "assistant turn (s += assistant(gen(...))); use a completion model "
                               "(is_chat_model=False) to generate anywhere", variable=name, where=where)
        return [dict(m) for m in self._messages]

    def _run_gen(self, g: Gen) -> None:
        params, request = self._resolve(g)
        prompt = self._prompt("gen", g.name, g.where)
        streamed = self._stream is not None and params.get("n", 1) == 1
        try:
            if streamed:
                out, meta = self._stream_gen(prompt, params, request, g.name)
            else:
                result = self.backend.generate(prompt, params, **request)
                if isinstance(result, list):  # n > 1: the variable is the list, the first is appended
                    out, meta = [r["text"] for r in result], [r["meta_info"] for r in result]
                else:
                    out, meta = result["text"], result["meta_info"]
        except Exception as e:
            raise _wrap("gen", g.name, g.where, e) from e
        self._append(out if isinstance(out, str) else out[0], g.name, log=not streamed)
        self._record(g.name, out, meta)
        if self._stream is not None and g.name is not None:
            self._stream.put(g.name, None)

    def _stream_gen(self, prompt, params, request, name) -> tuple[str, dict[str, Any]]:
        out, meta = "", {}
        for chunk in self.backend.generate_stream(prompt, params, **request):
            out += chunk["text"]
            meta = chunk["meta_info"]
            if name is not None:
                self._variables[name] = out
                self._var_meta[name] = meta
            if chunk["text"]:
                self._stream.put(name, chunk["text"])
        return out, meta

    def _run_select(self, sel: Select) -> None:
        try:
            res = score_choices(self.backend, self._text, sel.choices, sel.choices_method)
        except Exception as e:
            raise _wrap("select", sel.name, sel.where, e) from e
        choice = sel.choices[res.index]
        self._append(choice, sel.name)
        self._add_metas(res.metas)
        if sel.name is not None:
            self._variables[sel.name] = choice
            self._var_meta[sel.name] = res.meta_info()
            if self._stream is not None:
                self._stream.put(sel.name, None)

    def _record(self, name: str | None, value: Any, meta: dict[str, Any] | list[dict[str, Any]]) -> None:
        self._add_metas(meta if isinstance(meta, list) else [meta])
        if name is not None:
            self._variables[name] = value
            self._var_meta[name] = meta

    def _add_metas(self, metas: list[dict[str, Any]]) -> None:
        self._metas.extend(metas)
        for m in metas:
            self.backend.token_usage.add(m.get("prompt_tokens", 0), m.get("completion_tokens", 0))

    # ---- fork / join ------------------------------------------------------------------------
    def fork(self, size: int = 1, position_ids_offset: Any = None) -> ForkGroup:
        """``size`` copies that continue independently; the shared text is prefilled once first,
        so every branch's requests hit the cache for it. A branch can fork again."""
        del position_ids_offset  # SGLang's argument; positions always follow the text here
        self._sync()
        size = int(size)
        if size < 1:
            raise ValueError(f"fork: size must be >= 1, got {size}")
        if size > 1 and self._text:
            try:
                self._add_metas(self.backend.prefill([self._text]))
            except Exception as e:
                raise _wrap("fork", None, None, e) from e
        return ForkGroup(self, [self._branch() for _ in range(size)])

    def _branch(self) -> ProgramState:
        child = ProgramState(self.backend, self.defaults)
        child._text, child._role, child._fork_start = self._text, self._role, len(self._text)
        child._messages = [dict(m) for m in self._messages]
        child._variables = dict(self._variables)
        child._var_meta = dict(self._var_meta)
        child._scopes = dict(self._scopes)
        child._worker = Worker()
        return child

    @contextmanager
    def copy(self, position_ids_offset: Any = None):
        """``with s.copy() as c:`` one branch, joined (its variables gathered) on exit."""
        group = self.fork(1, position_ids_offset)
        try:
            yield group[0]
        finally:
            group.join()

    def _join(self, branches: list[ProgramState], mode: str) -> None:
        """ForkGroup.join: runs in order with this state's own appends."""
        if mode not in ("gather_variable", "concate_and_append"):
            raise ValueError(f"join: mode must be gather_variable or concate_and_append, got {mode!r}")
        for b in branches:
            b._sync()
        metas = [m for b in branches for m in b._metas]

        def gather() -> None:
            base = self._variables
            every = dict.fromkeys(k for b in branches for k in b._variables)  # in order, once
            names = [k for k in every if k not in base
                     or any(b._variables.get(k) is not base[k] for b in branches)]
            for name in names:
                self._variables[name] = [b._variables.get(name) for b in branches]
            self._metas.extend(metas)

        def concatenate() -> None:
            added = "".join(b._text[b._fork_start:] for b in branches)
            self._append(added)
            self._metas.extend(metas)
            if not added:
                return
            try:  # the joined text becomes this state's cached prefix
                self._add_metas(self.backend.prefill([self._text]))
            except Exception as e:
                raise _wrap("join", None, None, e) from e

        self._submit(gather if mode == "gather_variable" else concatenate)
        for b in branches:
            b._worker.close()

    # ---- reading ----------------------------------------------------------------------------
    def _wait(self) -> None:
        if self._worker is not None:
            self._worker.drain()
        runner = self._runner
        if runner is not None and runner is not threading.current_thread():
            runner.join()

    def _current_error(self) -> BaseException | None:
        return self._error or (self._worker.error if self._worker is not None else None)

    def _sync(self) -> None:
        self._wait()
        err = self._current_error()
        if err is not None:
            raise err

    def sync(self) -> None:
        """Wait for everything appended so far (SGLang's ``state.sync()``)."""
        self._wait()

    def error(self) -> BaseException | None:
        """The program's error once it has stopped, else None."""
        self._wait()
        return self._current_error()

    def __getitem__(self, name: str) -> Any:
        self._sync()
        try:
            return self._variables[name]
        except KeyError:
            raise VariableNotFoundError(
                f"variable {name!r} is not set by this program (set: {sorted(self._variables)})"
            ) from None

    get_var = __getitem__

    def __setitem__(self, name: str, value: Any) -> None:
        self.set_var(name, value)

    def set_var(self, name: str, value: Any) -> None:
        """``s["name"] = value``: in order with the appends before it."""
        self._submit(lambda: self._variables.__setitem__(name, value))

    def __contains__(self, name: str) -> bool:
        self._sync()
        return name in self._variables

    def text(self) -> str:
        self._sync()
        return self._text

    def messages(self) -> list[dict[str, str]]:
        """The closed chat turns, OpenAI style: ``[{"role", "content"}, ...]``."""
        self._sync()
        return [dict(m) for m in self._messages]

    def variables(self) -> dict[str, Any]:
        self._sync()
        return dict(self._variables)

    def get_meta_info(self, name: str) -> Any:
        """The request metadata of the call that set ``name`` (None if it made none)."""
        self._sync()
        return self._var_meta.get(name)

    def text_iter(self, var_name: str | None = None) -> Iterator[str]:
        """A streaming run: text deltas as they come (of one variable with ``var_name``); the
        program's error, if any, is raised after the last delta. Otherwise: the whole text
        (or the variable) once."""
        if self._stream is None:
            yield self.text() if var_name is None else self[var_name]
            return
        yield from (self._stream.iter_text() if var_name is None else self._stream.iter_var(var_name))
        if var_name is None or self._stream.closed:
            self._sync()

    async def text_async_iter(self, var_name: str | None = None,
                              return_meta_data: bool = False) -> AsyncIterator[Any]:
        """``text_iter`` for asyncio; ``return_meta_data`` yields ``(delta, meta_info)``."""
        loop = asyncio.get_running_loop()
        deltas, done = self.text_iter(var_name), object()
        while (delta := await loop.run_in_executor(None, next, deltas, done)) is not done:
            yield (delta, self._var_meta.get(var_name)) if return_meta_data and var_name else delta

    @property
    def meta(self) -> dict[str, Any]:
        """The program's requests: tokens, cached prompt tokens, and its cache hit rate."""
        self._sync()
        prompt = sum(m.get("prompt_tokens", 0) for m in self._metas)
        cached = sum(m.get("cached_tokens", 0) for m in self._metas)
        return {
            "num_requests": len(self._metas),
            "prompt_tokens": prompt,
            "cached_tokens": cached,
            "completion_tokens": sum(m.get("completion_tokens", 0) for m in self._metas),
            "cache_hit_rate": cached / prompt if prompt else 0.0,
        }

    def __repr__(self) -> str:
        return f"ProgramState(text={self._text[-60:]!r}, variables={sorted(self._variables)})"


def _wrap(kind: str, name: str | None, where: str | None, e: Exception) -> ProgramError:
    if isinstance(e, ProgramError):
        return e
    return ProgramError(f"{describe(kind, name, where)}: {e}", variable=name, where=where, cause=e)
