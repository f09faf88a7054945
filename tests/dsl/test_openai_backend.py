"""``sgl.OpenAI(...)`` against our own live server on loopback (the official openai client),
checked against the engine behind it: chat and completion models, select by prompt logprobs,
constraints through the extra body, streaming, token usage, and the clear errors."""

from __future__ import annotations

import json
import re

import httpx
import pytest

import frontend_dsl as sgl


@pytest.fixture(scope="module")
def model_name(live_url):
    return httpx.get(f"{live_url}/v1/models").json()["data"][0]["id"]


@pytest.fixture(scope="module")
def chat_model(live_url, model_name):
    return sgl.OpenAI(model_name, base_url=f"{live_url}/v1", api_key="EMPTY", max_retries=0)


@pytest.fixture(scope="module")
def completion_model(live_url, model_name):
    return sgl.OpenAI(model_name, is_chat_model=False, base_url=f"{live_url}/v1", api_key="EMPTY",
                      max_retries=0)


def test_chat_model_multi_turn_equals_the_engine(chat_model, engine_backend, engine):
    @sgl.function
    def multi_turn(s, q1, q2):
        s += sgl.system("You are terse.")
        s += sgl.user(q1)
        s += sgl.assistant(sgl.gen("a1", max_tokens=8))
        s += sgl.user(q2)
        s += sgl.assistant(sgl.gen("a2", max_tokens=8))

    chat_model.token_usage.reset()
    state = multi_turn.run(q1="Name a color.", q2="Another one?", temperature=0, backend=chat_model)
    local = multi_turn.run(q1="Name a color.", q2="Another one?", temperature=0, backend=engine_backend)
    assert state["a1"] == local["a1"] and state["a2"] == local["a2"]
    msgs = state.messages()
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant"]
    prompts = [engine.apply_chat_template(msgs[:k], add_generation_prompt=True) for k in (2, 4)]
    assert chat_model.token_usage.prompt_tokens == sum(len(engine.tokenize(p)) for p in prompts)
    assert chat_model.token_usage.completion_tokens == state.meta["completion_tokens"] > 0


def test_chat_model_errors_are_clear(chat_model):
    @sgl.function
    def mid_turn(s):
        s += sgl.user("Hi")
        s += sgl.assistant("Sure: " + sgl.gen("x", max_tokens=4))

    with pytest.raises(sgl.ProgramError, match=r'gen\("x"\) at .*must open the assistant turn'):
        mid_turn.run(backend=chat_model)

    @sgl.function
    def pick(s):
        s += sgl.user("Yes or no?")
        s += sgl.assistant(sgl.select("x", choices=["yes", "no"]))

    with pytest.raises(sgl.ProgramError, match=r"select.*chat model.*is_chat_model=False"):
        pick.run(backend=chat_model)


def test_completion_model_gen_and_select_equal_the_engine(completion_model, engine_backend):
    choices = [" sideways", " down", " left"]

    @sgl.function
    def prog(s, method):
        s += "Q: The opposite of up?\nA:" + sgl.gen("answer", max_tokens=6, stop="\n") + "\n"
        s += "The opposite of up is" + sgl.select("pick", choices=choices, choices_method=method)

    for method in ("token_length_normalized", "unconditional_likelihood_normalized"):
        remote = prog.run(method=method, temperature=0, backend=completion_model)
        local = prog.run(method=method, temperature=0, backend=engine_backend)
        assert remote["answer"] == local["answer"]
        assert remote["pick"] == local["pick"]
        got, want = remote.get_meta_info("pick"), local.get_meta_info("pick")
        assert got["normalized_prompt_logprobs"] == pytest.approx(want["normalized_prompt_logprobs"], abs=1e-3)
        for g, w in zip(got["input_token_logprobs"], want["input_token_logprobs"]):
            assert g == pytest.approx(w, abs=1e-3)
    assert remote.text() == local.text()


def test_completion_model_constraints_and_streaming(completion_model):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}

    @sgl.function
    def prog(s):
        s += "A year: " + sgl.gen("year", max_tokens=6, regex=r"(19|20)[0-9]{2}")
        s += "\nAs JSON: " + sgl.gen("obj", max_tokens=12, json_schema=schema)
        s += "\nA number: " + sgl.gen_int("n", max_tokens=4)

    state = prog.run(temperature=0, backend=completion_model)
    assert re.fullmatch(r"(19|20)[0-9]{2}", state["year"])
    assert isinstance(json.loads(state["obj"])["n"], int)
    int(state["n"])

    @sgl.function
    def story(s):
        s += "Once upon a time" + sgl.gen("rest", max_tokens=8)

    run = story.run(stream=True, temperature=0, backend=completion_model)
    deltas = list(run.text_iter("rest"))
    assert len(deltas) > 2 and "".join(deltas) == run["rest"]
    assert run["rest"] == story.run(temperature=0, backend=completion_model)["rest"]
    assert run.get_meta_info("rest")["completion_tokens"] == 8


def test_bad_sampling_value_is_the_servers_clear_error(completion_model):
    @sgl.function
    def bad(s):
        s += "Hi" + sgl.gen("x", max_tokens=2, top_p=5.0)

    with pytest.raises(sgl.ProgramError, match=r'gen\("x"\).*top_p'):
        bad.run(backend=completion_model)


def test_chat_model_json_schema_and_streaming(chat_model, engine_backend):
    schema = {"type": "object", "properties": {"color": {"type": "string", "maxLength": 8}},
              "required": ["color"]}

    @sgl.function
    def prog(s):
        s += sgl.user("Give a color as JSON.")
        s += sgl.assistant(sgl.gen("j", max_tokens=16, json_schema=schema))

    assert isinstance(json.loads(prog.run(temperature=0, backend=chat_model)["j"])["color"], str)

    @sgl.function
    def hello(s):
        s += sgl.user("Say hello.")
        s += sgl.assistant(sgl.gen("x", max_tokens=8))

    run = hello.run(stream=True, temperature=0, backend=chat_model)
    deltas = list(run.text_iter("x"))
    assert len(deltas) > 2 and "".join(deltas) == run["x"]
    assert run["x"] == hello.run(temperature=0, backend=engine_backend)["x"]
