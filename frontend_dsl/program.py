"""``@function`` programs and how they run: ``run``, ``run_batch``, ``run(stream=True)``, or
calling the program directly (``prog(question=..., temperature=0)`` is ``prog.run(...)``)."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from frontend_dsl.backends.base import Backend
from frontend_dsl.global_config import global_config
from frontend_dsl.ir import REQUEST_KEYS
from frontend_dsl.state import ProgramState
from frontend_dsl.streaming import StreamLog
from frontend_dsl.tracer import TraceState, constant_prefix

# run()/run_batch() keywords that become every gen's default (SGLang's names and a few more).
SAMPLING_DEFAULTS = ("max_new_tokens", "min_new_tokens", "stop", "stop_token_ids", "temperature",
                     "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
                     "repetition_penalty", "ignore_eos", "seed", *REQUEST_KEYS)


def set_default_backend(backend: Any) -> None:
    """The backend ``run``/``run_batch`` use when not given one (``global_config.default_backend``)."""
    global_config.default_backend = backend


def get_default_backend() -> Backend | None:
    return global_config.default_backend


def flush_cache(backend: Any = None) -> bool:
    """SGLang's ``sgl.flush_cache()``: empty the backend's prefix cache."""
    backend = backend or global_config.default_backend
    if backend is None:
        return False
    _resolve(backend).flush_cache()
    return True


def get_server_info(backend: Any = None) -> dict[str, Any] | None:
    backend = backend or global_config.default_backend
    return None if backend is None else _resolve(backend).get_server_info()


def function(func: Callable[..., Any] | None = None, num_api_spec_tokens: int | None = None):
    """``@function def prog(s, question): s += ...``; also ``@function()`` and
    ``@function(num_api_spec_tokens=N)``.

    ``num_api_spec_tokens`` is SGLang's API speculative execution (one remote chat call for
    several gens of a turn). It is accepted and recorded; every backend here runs the program
    call by call, which gives the same variables.
    """
    if func is not None:
        return SglFunction(func, num_api_spec_tokens=num_api_spec_tokens)
    return functools.partial(SglFunction, num_api_spec_tokens=num_api_spec_tokens)


class SglFunction:
    def __init__(self, func: Callable[..., Any], num_api_spec_tokens: int | None = None,
                 bind_arguments: dict[str, Any] | None = None):
        self.func = func
        self.num_api_spec_tokens = num_api_spec_tokens
        self.bind_arguments = dict(bind_arguments or {})
        params = list(inspect.signature(func).parameters.values())
        if not params:
            raise TypeError(f"@function {func.__name__}: the first parameter must be the state (s)")
        self.arg_names = [p.name for p in params[1:]]
        functools.update_wrapper(self, func)

    def bind(self, **kwargs: Any) -> SglFunction:
        """A copy with some arguments fixed (SGLang's ``prog.bind(...)``)."""
        unknown = sorted(set(kwargs) - set(self.arg_names))
        if unknown:
            raise TypeError(f"{self.func.__name__}.bind: no argument {unknown[0]!r}")
        return SglFunction(self.func, self.num_api_spec_tokens, {**self.bind_arguments, **kwargs})

    def __call__(self, *args: Any, **kwargs: Any):
        """Inside another program (``prog(s, ...)``) it runs inline on that state; otherwise
        it is ``run(...)``, as in SGLang."""
        if args and isinstance(args[0], (ProgramState, TraceState)):
            return self.func(*args, **{**self.bind_arguments, **kwargs})
        return self.run(*args, **kwargs)

    def run(self, *args: Any, backend: Any = None, stream: bool = False, use_thread: bool = True,
            **kwargs: Any) -> ProgramState:
        """Run once. Sampling keywords (``temperature``, ``max_new_tokens``, ``top_p``, ...)
        are every gen's defaults. Errors raise ``ProgramError``; ``stream=True`` returns at once
        with a state whose ``text_iter()`` yields text as it is generated."""
        del use_thread  # SGLang's executor switch; a run here is one thread anyway
        backend = _resolve(backend)
        defaults, kwargs = split_defaults(kwargs)
        kwargs = {**self.bind_arguments, **kwargs}
        if stream:
            return _start_streaming(self.func, ProgramState(backend, defaults, StreamLog()), args, kwargs)
        state = ProgramState(backend, defaults)
        state.ret_value = self.func(state, *args, **kwargs)
        state._sync()
        if global_config.verbosity >= 2:
            print(state.text())
        return state

    def run_batch(self, batch_kwargs: list[dict[str, Any]] | list[list[Any]], *, backend: Any = None,
                  num_threads: int | str = "auto", progress_bar: bool = False,
                  generator_style: bool = False, cache_prefix: bool | None = None,
                  **sampling: Any) -> list[ProgramState] | Iterator[ProgramState]:
        """Run once per item (a kwargs dict, or a list of positional arguments), concurrently,
        results in order; a failed program's state carries its ``error()`` (reading it
        re-raises) and does not stop the others. ``progress_bar`` shows a tqdm bar."""
        backend = _resolve(backend)
        defaults, rest = split_defaults(sampling)
        if rest:
            raise TypeError(f"run_batch: unknown keyword {sorted(rest)[0]!r}")
        items = [self._as_kwargs(b) for b in batch_kwargs]
        if cache_prefix is None:
            cache_prefix = global_config.enable_precache_with_tracing
        if cache_prefix and len(items) > 1:
            self._cache_constant_prefix(backend)
        if num_threads == "auto":
            num_threads = 64
        num_threads = max(1, min(int(num_threads), len(items) or 1))
        results = self._run_all(items, backend, defaults, num_threads, progress_bar)
        return results if generator_style else list(results)

    def _run_all(self, items, backend, defaults, num_threads, progress_bar) -> Iterator[ProgramState]:
        bar = _progress_bar(len(items)) if progress_bar else None

        def run_one(kwargs: dict[str, Any]) -> ProgramState:
            state = ProgramState(backend, defaults)
            try:
                state.ret_value = self.func(state, **{**self.bind_arguments, **kwargs})
                state._sync()
            except Exception as e:
                state._error = e
            if bar is not None:
                bar.update()
            return state

        try:
            if num_threads == 1:
                yield from map(run_one, items)
                return
            with ThreadPoolExecutor(num_threads, thread_name_prefix="dsl-batch") as pool:
                yield from pool.map(run_one, items)
        finally:
            if bar is not None:
                bar.close()

    def _as_kwargs(self, item: dict[str, Any] | list[Any] | tuple) -> dict[str, Any]:
        if isinstance(item, dict):
            return item
        if not isinstance(item, (list, tuple)) or len(item) > len(self.arg_names):
            raise TypeError(f"run_batch: {item!r} does not match {self.func.__name__}'s arguments "
                            f"{self.arg_names}")
        return dict(zip(self.arg_names, item))

    def cache(self, backend: Any = None) -> None:
        """Prefill the program's constant prefix (SGLang's ``prog.cache()``)."""
        self._cache_constant_prefix(_resolve(backend))

    def trace(self, *args: Any, **kwargs: Any):
        raise NotImplementedError(f"{self.func.__name__}.trace(): SGLang's graph tracer is not "
                                  "supported; run() and run_batch() run the program")

    compile = trace

    def constant_prefix(self, backend: Any = None) -> str:
        return constant_prefix(self.func, _resolve(backend).chat_template)

    def _cache_constant_prefix(self, backend: Backend) -> None:
        prefix = constant_prefix(self.func, backend.chat_template)
        if prefix:
            try:
                backend.prefill([prefix])
            except Exception:  # an optimization only: the programs report real errors
                pass


def _start_streaming(func, state: ProgramState, args, kwargs) -> ProgramState:
    def body() -> None:
        try:
            state.ret_value = func(state, *args, **kwargs)
            state._sync()
        except Exception as e:
            state._error = e
        finally:
            state._stream.close()

    state._runner = threading.Thread(target=body, daemon=True, name="dsl-stream")
    state._runner.start()
    return state


def _progress_bar(total: int):
    from tqdm import tqdm

    return tqdm(total=total, desc="programs", unit="prog")


def _resolve(backend: Any) -> Backend:
    backend = backend or global_config.default_backend
    if backend is None:
        raise RuntimeError("no backend: call set_default_backend(EngineBackend()) or pass backend=")
    return getattr(backend, "endpoint", backend)  # a Runtime serves through its endpoint


def split_defaults(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate sampling defaults (``temperature=0`` for every gen) from program arguments."""
    defaults = {k: v for k, v in kwargs.items() if k in SAMPLING_DEFAULTS and v is not None}
    rest = {k: v for k, v in kwargs.items() if k not in SAMPLING_DEFAULTS}
    return defaults, rest
