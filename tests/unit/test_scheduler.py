"""Scheduler admission, chunking and retraction, on a tiny random-weight model (real code
paths, milliseconds per step)."""

from __future__ import annotations

import random
import threading

import pytest

from sglang_lite import Engine
from tests.conftest import assert_no_leak


def _engine(model_dir, **opts) -> Engine:
    return Engine("dummy:tiny", tokenizer=str(model_dir), **opts)


def _ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(100, 40000) for _ in range(n)]


@pytest.fixture
def batches():
    return []


def test_token_budget_chunking_and_decode_never_stalls(model_dir, batches):
    eng = _engine(model_dir, max_prefill_tokens=40, chunked_prefill_size=32, disable_radix_cache=True)
    try:
        eng.scheduler.on_batch = lambda b: batches.append(
            [(r.rid, n, r.kv_len, len(r.origin_input_ids)) for r, n in zip(b.reqs, b.extend_lens)])
        short = eng.generate(input_ids=_ids(8, 0), sampling_params={"max_new_tokens": 30, "ignore_eos": True},
                             stream=True)
        next(short)  # the short request is decoding before the long one arrives
        long_out = eng.generate(input_ids=_ids(200, 1), sampling_params={"max_new_tokens": 2, "ignore_eos": True})
        rest = list(short)
        assert rest[-1]["finished"]
        assert long_out["meta_info"]["completion_tokens"] == 2
        for step in batches:
            assert sum(n for _, n, _, _ in step) <= 40
            assert all(n <= 32 for _, n, _, _ in step)
        long_steps = [s for s in batches if any(p == 200 and kv < 200 and n > 1 for _, n, kv, p in s)]
        assert len(long_steps) >= 200 // 32  # the long prompt really was chunked
        # Every chunk step still advanced the short request by one decode token.
        assert all(any(p == 8 and n == 1 for _, n, _, p in s) for s in long_steps[:-1])
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def test_max_running_requests_bounds_the_batch(model_dir, batches):
    eng = _engine(model_dir, max_running_requests=3, disable_radix_cache=True)
    try:
        eng.scheduler.on_batch = lambda b: batches.append(len(b.reqs))
        outs = eng.generate(input_ids=[_ids(10, i) for i in range(7)],
                            sampling_params={"max_new_tokens": 5, "ignore_eos": True})
        assert all(o["meta_info"]["completion_tokens"] == 5 for o in outs)
        assert max(batches) == 3
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def test_retraction_takes_the_youngest_and_outputs_match(model_dir):
    prompts = [_ids(20, i) for i in range(6)]
    params = {"max_new_tokens": 60, "ignore_eos": True, "temperature": 0}
    big = _engine(model_dir, disable_radix_cache=True)
    try:
        reference = [o["output_ids"] for o in big.generate(input_ids=prompts, sampling_params=params)]
    finally:
        big.shutdown()
    tiny = _engine(model_dir, max_total_tokens=16 * 16, disable_radix_cache=True)
    try:
        outs = tiny.generate(input_ids=prompts, sampling_params=params)
        retractions = [o["meta_info"]["num_retractions"] for o in outs]
        assert sum(retractions) > 0
        assert retractions[0] == 0  # the oldest request is never the victim
        assert [o["output_ids"] for o in outs] == reference
        assert_no_leak(tiny)
    finally:
        tiny.shutdown()


def test_abort_frees_a_waiting_and_a_running_request(model_dir):
    eng = _engine(model_dir, max_running_requests=1, disable_radix_cache=True)
    try:
        running = eng.generate(input_ids=_ids(10, 0), sampling_params={"max_new_tokens": 400, "ignore_eos": True},
                               stream=True)
        next(running)
        waiting = eng.generate(input_ids=_ids(10, 1), sampling_params={"max_new_tokens": 400}, stream=True)
        running.close()
        waiting.close()  # never iterated: still aborted
        del waiting
        assert_no_leak(eng)
        assert eng.get_stats()["num_aborted"] == 2
    finally:
        eng.shutdown()


def test_queue_bound_rejects_with_a_clear_error(model_dir):
    from sglang_lite import QueueFullError

    eng = _engine(model_dir, max_running_requests=1, max_queue_size=1, disable_radix_cache=True)
    try:
        streams = [eng.generate(input_ids=_ids(10, i), sampling_params={"max_new_tokens": 200, "ignore_eos": True},
                                stream=True) for i in range(2)]
    except QueueFullError:
        pytest.fail("two requests fit: one running, one waiting")
    try:
        with pytest.raises(QueueFullError, match="queue"):
            eng.generate(input_ids=_ids(10, 9), sampling_params={"max_new_tokens": 2})
        next(streams[0])
    finally:
        for s in streams:
            s.close()
        eng.shutdown()


def _generate_within(eng: Engine, timeout: float, **kwargs):
    """generate() on a thread: a request that never ends fails the test instead of hanging it."""
    box: list = []
    thread = threading.Thread(target=lambda: box.append(eng.generate(**kwargs)), daemon=True)
    thread.start()
    thread.join(timeout)
    assert box, f"a request did not end within {timeout} s"
    return box[0]


def _inject_failure(eng: Engine, where: str, victim: list[int]) -> None:
    """Make retiring the request whose prompt is ``victim`` raise, at ``where``."""
    def is_victim(ids: list[int]) -> bool:
        return ids[: len(victim)] == victim

    def fail_for(real, ids_of):
        def wrapper(*args):
            if is_victim(ids_of(*args)):
                raise RuntimeError("injected failure")
            return real(*args)
        return wrapper

    if where == "release":
        eng.cache.release = fail_for(eng.cache.release, lambda req: req.origin_input_ids)
    elif where == "radix_insert":  # the finished request's tokens, not its prompt's first chunk
        eng.cache.radix.insert = fail_for(
            eng.cache.radix.insert, lambda tokens, slots: tokens if len(tokens) > len(victim) else [])
    else:
        eng.scheduler.outputs.finish = fail_for(eng.scheduler.outputs.finish, lambda req: req.origin_input_ids)


@pytest.mark.parametrize("where", ["release", "radix_insert", "finish"])
def test_a_failure_retiring_a_request_ends_it_with_an_error(model_dir, where):
    eng = _engine(model_dir)
    victim, bystander = _ids(40, 0), _ids(40, 1)
    params = {"max_new_tokens": 30, "ignore_eos": True, "temperature": 0}
    try:
        reference = eng.generate(input_ids=bystander, sampling_params=params)["output_ids"]
        assert eng.flush_cache()
        _inject_failure(eng, where, victim)
        failed, ok = _generate_within(eng, 20, input_ids=[victim, bystander], sampling_params=params)
        assert failed["meta_info"]["finish_reason"] == {
            "type": "abort", "message": "engine error: RuntimeError: injected failure"}
        # Only the request that failed ends: the one retired in the same step is untouched.
        assert ok["meta_info"]["finish_reason"] == {"type": "length", "length": 30}
        assert ok["output_ids"] == reference
        for obj, name in ((eng.cache, "release"), (eng.cache.radix, "insert"), (eng.scheduler.outputs, "finish")):
            vars(obj).pop(name, None)  # the real methods again
        assert_no_leak(eng)
        again = _generate_within(eng, 20, input_ids=victim, sampling_params=params)
        assert again["meta_info"]["finish_reason"]["type"] == "length"
    finally:
        eng.shutdown()


@pytest.mark.parametrize("policy,first", [("lpm", "cached"), ("fcfs", "fresh")])
def test_schedule_policy_orders_admission(model_dir, policy, first):
    # One running slot, busy: "fresh" (nothing cached) queues first, then "cached" (a prompt
    # whose 64-token prefix is in the tree). LPM admits the cached one first, FCFS the fresh one.
    eng = _engine(model_dir, max_running_requests=1, schedule_policy=policy)
    shared = _ids(64, 5)
    try:
        eng.generate(input_ids=shared + _ids(4, 6), sampling_params={"max_new_tokens": 1})
        admitted: list[str] = []
        eng.scheduler.on_batch = lambda b: admitted.extend(
            r.rid for r, n in zip(b.reqs, b.extend_lens) if n > 1 and r.rid not in admitted)
        params = {"max_new_tokens": 4, "ignore_eos": True}
        blocker = eng.generate(input_ids=_ids(8, 7), sampling_params={"max_new_tokens": 40, "ignore_eos": True},
                               stream=True, rid="blocker")
        next(blocker)  # running: the next two wait together
        fresh = eng.generate(input_ids=_ids(80, 8), sampling_params=params, stream=True, rid="fresh")
        cached = eng.generate(input_ids=shared + _ids(16, 9), sampling_params=params, stream=True, rid="cached")
        outs = [list(s)[-1] for s in (blocker, fresh, cached)]
        assert all(o["finished"] for o in outs)
        assert outs[2]["meta_info"]["cached_tokens"] == 64
        assert admitted == ["blocker", first, "cached" if first == "fresh" else "fresh"]
        assert_no_leak(eng)
    finally:
        eng.shutdown()


def test_the_scheduler_thread_loads_the_model_and_runs_every_step(model_dir, monkeypatch):
    """torch's parallel CPU work stays on one thread (engine.py: GNU OpenMP keeps a team for
    every thread that ran a parallel region, and a second team makes every step pay wake-ups):
    the model is loaded where the steps run, never on the caller's thread."""
    import sglang_lite.engine as engine_module

    threads = {"load": set(), "step": set()}
    load_model = engine_module.load_model

    def recording_load(*args, **kwargs):
        threads["load"].add(threading.current_thread())
        return load_model(*args, **kwargs)

    monkeypatch.setattr(engine_module, "load_model", recording_load)
    eng = _engine(model_dir)
    try:
        run_model = eng.scheduler.runner.run_model

        def recording_run(fb):
            threads["step"].add(threading.current_thread())
            return run_model(fb)

        eng.scheduler.runner.run_model = recording_run
        eng.generate("Hello", {"max_new_tokens": 4, "ignore_eos": True})
        assert threads["load"] == threads["step"] == {eng._thread}
        assert eng._thread is not threading.current_thread()
    finally:
        eng.shutdown()


def test_a_failure_while_building_raises_on_the_callers_thread_and_leaves_no_thread():
    before = set(threading.enumerate())
    with pytest.raises(ValueError, match="unknown dummy preset"):
        Engine("dummy:nope")  # resolving the model
    with pytest.raises(ValueError, match="kv_cache_memory: too small"):
        Engine("dummy:tiny", kv_cache_memory="1KiB")  # building the KV pool
    assert not any(t.name == "sglang-lite-scheduler" for t in set(threading.enumerate()) - before)
