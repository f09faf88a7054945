"""Programs written as SGLang's docs and examples write them, with only the import changed,
on the in-process backend against the embedded model. Each checks SGLang's documented
behaviour against the engine itself (greedy outputs, prompt text, cache hits)."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

import frontend_dsl as sgl
from frontend_dsl.ir import REGEX_FLOAT, REGEX_INT, REGEX_STR

PAGE = 16


def _greedy(engine, prompt, **params):
    return engine.generate(prompt, {"temperature": 0, **params})["text"]


def test_few_shot_qa_called_directly_with_run_defaults(engine_backend, engine):
    @sgl.function
    def few_shot_qa(s, question):
        s += "The following are questions with answers.\n\n"
        s += "Q: What is the capital of France?\nA: Paris\n"
        s += "Q: What is the capital of Germany?\nA: Berlin\n"
        s += "Q: " + question + "\n"
        s += "A:" + sgl.gen("answer", 8, stop="\n")  # positional max_tokens, as in SGLang

    sgl.set_default_backend(engine_backend)
    try:
        assert sgl.global_config.default_backend is engine_backend
        state = few_shot_qa(question="What is the capital of Italy?", temperature=0)
    finally:
        sgl.set_default_backend(None)
    assert isinstance(state, sgl.ProgramState)
    prompt = state.text()[: -len(state["answer"])]
    assert prompt.endswith("Q: What is the capital of Italy?\nA:")
    # temperature=0 from the call reached the gen: greedy, so the engine gives the same text.
    assert state["answer"] == _greedy(engine, prompt, max_new_tokens=8, stop="\n")
    state.sync()
    assert state.error() is None


def test_multi_turn_with_role_blocks_and_begin_end(engine_backend, engine):
    @sgl.function
    def multi_turn_question(s, question_1, question_2):
        s.system("You are a helpful assistant.")
        with s.user():
            s += question_1
        with s.assistant():
            s += sgl.gen("answer_1", max_tokens=8)
        s += sgl.user_begin() + question_2 + sgl.user_end()
        s += sgl.assistant_begin()
        s += sgl.gen("answer_2", max_tokens=8)
        s += sgl.assistant_end()

    state = multi_turn_question.run(question_1="What is the capital of the United States?",
                                    question_2="List two local attractions.", temperature=0,
                                    backend=engine_backend)
    msgs = state.messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant"]
    assert msgs[2]["content"] == state["answer_1"].lstrip() and msgs[4]["content"] == state["answer_2"].lstrip()
    assert state.text() == engine.apply_chat_template(msgs, add_generation_prompt=False)
    second_prompt = engine.apply_chat_template(msgs[:4], add_generation_prompt=True)
    assert state["answer_2"] == _greedy(engine, second_prompt, max_new_tokens=8)
    with pytest.raises(sgl.ProgramError, match="user_end\\(\\): no turn is open"):
        sgl.function(lambda s: s.__iadd__(sgl.user_end())).run(backend=engine_backend)


def test_react_with_select(engine_backend, engine):
    actions = ["Search", "Finish"]

    @sgl.function
    def react(s, question):
        s += ("Answer the question with Thought, Action steps. Actions: Search[entity] looks "
              "it up, Finish[answer] ends.\n")
        s += "Question: " + question + "\n"
        for i in range(2):
            s += f"Thought {i + 1}:" + sgl.gen(f"thought_{i}", max_tokens=12, stop="\n") + "\n"
            s += f"Action {i + 1}: " + sgl.select(f"action_{i}", choices=actions) + "["
            s += sgl.gen(f"arg_{i}", max_tokens=6, stop="]") + "]\n"
            if s[f"action_{i}"] == "Finish":
                break

    state = react.run(question="Which city is the capital of Japan?", temperature=0, backend=engine_backend)
    assert state["action_0"] in actions
    # The choice picked is the best-scoring one, and its score is the engine's.
    meta = state.get_meta_info("action_0")
    scores = meta["normalized_prompt_logprobs"]
    assert actions[scores.index(max(scores))] == state["action_0"]
    prefix = state.text().split("Action 1: ")[0] + "Action 1: "
    full = [engine.tokenize(prefix + a) for a in actions]
    start = min(next(i for i, (x, y) in enumerate(zip(f, engine.tokenize(prefix) + [None])) if x != y) for f in full)
    direct = engine.generate(input_ids=full, sampling_params={"max_new_tokens": 0}, return_logprob=True,
                             logprob_start_len=start)
    for got, d in zip(meta["input_token_logprobs"], direct):
        want = [lp for lp, _, _ in d["meta_info"]["input_token_logprobs"]]
        assert got == pytest.approx(want[-len(got):], abs=1e-3)


def test_parallel_decoding_with_fork(engine_backend, engine):
    @sgl.function
    def tip_suggestion(s):
        s += ("Here are two tips for staying healthy: 1. Balanced Diet. 2. Regular Exercise.\n\n"
              * 2)
        forks = s.fork(2)
        forks += lambda i: f"Now, expand tip {i + 1} into a paragraph:\n" + sgl.gen(
            "detailed_tip", max_tokens=8, stop="\n\n")
        forks.join()
        s += "Tip 1:" + s["detailed_tip"][0] + "\n"
        s += "Tip 2:" + s["detailed_tip"][1] + "\n"
        s += "In summary" + sgl.gen("summary", max_tokens=4)

    engine_backend.flush_cache()
    state = tip_suggestion.run(temperature=0, backend=engine_backend)
    shared = "Here are two tips for staying healthy: 1. Balanced Diet. 2. Regular Exercise.\n\n" * 2
    assert len(state["detailed_tip"]) == 2
    for i, tip in enumerate(state["detailed_tip"]):
        prompt = shared + f"Now, expand tip {i + 1} into a paragraph:\n"
        assert tip == _greedy(engine, prompt, max_new_tokens=8, stop="\n\n")
    # One prefill of the shared text, then both branches hit its whole pages.
    branch_metas = state._metas[1:3]
    assert state._metas[0]["cached_tokens"] == 0
    assert all(m["cached_tokens"] >= len(engine.tokenize(shared)) // PAGE * PAGE - PAGE for m in branch_metas)
    assert all(m["cached_tokens"] > 0 for m in branch_metas)


def test_fork_of_a_fork_indexed_appends_and_lists(engine_backend):
    @sgl.function
    def tree(s):
        s += "Colors:"
        forks = s.fork(2)
        forks[0] += " red"
        forks[1] += " blue"
        inner = forks[1].fork(2)
        inner += [" and green", " and pink"]  # a list: item i to branch i
        inner += sgl.gen("more", max_tokens=2)
        inner.join()
        forks += sgl.gen("next", max_tokens=2)
        forks.join()

    state = tree.run(temperature=0, backend=engine_backend)
    assert len(state["next"]) == 2
    # The inner branches' variable was gathered into their parent branch, then into the root.
    more = state["more"]
    assert more[0] is None and len(more[1]) == 2
    assert state.text() == "Colors:"


def test_parallel_encoding_with_concate_and_append(engine_backend, engine):
    contexts = ["Statement 1: The sky on Mars is red.\n", "Statement 2: Cats have four legs.\n",
                "Statement 3: Water boils at 100 C.\n"]

    @sgl.function
    def parallel_encoding(s, question):
        s += "I will ask a question based on some statements.\n" * 3
        forks = s.fork(len(contexts))
        forks += lambda i: contexts[i]
        forks.join(mode="concate_and_append")
        s += "Question: " + question + "\nAnswer:"
        s += sgl.gen("answer", max_tokens=6, stop="\n")

    engine_backend.flush_cache()
    state = parallel_encoding.run(question="What color is the sky on Mars?", temperature=0,
                                  backend=engine_backend)
    joined = "I will ask a question based on some statements.\n" * 3 + "".join(contexts)
    assert state.text().startswith(joined + "Question: What color is the sky on Mars?\nAnswer:")
    prompt = joined + "Question: What color is the sky on Mars?\nAnswer:"
    assert state["answer"] == _greedy(engine, prompt, max_new_tokens=6, stop="\n")
    # The join prefilled the concatenated text: the answer's request hit all its whole pages.
    joined_ids = engine.tokenize(joined)
    assert state.get_meta_info("answer")["cached_tokens"] >= len(joined_ids) // PAGE * PAGE > 0


def test_tool_use_with_var_scope_and_set_var(engine_backend):
    @sgl.function
    def calculator_agent(s, question):
        s += "Use the calculator: write calculator(a + b).\nQuestion: " + question + "\n"
        with s.var_scope("tool_call"):
            s += "calculator("
            s += sgl.gen("expression", max_tokens=8, regex=r"[0-9]{1,3} \+ [0-9]{1,3}")
            s += ")"
        a, b = (int(x) for x in s["expression"].split(" + "))
        s["result"] = str(a + b)
        s += " = " + s["result"] + "\n"
        s.set_var("checked", True)

    state = calculator_agent.run(question="What is 12 plus 30?", temperature=0, backend=engine_backend)
    assert state["tool_call"] == f"calculator({state['expression']})"
    assert re.fullmatch(r"[0-9]{1,3} \+ [0-9]{1,3}", state["expression"])
    assert state["result"] == str(sum(int(x) for x in state["expression"].split(" + ")))
    assert state.text().endswith(f"calculator({state['expression']}) = {state['result']}\n")
    assert state["checked"] is True and "checked" in state
    assert state.get_meta_info("tool_call") is None  # a scope makes no request


def test_json_with_regex_constants_and_typed_gens(engine_backend):
    @sgl.function
    def decode_json(s):
        s += "Generate a JSON object to describe the basic city information of Paris.\n"
        s += "Here is the JSON object:\n"
        with s.var_scope("json_output"):
            s += "{\n"
            s += '  "name": ' + sgl.gen(regex=REGEX_STR, max_tokens=8) + ",\n"
            s += '  "population": ' + sgl.gen(regex=REGEX_INT, stop=[" ", "\n"], max_tokens=6) + ",\n"
            s += '  "latitude": ' + sgl.gen(regex=REGEX_FLOAT, stop=[" ", "\n"], max_tokens=6) + "\n"
            s += "}"
        s += "\nCountry: " + sgl.gen_string("country", max_tokens=8)
        s += "\nYear founded: " + sgl.gen_int("year", max_tokens=4)

    state = decode_json.run(temperature=0, backend=engine_backend)
    obj = json.loads(state["json_output"])
    assert isinstance(obj["name"], str) and isinstance(obj["population"], int)
    assert isinstance(obj["latitude"], (int, float))
    assert json.loads(state["country"]) == state["country"][1:-1]
    int(state["year"])


def test_streaming_text_iter_of_a_variable(engine_backend, engine):
    @sgl.function
    def stream_qa(s, question):
        s += sgl.user(question)
        s += sgl.assistant(sgl.gen("answer", max_tokens=10))
        s += sgl.user("Thanks.")

    state = stream_qa.run(question="Say hello.", stream=True, temperature=0, backend=engine_backend)
    deltas = list(state.text_iter("answer"))
    assert len(deltas) > 3 and "".join(deltas) == state["answer"]
    everything = list(state.text_iter())
    assert "".join(everything) == state.text() and len(everything) > len(deltas)
    assert list(state.text_iter("never_set")) == [""]

    async def collect():
        again = stream_qa.run(question="Say hello.", stream=True, temperature=0, backend=engine_backend)
        return [d async for d in again.text_async_iter("answer")], again

    async_deltas, again = asyncio.run(collect())
    assert "".join(async_deltas) == again["answer"] == state["answer"]
    # Not streaming: the whole variable at once.
    plain = stream_qa.run(question="Say hello.", temperature=0, backend=engine_backend)
    assert list(plain.text_iter("answer")) == [state["answer"]]


def test_run_batch_progress_bar_positional_and_defaults(engine_backend, engine, capsys):
    @sgl.function
    def capital(s, country, suffix=""):
        s += "Q: What is the capital of " + country + "?" + suffix + "\nA:"
        s += sgl.gen("answer", stop="\n")

    engine_backend.token_usage.reset()
    states = capital.run_batch([["France"], {"country": "Spain"}, ("Japan", " Answer briefly.")],
                               num_threads=2, progress_bar=True, temperature=0, max_new_tokens=5,
                               backend=engine_backend)
    err = capsys.readouterr().err
    assert "3/3" in err and "100%" in err  # tqdm's bar reached the end
    for state, country in zip(states, ["France", "Spain", "Japan"]):
        assert state.error() is None
        prompt = state.text()[: len(state.text()) - len(state["answer"])]
        assert country in prompt
        assert state["answer"] == _greedy(engine, prompt, max_new_tokens=5, stop="\n")
    usage = engine_backend.token_usage
    assert usage.prompt_tokens == sum(s.meta["prompt_tokens"] for s in states) > 0
    assert usage.completion_tokens == sum(s.meta["completion_tokens"] for s in states) > 0
    usage.reset()
    assert (usage.prompt_tokens, usage.completion_tokens) == (0, 0)
    gen_style = capital.run_batch([["Peru"]], generator_style=True, temperature=0, max_new_tokens=3,
                                  backend=engine_backend)
    assert [s["answer"] for s in gen_style] == [_greedy(engine, "Q: What is the capital of Peru?\nA:",
                                                        max_new_tokens=3, stop="\n")]
    with pytest.raises(TypeError, match="does not match"):
        capital.run_batch([["a", "b", "c"]], backend=engine_backend)


def test_gen_min_tokens_n_and_logprobs(engine_backend):
    @sgl.function
    def prog(s):
        s += sgl.user("Reply with one word: yes or no?")
        s += sgl.assistant(sgl.gen("short", max_tokens=12))
        s += sgl.user("Again.")
        s += sgl.assistant(sgl.gen("long", max_tokens=12, min_tokens=10, return_logprob=True,
                                   top_logprobs_num=2, return_text_in_logprobs=True))

    state = prog.run(temperature=0, backend=engine_backend)
    assert state.get_meta_info("short")["completion_tokens"] < 10  # EOS ends it early
    meta = state.get_meta_info("long")
    assert meta["completion_tokens"] >= 10  # min_tokens held EOS back
    rows = meta["output_token_logprobs"]
    assert len(rows) == meta["completion_tokens"] and all(isinstance(t, str) for _, _, t in rows)
    assert "".join(t for _, _, t in rows).startswith(state["long"][:3])

    @sgl.function
    def two(s):
        s += "A fruit:" + sgl.gen("fruit", max_tokens=3, n=2, temperature=0.8, seed=3)

    state = two.run(backend=engine_backend)
    assert isinstance(state["fruit"], list) and len(state["fruit"]) == 2
    assert state.text() == "A fruit:" + state["fruit"][0]


def test_num_api_spec_tokens_is_accepted_and_runs_normally(engine_backend):
    @sgl.function(num_api_spec_tokens=64)
    def spec(s):
        s += sgl.user("Name a color.")
        s += sgl.assistant("Color: " + sgl.gen("color", max_tokens=4, stop="\n"))

    @sgl.function
    def plain(s):
        s += sgl.user("Name a color.")
        s += sgl.assistant("Color: " + sgl.gen("color", max_tokens=4, stop="\n"))

    assert spec.num_api_spec_tokens == 64
    got = spec.run(temperature=0, backend=engine_backend)
    assert got["color"] == plain.run(temperature=0, backend=engine_backend)["color"]
    assert got.ret_value is None


def test_separate_reasoning_splits_a_think_block(engine_backend):
    @sgl.function
    def thinker(s):
        s += "Think, then answer.\n"
        s += sgl.separate_reasoning(sgl.gen("answer", max_tokens=24, regex=r"<think>[a-z ]{1,12}</think>[a-z ]{1,8}"),
                                    model_type="deepseek-r1")

    state = thinker.run(temperature=0, backend=engine_backend)
    # The regex forced a think block; it left both the variable and the text.
    assert "think>" not in state["answer"] and "think>" not in state.text()
    assert re.fullmatch(r"[a-z ]{0,8}", state["answer"])
    assert re.fullmatch(r"[a-z ]{0,12}", state["answer_reasoning_content"])
    assert state.text() == "Think, then answer.\n" + state["answer"]
    with pytest.raises(NotImplementedError, match="text-only"):
        sgl.image("cat.png")
