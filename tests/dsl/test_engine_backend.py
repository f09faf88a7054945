"""Every DSL feature on the in-process backend, against the embedded model."""

from __future__ import annotations

import json
import re

import pytest

from frontend_dsl import (
    ProgramError,
    VariableNotFoundError,
    assistant,
    function,
    gen,
    select,
    system,
    user,
)

PREFIX = ("You are a sentiment classifier. Read the review and answer with one word: positive "
          "or negative. Reviews that praise the product are positive; complaints are negative.\n")


def test_greedy_gen_equals_engine_greedy(engine_backend, engine):
    @function
    def prog(s):
        s += "The three primary colors are"
        s += gen("out", max_tokens=10, temperature=0)

    state = prog.run(backend=engine_backend)
    direct = engine.generate("The three primary colors are", {"max_new_tokens": 10, "temperature": 0})
    assert state["out"] == direct["text"]
    assert state.text() == "The three primary colors are" + direct["text"]


def test_roles_use_the_chat_template(engine_backend, engine):
    @function
    def chat(s):
        s += system("You are terse.")
        s += user("Name a color.")
        s += assistant(gen("c", max_tokens=6, temperature=0, stop="\n"))
        s += user("Another?")
        s += assistant(gen("d", max_tokens=6, temperature=0, stop="\n"))

    state = chat.run(backend=engine_backend)
    msgs = state.messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant"]
    assert msgs[2]["content"] == state["c"] and msgs[4]["content"] == state["d"]
    assert state.text() == engine.apply_chat_template(msgs, add_generation_prompt=False)
    # The first gen saw exactly the template's generation prompt.
    prompt = engine.apply_chat_template(msgs[:2], add_generation_prompt=True)
    direct = engine.generate(prompt, {"max_new_tokens": 6, "temperature": 0, "stop": "\n"})
    assert direct["text"] == state["c"]


def _direct_scores(engine, prefix, choices):
    """Mean logprob of each choice's tokens, computed straight through the engine."""
    prefix_ids = engine.tokenize(prefix)
    scores = []
    for c in choices:
        ids = engine.tokenize(prefix + c)
        k = next(i for i, (a, b) in enumerate(zip(prefix_ids + [None], ids)) if a != b)
        out = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 0},
                              return_logprob=True, logprob_start_len=k)
        lps = [lp for lp, _, _ in out["meta_info"]["input_token_logprobs"]]
        assert len(lps) == len(ids) - k
        scores.append(sum(lps) / len(lps))
    return scores


def test_select_agrees_with_engine_logprobs(engine_backend, engine):
    choices = ["positive", "negative", "neutral and unsure"]
    review = "Review: I love this blender, it works perfectly.\nSentiment:"

    @function
    def classify(s):
        s += PREFIX + review
        s += select("label", choices=[" " + c for c in choices])

    state = classify.run(backend=engine_backend)
    expected = _direct_scores(engine, PREFIX + review, [" " + c for c in choices])
    got = state.get_meta_info("label")["normalized_prompt_logprobs"]
    assert got == pytest.approx(expected, abs=1e-3)
    assert state["label"] == " " + choices[max(range(3), key=expected.__getitem__)]
    assert state.text().endswith(state["label"])


@pytest.mark.parametrize("method", ["greedy_token_selection", "unconditional_likelihood_normalized"])
def test_select_methods(engine_backend, method):
    @function
    def prog(s):
        s += "Q: Is fire hot or cold?\nA: It is"
        s += select("a", choices=[" hot", " cold"], choices_method=method)

    state = prog.run(backend=engine_backend)
    assert state["a"] in (" hot", " cold")
    meta = state.get_meta_info("a")
    if method == "unconditional_likelihood_normalized":
        assert len(meta["unconditional_token_logprobs"]) == 2


def test_gen_with_choices_is_select(engine_backend):
    @function
    def prog(s):
        s += "The opposite of up is"
        s += gen("x", choices=[" down", " sideways"])

    assert prog.run(backend=engine_backend)["x"] in (" down", " sideways")


def test_second_run_reports_cached_tokens(engine_backend):
    @function
    def prog(s, topic):
        s += PREFIX * 2 + f"Topic: {topic}\n"
        s += gen("x", max_tokens=2, temperature=0)

    engine_backend.flush_cache()
    first = prog.run(topic="tea", backend=engine_backend)
    second = prog.run(topic="tea", backend=engine_backend)
    assert second.meta["cached_tokens"] > first.meta["cached_tokens"]
    assert second.meta["cache_hit_rate"] > 0.8
    assert second.get_meta_info("x")["cached_tokens"] >= second.meta["prompt_tokens"] - 16


def test_fork_prefills_shared_prefix_once(engine_backend, engine):
    @function
    def tree(s):
        s += PREFIX * 2 + "Four different one-word fruit names:\n"
        forks = s.fork(4)
        for i, f in enumerate(forks):
            f += f"{i + 1}."
            f += gen("fruit", max_tokens=3, temperature=0.7, seed=i)
        forks.join()

    engine_backend.flush_cache()
    state = tree.run(backend=engine_backend)
    shared = len(engine.tokenize(PREFIX * 2 + "Four different one-word fruit names:\n"))
    assert isinstance(state["fruit"], list) and len(state["fruit"]) == 4
    # 5 requests: the prefill of the shared prefix, then one per branch.
    assert state.meta["num_requests"] == 5
    for f in tree_forks(state):
        assert f["cached_tokens"] >= shared // 16 * 16


def tree_forks(state):
    return state._metas[1:]


def test_fork_branches_continue_independently(engine_backend):
    @function
    def prog(s):
        s += "Count:"
        forks = s.fork(2)
        forks[0] += " one"
        forks[1] += " two"
        forks += gen("n", max_tokens=2, temperature=0)
        assert forks[0].text().startswith("Count: one") and forks[1].text().startswith("Count: two")
        forks.join(mode="concate_and_append")
        s += "!"

    state = prog.run(backend=engine_backend)
    assert state.text().startswith("Count: one") and " two" in state.text()
    assert state.text().endswith("!")


def test_regex_and_json_schema(engine_backend):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"]}

    @function
    def extract(s, text):
        s += f"Extract the person as JSON.\nText: {text}\nJSON: "
        s += gen("person", max_tokens=40, temperature=0, json_schema=schema)
        s += "\nYear of birth: "
        s += gen("year", max_tokens=6, temperature=0, regex=r"(19|20)[0-9]{2}")

    state = extract.run(text="Alice is 31 years old.", backend=engine_backend)
    person = json.loads(state["person"])
    assert isinstance(person["name"], str) and isinstance(person["age"], int)
    assert re.fullmatch(r"(19|20)[0-9]{2}", state["year"])


def test_gen_dtype_parses_as_its_type(engine_backend):
    @function
    def facts(s):
        s += "A week has this many days: " + gen("days", max_tokens=4, dtype=int, temperature=0)
        s += "\nPi is about " + gen("pi", max_tokens=6, dtype=float, temperature=0)
        s += "\nThe sky is blue (True or False): " + gen("blue", max_tokens=3, dtype=bool, temperature=0)
        s += "\nA color in quotes: " + gen("color", max_tokens=8, dtype=str, temperature=0.7, seed=1)

    state = facts.run(backend=engine_backend)
    int(state["days"]), float(state["pi"])
    assert state["blue"] in ("True", "False")
    assert state["color"].startswith('"') and state["color"].endswith('"') and "\n" not in state["color"]


def test_stream_yields_the_text(engine_backend):
    @function
    def prog(s):
        s += user("Say hello.")
        s += assistant(gen("x", max_tokens=8, temperature=0))

    run = prog.run(stream=True, backend=engine_backend)
    deltas = list(run.text_iter())
    assert len(deltas) > 3
    assert "".join(deltas) == run.text()
    assert run["x"] and run["x"] in run.text()


def test_run_batch_caches_constant_prefix_and_isolates_failures(engine_backend):
    @function
    def prog(s, review, pattern):
        s += PREFIX * 2
        s += f"Review: {review}\nSentiment:"
        s += gen("label", max_tokens=3, temperature=0, regex=pattern)

    engine_backend.flush_cache()
    batch = [{"review": "Great!", "pattern": " (positive|negative)"},
             {"review": "Awful.", "pattern": "(unclosed"},
             {"review": "Fine.", "pattern": " (positive|negative)"}]
    states = prog.run_batch(batch, backend=engine_backend, num_threads=3)
    assert states[0].error is None and states[2].error is None
    assert states[0]["label"] in (" positive", " negative")
    err = states[1].error
    assert isinstance(err, ProgramError) and err.variable == "label"
    assert 'gen("label")' in str(err) and "test_engine_backend.py" in str(err)
    with pytest.raises(ProgramError):
        states[1]["label"]
    # The constant prefix was prefilled before the batch, so every program hit it.
    assert all(s.meta["cached_tokens"] >= 32 for s in (states[0], states[2]))


def test_errors_name_the_variable(engine_backend):
    @function
    def prog(s):
        s += "Hi"
        s += gen("x", max_tokens=1, temperature=0)
        s["y"]

    with pytest.raises(VariableNotFoundError, match="'y'.*set: \\['x'\\]"):
        prog.run(backend=engine_backend)

    @function
    def bad(s):
        s += "Hi"
        s += gen("z", max_tokens=1, top_p=5.0)

    with pytest.raises(ProgramError, match='gen\\("z"\\) at .*: top_p'):
        bad.run(backend=engine_backend)


def test_role_blocks_as_context_managers(engine_backend):
    @function
    def prog(s):
        with s.user():
            s += "Hi "
            s += "there"
        with s.assistant():
            s += "Hello"

    state = prog.run(backend=engine_backend)
    assert state.messages() == [{"role": "user", "content": "Hi there"},
                                {"role": "assistant", "content": "Hello"}]
    assert state.text() == "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
    assert state.meta["num_requests"] == 0
