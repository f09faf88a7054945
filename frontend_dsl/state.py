"""A running program's state: its text, chat messages, variables, and request metadata.

``s += expr`` executes ``expr`` against the backend. The state of a ``run`` executes in the
caller's thread; each fork gets a worker thread, so ``forks[i] += gen(...)`` returns at once
and the branches' requests batch together in the engine. Reads (``s["x"]``, ``text()``) wait
for the state's pending work and re-raise its error.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from frontend_dsl.backends.base import Backend
from frontend_dsl.errors import ProgramError, VariableNotFoundError, describe
from frontend_dsl.ir import Gen, Role, Select
from frontend_dsl.scoring import score_choices

_DONE = object()


class ProgramState:
    def __init__(self, backend: Backend, defaults: dict[str, Any] | None = None,
                 sink: Callable[[str], None] | None = None):
        self.backend = backend
        self.defaults = dict(defaults or {})
        self.error: BaseException | None = None
        self._text = ""
        self._messages: list[dict[str, str]] = []
        self._variables: dict[str, Any] = {}
        self._var_meta: dict[str, dict[str, Any]] = {}
        self._metas: list[dict[str, Any]] = []
        self._role: tuple[str, int] | None = None  # open role and where its content starts
        self._sink = sink
        self._worker: _Worker | None = None

    # ---- appending --------------------------------------------------------------------------
    def __iadd__(self, expr: Any) -> ProgramState:
        if self._worker is not None:
            self._worker.submit(lambda: self._execute(expr))
        else:
            self._execute(expr)
        return self

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
            self._end_role()
        elif isinstance(expr, lambda_expr):
            expr.fn()
        elif isinstance(expr, (list, tuple)):
            for part in expr:
                self._execute(part)
        else:
            raise TypeError(f"s += {type(expr).__name__}: append a str, gen(...), select(...), "
                            "or a role block")

    def _append(self, text: str, stream: bool = True) -> None:
        self._text += text
        if stream and self._sink is not None:
            self._sink(text)

    def _begin_role(self, role: str) -> None:
        if self._role is not None:
            raise ProgramError(f"{role}(): opened inside the {self._role[0]} turn; close it first")
        self._append(self.backend.chat_template.begin(role))
        self._role = (role, len(self._text))

    def _end_role(self) -> None:
        role, start = self._role
        self._messages.append({"role": role, "content": self._text[start:]})
        self._role = None
        self._append(self.backend.chat_template.end(role))

    @contextmanager
    def _role_block(self, role: str):
        self += lambda_expr(lambda: self._begin_role(role))
        yield self
        self += lambda_expr(self._end_role)

    def system(self):
        """``with s.system(): s += ...`` (or ``s += system(...)``)."""
        return self._role_block("system")

    def user(self):
        return self._role_block("user")

    def assistant(self):
        return self._role_block("assistant")

    # ---- gen / select -----------------------------------------------------------------------
    def _run_gen(self, g: Gen) -> None:
        params = {**self.defaults, **g.sampling}
        try:
            if self._sink is not None:
                out, meta = "", {}
                for chunk in self.backend.generate_stream(self._text, params):
                    out += chunk["text"]
                    meta = chunk["meta_info"]
                    if chunk["text"]:
                        self._sink(chunk["text"])
            else:
                result = self.backend.generate(self._text, params)
                out, meta = result["text"], result["meta_info"]
        except Exception as e:
            raise _wrap("gen", g.name, g.where, e) from e
        self._append(out, stream=False)
        self._record(g.name, out, meta)

    def _run_select(self, sel: Select) -> None:
        try:
            res = score_choices(self.backend, self._text, sel.choices, sel.choices_method)
        except Exception as e:
            raise _wrap("select", sel.name, sel.where, e) from e
        choice = sel.choices[res.index]
        self._append(choice)
        self._metas.extend(res.metas)
        if sel.name is not None:
            self._variables[sel.name] = choice
            self._var_meta[sel.name] = res.meta_info()

    def _record(self, name: str | None, value: Any, meta: dict[str, Any]) -> None:
        self._metas.append(meta)
        if name is not None:
            self._variables[name] = value
            self._var_meta[name] = meta

    # ---- fork / join ------------------------------------------------------------------------
    def fork(self, n: int = 1) -> ForkGroup:
        """``n`` copies that continue independently; the shared text is prefilled once first,
        so every branch's requests hit the cache for it."""
        self._sync()
        if n < 1:
            raise ValueError(f"fork: n must be >= 1, got {n}")
        if n > 1 and self._text:
            try:
                self._metas.extend(self.backend.prefill([self._text]))
            except Exception as e:
                raise _wrap("fork", None, None, e) from e
        forks = []
        for _ in range(n):
            child = ProgramState(self.backend, self.defaults)
            child._text, child._role = self._text, self._role
            child._messages = [dict(m) for m in self._messages]
            child._variables = dict(self._variables)
            child._var_meta = dict(self._var_meta)
            child._worker = _Worker()
            forks.append(child)
        return ForkGroup(self, forks)

    # ---- reading ----------------------------------------------------------------------------
    def _sync(self) -> None:
        if self._worker is not None:
            self._worker.wait()
        if self.error is not None:
            raise self.error

    def __getitem__(self, name: str) -> Any:
        self._sync()
        try:
            return self._variables[name]
        except KeyError:
            raise VariableNotFoundError(
                f"variable {name!r} is not set by this program (set: {sorted(self._variables)})"
            ) from None

    def __contains__(self, name: str) -> bool:
        self._sync()
        return name in self._variables

    def set_var(self, name: str, value: Any) -> None:
        self._sync()
        self._variables[name] = value

    def text(self) -> str:
        self._sync()
        return self._text

    def messages(self) -> list[dict[str, str]]:
        self._sync()
        return [dict(m) for m in self._messages]

    def variables(self) -> dict[str, Any]:
        self._sync()
        return dict(self._variables)

    def get_meta_info(self, name: str) -> dict[str, Any]:
        self._sync()
        if name not in self._var_meta:
            raise VariableNotFoundError(f"variable {name!r} has no request metadata")
        return self._var_meta[name]

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


class ForkGroup:
    """The branches of ``s.fork(n)``: indexable, ``forks += expr`` appends to each."""

    def __init__(self, parent: ProgramState, forks: list[ProgramState]):
        self.parent = parent
        self.forks = forks

    def __getitem__(self, i: int) -> ProgramState:
        return self.forks[i]

    def __setitem__(self, i: int, state: ProgramState) -> None:
        # ``forks[i] += expr`` stores the branch back after appending to it in place.
        if state is not self.forks[i]:
            raise TypeError("fork: a branch can only be appended to, not replaced")

    def __len__(self) -> int:
        return len(self.forks)

    def __iter__(self) -> Iterator[ProgramState]:
        return iter(self.forks)

    def __iadd__(self, expr: Any) -> ForkGroup:
        for f in self.forks:
            f += expr
        return self

    def join(self, mode: str = "gather_variable") -> None:
        """Wait for every branch; its new variables become lists in the parent
        (``gather_variable``), or its new text is appended to the parent
        (``concate_and_append``). Request metadata always joins the parent's."""
        for f in self.forks:
            f._sync()
        parent = self.parent
        base = parent._variables
        if mode == "gather_variable":
            names = [k for k in self.forks[0]._variables if k not in base or
                     any(f._variables.get(k) is not base[k] for f in self.forks)]
            for name in names:
                parent._variables[name] = [f._variables.get(name) for f in self.forks]
        elif mode == "concate_and_append":
            for f in self.forks:
                parent._append(f._text[len(parent._text):] if f._text.startswith(parent._text) else f._text)
        else:
            raise ValueError(f"join: mode must be gather_variable or concate_and_append, got {mode!r}")
        for f in self.forks:
            parent._metas.extend(f._metas)
            f._worker.close()


class _Worker:
    """One thread running a fork's appends in order; the first error stops the rest."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def submit(self, fn: Callable[[], None]) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True, name="dsl-fork")
            self._thread.start()
        self._queue.put(fn)

    def _loop(self) -> None:
        while True:
            fn = self._queue.get()
            try:
                if fn is _DONE:
                    return
                if self.error is None:
                    fn()
            except BaseException as e:  # surfaces at the next read of the state
                self.error = e
            finally:
                self._queue.task_done()

    def wait(self) -> None:
        self._queue.join()
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(_DONE)


class lambda_expr:  # noqa: N801 - reads as a function at the call site
    """An append that runs a state method in order (role blocks opened with ``with``)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], None]):
        self.fn = fn


def _wrap(kind: str, name: str | None, where: str | None, e: Exception) -> ProgramError:
    if isinstance(e, ProgramError):
        return e
    return ProgramError(f"{describe(kind, name, where)}: {e}", variable=name, where=where, cause=e)
