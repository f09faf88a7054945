"""The same programs over HTTP: RuntimeEndpoint against a live ``sglang-lite serve``."""

from __future__ import annotations

import httpx
import pytest

from frontend_dsl import (
    ProgramError,
    Runtime,
    RuntimeEndpoint,
    assistant,
    function,
    gen,
    select,
    system,
    user,
)

PREFIX = ("You are a sentiment classifier. Read the review and answer with one word: positive "
          "or negative. Reviews that praise the product are positive; complaints are negative.\n")


@pytest.fixture(scope="module")
def runtime():
    """SGLang's ``sgl.Runtime``: a ``sglang-lite serve`` subprocess on a free loopback port."""
    rt = Runtime(log_level="warning", dtype="float32", timeout=180)
    yield rt
    rt.shutdown()


@pytest.fixture(scope="module")
def server_url(runtime):
    return runtime.url


@pytest.fixture(scope="module")
def backend(server_url):
    b = RuntimeEndpoint(server_url)
    yield b
    b.shutdown()


def test_runtime_is_a_backend(runtime):
    import frontend_dsl as sgl

    @sgl.function
    def prog(s):
        s += "The capital of France is" + sgl.gen("x", max_tokens=3)

    sgl.set_default_backend(runtime)
    try:
        state = prog(temperature=0)
    finally:
        sgl.set_default_backend(None)
    direct = runtime.generate("The capital of France is", {"max_new_tokens": 3, "temperature": 0})
    assert state["x"] == direct["text"]
    assert runtime.endpoint.token_usage.completion_tokens == state.meta["completion_tokens"] > 0


def test_uses_the_servers_chat_template(backend):
    assert backend.chat_template.begin("user") == "<|im_start|>user\n"


def test_tokenizes_through_the_server_without_a_local_tokenizer(backend, server_url, model_dir):
    from transformers import AutoTokenizer

    assert backend._tokenizer is None  # nothing local: ids come from POST /tokenize
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    texts = ["Hello world", PREFIX + "Review: fine.\nSentiment: positive"]
    assert backend.tokenize_many(texts) == [tok.encode(t) for t in texts]
    assert backend.tokenize(texts[0]) == tok.encode(texts[0])
    one = httpx.post(f"{server_url}/tokenize", json={"text": "Hello world"}, timeout=30).json()
    assert one["tokens"] == tok.encode("Hello world") and one["count"] == len(one["tokens"])
    bad = httpx.post(f"{server_url}/tokenize", json={"prompt": 3}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt"


def test_greedy_gen_equals_server_greedy(backend, server_url):
    @function
    def prog(s):
        s += "The three primary colors are"
        s += gen("out", max_tokens=10, temperature=0)

    state = prog.run(backend=backend)
    direct = httpx.post(f"{server_url}/generate", timeout=120, json={
        "text": "The three primary colors are",
        "sampling_params": {"max_new_tokens": 10, "temperature": 0}}).json()
    assert state["out"] == direct["text"]


def test_multi_turn_roles_and_cache(backend):
    @function
    def chat(s, q):
        s += system(PREFIX)
        s += user(q)
        s += assistant(gen("a", max_tokens=6, temperature=0, stop="\n"))
        s += user("Thanks. One more word?")
        s += assistant(gen("b", max_tokens=4, temperature=0))

    first = chat.run(q="Review: great phone.", backend=backend)
    second = chat.run(q="Review: great phone.", backend=backend)
    assert [m["role"] for m in first.messages()] == ["system", "user", "assistant", "user", "assistant"]
    assert first["a"] == second["a"]
    assert second.meta["cached_tokens"] > first.meta["cached_tokens"]


def _http_scores(server_url, backend, prefix, choices):
    """Mean logprob of each choice's tokens after ``prefix``, from /generate directly."""
    prefix_ids = backend.tokenize(prefix)
    scores = []
    for c in choices:
        ids = backend.tokenize(prefix + c)
        k = next(i for i, (a, b) in enumerate(zip(prefix_ids + [None], ids)) if a != b)
        meta = httpx.post(f"{server_url}/generate", timeout=120, json={
            "input_ids": ids, "return_logprob": True, "logprob_start_len": k,
            "sampling_params": {"max_new_tokens": 0}}).json()["meta_info"]
        lps = [lp for lp, _, _ in meta["input_token_logprobs"]]
        assert len(lps) == len(ids) - k
        scores.append(sum(lps) / len(lps))
    return scores


def test_select(backend, server_url):
    choices = [" negative", " positive"]  # the winner second: picking the first one is wrong

    @function
    def classify(s, review):
        s += PREFIX + f"Review: {review}\nSentiment:"
        s += select("label", choices=choices)

    state = classify.run(review="I love it, works perfectly.", backend=backend)
    expected = _http_scores(server_url, backend, PREFIX + "Review: I love it, works perfectly.\nSentiment:",
                            choices)
    assert state.get_meta_info("label")["normalized_prompt_logprobs"] == pytest.approx(expected, abs=1e-3)
    assert expected[1] > expected[0] and state["label"] == " positive"


def test_gen_with_choices_over_http(backend, server_url):
    choices = [" sideways", " down"]

    @function
    def prog(s):
        s += "The opposite of up is"
        s += gen("x", choices=choices)

    state = prog.run(backend=backend)
    expected = _http_scores(server_url, backend, "The opposite of up is", choices)
    assert state.get_meta_info("x")["normalized_prompt_logprobs"] == pytest.approx(expected, abs=1e-3)
    assert expected[1] > expected[0] and state["x"] == " down"


def test_fork_branches_hit_the_shared_prefix(backend):
    @function
    def tree(s):
        s += PREFIX * 2 + "Four one-word fruit names:\n"
        forks = s.fork(4)
        for i, f in enumerate(forks):
            f += f"{i + 1}."
            f += gen("fruit", max_tokens=3, temperature=0.7, seed=i)
        forks.join()

    state = tree.run(backend=backend)
    assert len(state["fruit"]) == 4
    shared = backend.tokenize(PREFIX * 2 + "Four one-word fruit names:\n")
    for i, meta in enumerate(state._metas[1:]):
        branch = backend.tokenize(PREFIX * 2 + f"Four one-word fruit names:\n{i + 1}.")
        common = next(j for j, (a, b) in enumerate(zip(branch, shared + [None])) if a != b)
        assert meta["cached_tokens"] == common // 16 * 16 > 0  # every whole page of the shared prefix


def test_run_batch_and_stream(backend):
    @function
    def prog(s, review, pattern):
        s += PREFIX * 2 + f"Review: {review}\nSentiment:"
        s += gen("label", max_tokens=3, temperature=0, regex=pattern)

    states = prog.run_batch([{"review": "Great!", "pattern": " (positive|negative)"},
                             {"review": "Bad.", "pattern": "(unclosed"}], backend=backend)
    assert states[0]["label"] in (" positive", " negative")
    assert isinstance(states[1].error(), ProgramError) and states[1].error().variable == "label"
    assert "HTTP 400" in str(states[1].error())

    @function
    def hello(s):
        s += user("Say hello.")
        s += assistant(gen("x", max_tokens=8, temperature=0))

    run = hello.run(stream=True, backend=backend)
    deltas = list(run.text_iter())
    assert "".join(deltas) == run.text() and run["x"]
