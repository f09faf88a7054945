"""/tokenize and /detokenize in vLLM's shape and SGLang's, checked against what the
generation routes count and the tokenizer produces."""

from __future__ import annotations

import pytest

PROMPT = "The capital of France is"
CHAT = [{"role": "user", "content": "Name three colors."}]


@pytest.mark.parametrize("path", ["/tokenize", "/v1/tokenize"])
def test_tokenize_prompt_counts_what_completions_count(http, client, engine, model_name, path):
    r = http.post(path, json={"model": model_name, "prompt": PROMPT})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == engine.tokenizer.encode(PROMPT)
    assert body["max_model_len"] == engine.context_length
    done = client.completions.create(model=model_name, prompt=PROMPT, max_tokens=1, temperature=0)
    assert body["count"] == len(body["tokens"]) == done.usage.prompt_tokens


def test_tokenize_messages_counts_what_chat_counts(http, client, model_name, engine):
    body = http.post("/tokenize", json={"model": model_name, "messages": CHAT}).json()
    chat = client.chat.completions.create(model=model_name, messages=CHAT, max_tokens=1, temperature=0)
    assert body["count"] == chat.usage.prompt_tokens
    rendered = engine.apply_chat_template(CHAT, add_generation_prompt=True)
    assert engine.tokenizer.decode(body["tokens"]) == rendered
    no_prompt = http.post("/tokenize", json={"messages": CHAT, "add_generation_prompt": False}).json()
    assert no_prompt["count"] < body["count"]
    assert body["tokens"][: no_prompt["count"]] == no_prompt["tokens"]


def test_detokenize_round_trip_both_shapes(http, engine):
    ids = engine.tokenizer.encode(PROMPT)
    for path in ("/detokenize", "/v1/detokenize"):
        out = http.post(path, json={"tokens": ids}).json()
        assert out["prompt"] == out["text"] == engine.tokenizer.decode(ids)
    batch = http.post("/detokenize", json={"tokens": [ids, ids[:2]]}).json()
    assert batch["text"] == [engine.tokenizer.decode(ids), engine.tokenizer.decode(ids[:2])]


def test_sglang_batch_shape_token_strs_and_special_tokens(http, engine):
    prompts = [PROMPT, "Hello"]
    body = http.post("/tokenize", json={"prompt": prompts, "return_token_strs": True}).json()
    assert body["tokens"] == [engine.tokenizer.encode(p) for p in prompts]
    assert body["count"] == [len(t) for t in body["tokens"]]
    assert body["token_strs"][1] == engine.tokenizer.convert_ids_to_tokens(body["tokens"][1])
    text = http.post("/tokenize", json={"text": "Hello"}).json()  # SGLang's native field name
    assert text["tokens"] == body["tokens"][1]
    eos = engine.tokenizer.eos_token
    with_special = http.post("/tokenize", json={"prompt": eos + "Hi", "add_special_tokens": False}).json()
    assert with_special["tokens"][0] == engine.tokenizer.eos_token_id


@pytest.mark.parametrize("path,body,param", [
    ("/tokenize", {}, "prompt"),
    ("/tokenize", {"prompt": "a", "messages": CHAT}, "prompt"),
    ("/tokenize", {"prompt": []}, "prompt"),
    ("/tokenize", {"messages": []}, "messages"),
    ("/tokenize", {"prompt": "a", "model": "nope"}, "model"),
    ("/detokenize", {"tokens": [1, 10**9]}, "tokens"),
    ("/detokenize", {"tokens": [-1]}, "tokens"),
    ("/detokenize", {"tokens": "abc"}, "tokens"),
])
def test_bad_input_is_a_4xx_naming_the_field(http, path, body, param):
    r = http.post(path, json=body)
    assert 400 <= r.status_code < 500, r.text
    assert r.json()["error"]["param"].split(".")[0] == param
    assert http.get("/health").status_code == 200
