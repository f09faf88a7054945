"""``@function`` programs and how they run: ``run``, ``run_batch``, ``run(stream=True)``."""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from frontend_dsl.backends.base import Backend
from frontend_dsl.state import ProgramState
from frontend_dsl.tracer import constant_prefix

_default_backend: Backend | None = None
_SAMPLING_DEFAULTS = ("max_new_tokens", "temperature", "top_p", "top_k", "min_p",
                      "frequency_penalty", "presence_penalty", "stop", "ignore_eos", "seed")


def set_default_backend(backend: Backend | None) -> None:
    """The backend ``run``/``run_batch`` use when not given one."""
    global _default_backend
    _default_backend = backend


def get_default_backend() -> Backend | None:
    return _default_backend


def function(func: Callable[..., Any] | None = None):
    """``@function def prog(s, question): s += ...``; also ``@function()``."""
    if func is None:
        return function
    return SglFunction(func)


class SglFunction:
    def __init__(self, func: Callable[..., Any]):
        self.func = func
        functools.update_wrapper(self, func)

    def __call__(self, s, *args: Any, **kwargs: Any):
        """Called inside another program: runs inline on that program's state."""
        if not isinstance(s, ProgramState):
            raise TypeError(f"{self.func.__name__}: call .run(...) to run a program; a direct "
                            "call takes the calling program's state first")
        return self.func(s, *args, **kwargs)

    def run(self, *args: Any, backend: Backend | None = None, stream: bool = False,
            max_new_tokens: int | None = None, temperature: float | None = None,
            **kwargs: Any) -> ProgramState | StreamingRun:
        """Run once; ``stream=True`` returns at once with a state whose ``text_iter()``
        yields text as it is generated. Errors raise ``ProgramError``."""
        backend = _resolve(backend)
        defaults, kwargs = _split_defaults(kwargs, max_new_tokens=max_new_tokens, temperature=temperature)
        if stream:
            return StreamingRun(self.func, backend, defaults, args, kwargs)
        state = ProgramState(backend, defaults)
        self.func(state, *args, **kwargs)
        state._sync()
        return state

    def run_batch(self, batch_kwargs: list[dict[str, Any]], backend: Backend | None = None,
                  num_threads: int | str = "auto", max_new_tokens: int | None = None,
                  temperature: float | None = None, cache_prefix: bool = True,
                  **sampling: Any) -> list[ProgramState]:
        """Run once per kwargs dict, concurrently; a failed program's state carries ``error``
        (reading it re-raises) and does not stop the others."""
        backend = _resolve(backend)
        defaults, rest = _split_defaults(sampling, max_new_tokens=max_new_tokens, temperature=temperature)
        if rest:
            raise TypeError(f"run_batch: unknown keyword {sorted(rest)[0]!r}")
        if cache_prefix and len(batch_kwargs) > 1:
            self._cache_constant_prefix(backend)
        if num_threads == "auto":
            num_threads = max(1, min(len(batch_kwargs), 64))

        def run_one(kwargs: dict[str, Any]) -> ProgramState:
            state = ProgramState(backend, defaults)
            try:
                self.func(state, **kwargs)
                state._sync()
            except Exception as e:
                state.error = e
            return state

        if num_threads == 1:
            return [run_one(kw) for kw in batch_kwargs]
        with ThreadPoolExecutor(num_threads, thread_name_prefix="dsl-batch") as pool:
            return list(pool.map(run_one, batch_kwargs))

    def constant_prefix(self, backend: Backend | None = None) -> str:
        return constant_prefix(self.func, _resolve(backend).chat_template)

    def _cache_constant_prefix(self, backend: Backend) -> None:
        prefix = constant_prefix(self.func, backend.chat_template)
        if prefix:
            try:
                backend.prefill([prefix])
            except Exception:  # an optimization only: the programs report real errors
                pass


class StreamingRun:
    """A program running in a background thread; ``text_iter()`` yields its text."""

    def __init__(self, func, backend: Backend, defaults: dict[str, Any], args, kwargs):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.state = ProgramState(backend, defaults, sink=self._queue.put)
        self._thread = threading.Thread(target=self._run, args=(func, args, kwargs), daemon=True,
                                        name="dsl-stream")
        self._thread.start()

    def _run(self, func, args, kwargs) -> None:
        try:
            func(self.state, *args, **kwargs)
            self.state._sync()
        except Exception as e:
            self.state.error = e
        finally:
            self._queue.put(None)

    def text_iter(self) -> Iterator[str]:
        """Text deltas in order (constant text and generated tokens); raises the program's
        error, if any, after the last delta."""
        yield from iter(self._queue.get, None)
        self._thread.join()
        if self.state.error is not None:
            raise self.state.error

    __iter__ = text_iter

    def wait(self) -> ProgramState:
        self._thread.join()
        self.state._sync()
        return self.state

    def __getitem__(self, name: str) -> Any:
        return self.wait()[name]

    def text(self) -> str:
        return self.wait().text()

    @property
    def meta(self) -> dict[str, Any]:
        return self.wait().meta


def _resolve(backend: Backend | None) -> Backend:
    backend = backend or _default_backend
    if backend is None:
        raise RuntimeError("no backend: call set_default_backend(EngineBackend()) or pass backend=")
    return backend


def _split_defaults(kwargs: dict[str, Any], **named: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate sampling defaults (``temperature=0`` for every gen) from program arguments."""
    defaults = {k: v for k, v in named.items() if v is not None}
    rest = {}
    for k, v in kwargs.items():
        if k in _SAMPLING_DEFAULTS and k not in named:
            defaults[k] = v
        else:
            rest[k] = v
    return defaults, rest
