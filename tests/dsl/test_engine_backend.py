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

PAGE = 16  # the engine's default page size
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


def _direct_token_logprobs(engine, prefix, choices, unconditional=False):
    """Each choice's token logprobs straight from the engine (prefill-only requests): given
    the prefix, or (unconditional) given nothing but the choice's own earlier tokens."""
    prefix_ids = engine.tokenize(prefix)
    out = []
    for c in choices:
        ids = engine.tokenize(prefix + c)
        k = next(i for i, (a, b) in enumerate(zip(prefix_ids + [None], ids)) if a != b)
        ids, start = (ids[k:], 0) if unconditional else (ids, k)
        meta = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 0},
                               return_logprob=True, logprob_start_len=start)["meta_info"]
        lps = [lp for lp, _, _ in meta["input_token_logprobs"]]
        assert len(lps) == len(ids) - start
        out.append([lp or 0.0 for lp in lps])  # the first token alone has no logprob: 0
    return out


def _direct_scores(engine, prefix, choices):
    """Mean logprob of each choice's tokens, computed straight through the engine."""
    return [sum(lps) / len(lps) for lps in _direct_token_logprobs(engine, prefix, choices)]


def _argmax(xs):
    return max(range(len(xs)), key=xs.__getitem__)


# The winner is listed last: a select that picks the first (or the worst) choice is wrong.
REVIEW = "Review: I love this blender, it works perfectly.\nSentiment:"
CHOICES = [" neutral and unsure", " negative", " positive"]


def test_select_agrees_with_engine_logprobs(engine_backend, engine):
    @function
    def classify(s):
        s += PREFIX + REVIEW
        s += select("label", choices=CHOICES)

    state = classify.run(backend=engine_backend)
    expected = _direct_scores(engine, PREFIX + REVIEW, CHOICES)
    got = state.get_meta_info("label")["normalized_prompt_logprobs"]
    assert got == pytest.approx(expected, abs=1e-3)
    assert _argmax(expected) == 2 and state["label"] == " positive"
    assert state.text() == PREFIX + REVIEW + " positive"


def test_select_greedy_token_selection_compares_token_by_token(engine_backend, engine):
    @function
    def prog(s):
        s += PREFIX + REVIEW
        s += select("label", choices=CHOICES, choices_method="greedy_token_selection")

    state = prog.run(backend=engine_backend)
    direct = _direct_token_logprobs(engine, PREFIX + REVIEW, CHOICES)
    meta = state.get_meta_info("label")
    assert len(meta["input_token_logprobs"]) == 3
    for got, want in zip(meta["input_token_logprobs"], direct):
        assert got == pytest.approx(want, abs=1e-3)
    # The first tokens already differ, so the most likely first token decides.
    firsts = [lps[0] for lps in direct]
    assert _argmax(firsts) == 2 and state["label"] == CHOICES[2]


def test_select_unconditional_likelihood_normalized(engine_backend, engine):
    @function
    def prog(s):
        s += PREFIX + REVIEW
        s += select("label", choices=CHOICES, choices_method="unconditional_likelihood_normalized")

    state = prog.run(backend=engine_backend)
    cond = _direct_token_logprobs(engine, PREFIX + REVIEW, CHOICES)
    uncond = _direct_token_logprobs(engine, PREFIX + REVIEW, CHOICES, unconditional=True)
    expected = [sum(c - u for c, u in zip(cl, ul)) / len(cl) for cl, ul in zip(cond, uncond)]
    meta = state.get_meta_info("label")
    assert meta["normalized_prompt_logprobs"] == pytest.approx(expected, abs=1e-3)
    for got, want in zip(meta["unconditional_token_logprobs"], uncond):
        assert got == pytest.approx(want, abs=1e-3)
    assert _argmax(expected) == 2 and state["label"] == CHOICES[2]


def test_gen_with_choices_is_select(engine_backend, engine):
    choices = [" sideways", " down"]

    @function
    def prog(s):
        s += "The opposite of up is"
        s += gen("x", choices=choices)

    state = prog.run(backend=engine_backend)
    expected = _direct_scores(engine, "The opposite of up is", choices)
    assert state.get_meta_info("x")["normalized_prompt_logprobs"] == pytest.approx(expected, abs=1e-3)
    assert _argmax(expected) == 1 and state["x"] == " down"


def _common_len(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def test_second_run_reports_cached_tokens(engine_backend, engine):
    @function
    def prog(s, topic):
        s += PREFIX * 2 + f"Topic: {topic}\n"
        s += gen("x", max_tokens=2, temperature=0)

    engine_backend.flush_cache()
    first = prog.run(topic="tea", backend=engine_backend)
    second = prog.run(topic="tea", backend=engine_backend)
    prompt = len(engine.tokenize(PREFIX * 2 + "Topic: tea\n"))
    assert first.meta["prompt_tokens"] == second.meta["prompt_tokens"] == prompt
    assert first.meta["cached_tokens"] == 0
    # Every whole page of the prompt but the one holding its last token (which is computed).
    want = (prompt - 1) // PAGE * PAGE
    assert second.get_meta_info("x")["cached_tokens"] == second.meta["cached_tokens"] == want
    assert second.meta["cache_hit_rate"] == want / prompt


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
    shared = engine.tokenize(PREFIX * 2 + "Four different one-word fruit names:\n")
    assert isinstance(state["fruit"], list) and len(state["fruit"]) == 4
    # 5 requests: the prefill of the shared prefix, then one per branch.
    assert state.meta["num_requests"] == 5
    assert state._metas[0]["cached_tokens"] == 0
    for i, f in enumerate(tree_forks(state)):
        branch = engine.tokenize(PREFIX * 2 + f"Four different one-word fruit names:\n{i + 1}.")
        # The prefill left the shared prefix's whole pages in the tree; each branch reuses them all.
        assert f["cached_tokens"] == _common_len(branch, shared) // PAGE * PAGE > 0


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


def test_run_batch_caches_constant_prefix_and_isolates_failures(engine_backend, engine):
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
    assert states[0].error() is None and states[2].error() is None
    assert states[0]["label"] in (" positive", " negative")
    err = states[1].error()
    assert isinstance(err, ProgramError) and err.variable == "label"
    assert 'gen("label")' in str(err) and "test_engine_backend.py" in str(err)
    with pytest.raises(ProgramError):
        states[1]["label"]
    # The constant prefix was prefilled before the batch, so every program hit all its whole
    # pages (the reviews part ways before the next page ends).
    constant = engine.tokenize(PREFIX * 2)
    prompts = [engine.tokenize(PREFIX * 2 + f"Review: {b['review']}\nSentiment:") for b in batch]
    assert _common_len(prompts[0], prompts[2]) // PAGE == len(constant) // PAGE
    assert [s.meta["cached_tokens"] for s in (states[0], states[2])] == [len(constant) // PAGE * PAGE] * 2


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
    # No system turn of its own: the template's default one opens the conversation, as the
    # server's chat route renders it (SGLang's default_system_prompt).
    default = engine_backend.chat_template.default_system_prompt
    assert default and "SmolLM" in default
    assert state.messages() == [{"role": "system", "content": default},
                                {"role": "user", "content": "Hi there"},
                                {"role": "assistant", "content": "Hello"}]
    assert state.text() == (f"<|im_start|>system\n{default}<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
                            "<|im_start|>assistant\nHello<|im_end|>\n")
    assert state.text() == engine_backend.engine.apply_chat_template(state.messages()[1:], add_generation_prompt=False)
    assert state.meta["num_requests"] == 0
