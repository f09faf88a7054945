"""Operator options: several served model names, --chat-template (file or inline),
sampling defaults from generation_config.json (request fields override), CORS off unless
--allowed-origins; and the flags that set them."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from sglang_lite.loopback import free_port
from sglang_lite.server import create_app
from sglang_lite.server.args import parse_args
from sglang_lite.server.serving_options import (
    ServingOptions,
    load_chat_template,
    load_generation_defaults,
)
from tests.server.conftest import LiveServer, wait_until_healthy

TEMPLATE = ("{% if greeting %}{{ greeting }} {% endif %}{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}[assistant] {% endif %}")
ORIGIN = "http://app.example"


@pytest.fixture(scope="module")
def custom(engine, tmp_path_factory):
    """One app over the shared engine with every option set."""
    d = tmp_path_factory.mktemp("gen")
    (d / "generation_config.json").write_text(json.dumps({"temperature": 0.0, "max_new_tokens": 5,
                                                          "bos_token_id": 1}))
    options = ServingOptions(chat_template=load_chat_template(TEMPLATE),
                             generation_defaults=load_generation_defaults(str(d), None),
                             allowed_origins=(ORIGIN,))
    live = LiveServer(create_app(engine, ["first-name", "second-name"], serving_options=options)).start()
    yield live
    live.stop()


@pytest.fixture()
def cclient(custom):
    return openai.OpenAI(base_url=custom.base_url + "/v1", api_key="x", max_retries=0, timeout=120)


def test_several_served_names(cclient):
    assert [m.id for m in cclient.models.list().data] == ["first-name", "second-name"]
    r = cclient.completions.create(model="second-name", prompt="Hi", max_tokens=1)
    assert r.model == "second-name"
    with pytest.raises(openai.NotFoundError):
        cclient.completions.create(model="third-name", prompt="Hi", max_tokens=1)


def test_chat_template_override_renders_the_prompt(custom, cclient, engine):
    messages = [{"role": "user", "content": "Hi there"}]
    tok = httpx.post(custom.base_url + "/tokenize", json={"messages": messages}).json()
    assert engine.tokenizer.decode(tok["tokens"]) == "[user] Hi there\n[assistant] "
    chat = cclient.chat.completions.create(model="first-name", messages=messages, max_tokens=1)
    assert chat.usage.prompt_tokens == tok["count"]


def test_chat_template_from_file_and_errors(tmp_path):
    f = tmp_path / "t.jinja"
    f.write_text(TEMPLATE)
    assert load_chat_template(str(f)) == TEMPLATE
    with pytest.raises(ValueError, match="chat_template"):
        load_chat_template(str(tmp_path / "missing.jinja"))
    with pytest.raises(ValueError, match="chat_template: line 1"):
        load_chat_template("{% for m in messages %}")


def test_generation_config_defaults_and_overrides(custom, cclient, engine):
    messages = [{"role": "user", "content": "Tell me about cats."}]
    # temperature 0 from the file: different seeds give the greedy output
    a, b = (cclient.chat.completions.create(model="first-name", messages=messages, seed=s,
                                            extra_body={"ignore_eos": True}) for s in (1, 2))
    greedy = cclient.chat.completions.create(model="first-name", messages=messages, temperature=0,
                                             extra_body={"ignore_eos": True})
    assert a.choices[0].message.content == b.choices[0].message.content == greedy.choices[0].message.content
    assert a.usage.completion_tokens == 5  # max_new_tokens from the file
    short = cclient.chat.completions.create(model="first-name", messages=messages, max_tokens=2,
                                            extra_body={"ignore_eos": True})
    assert short.usage.completion_tokens == 2  # the request's field wins
    g = httpx.post(custom.base_url + "/generate", json={"text": "Cats are", "sampling_params": {
        "ignore_eos": True}}).json()
    direct = engine.generate("Cats are", {"max_new_tokens": 5, "temperature": 0, "ignore_eos": True})
    assert g["text"] == direct["text"] and g["meta_info"]["completion_tokens"] == 5


def test_generation_config_loading(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"top_p": 0.9, "top_k": 20, "eos_token_id": 2}))
    assert load_generation_defaults("auto", tmp_path) == {"top_p": 0.9, "top_k": 20}
    assert load_generation_defaults("vllm", tmp_path) == {}
    assert load_generation_defaults("auto", tmp_path, '{"top_k": 5, "temperature": 0.3}') == {
        "top_p": 0.9, "top_k": 5, "temperature": 0.3}
    with pytest.raises(ValueError, match="generation_config"):
        load_generation_defaults(str(tmp_path / "nowhere"), None)


def test_cors_is_off_by_default(server):
    pre = httpx.options(server.base_url + "/v1/models", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "GET"})
    assert "access-control-allow-origin" not in pre.headers
    get = httpx.get(server.base_url + "/v1/models", headers={"Origin": ORIGIN})
    assert "access-control-allow-origin" not in get.headers


def test_cors_allows_only_the_given_origins(custom):
    pre = httpx.options(custom.base_url + "/v1/chat/completions", headers={
        "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type"})
    assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == ORIGIN
    get = httpx.get(custom.base_url + "/v1/models", headers={"Origin": ORIGIN})
    assert get.headers["access-control-allow-origin"] == ORIGIN
    other = httpx.get(custom.base_url + "/v1/models", headers={"Origin": "http://evil.example"})
    assert "access-control-allow-origin" not in other.headers


def test_flags(tmp_path):
    f = tmp_path / "t.jinja"
    f.write_text(TEMPLATE)
    args = parse_args(["--served-model-name", "a", "b", "--chat-template", str(f),
                       "--allowed-origins", '["http://x.example", "http://y.example"]',
                       "--generation-config", "vllm", "--scheduling-policy", "priority"])
    assert args.served_model_name == ["a", "b"] and args.generation_config == "vllm"
    assert args.engine_options["enable_priority_scheduling"] is True
    assert args.engine_options["schedule_low_priority_values_first"] is True
    from sglang_lite.server import serving_options

    opts = serving_options(args, None)
    assert opts.chat_template == TEMPLATE
    assert opts.allowed_origins == ("http://x.example", "http://y.example")
    assert parse_args(["--allowed-origins", "http://z.example,http://w.example"]).allowed_origins
    flags = parse_args(["--enable-priority-scheduling", "--priority-scheduling-preemption-threshold", "3"])
    assert flags.engine_options == {"enable_priority_scheduling": True,
                                    "priority_scheduling_preemption_threshold": 3}


def test_chat_template_kwargs_reach_the_template_and_reserved_keys_are_400s(custom, cclient, engine):
    messages = [{"role": "user", "content": "Hi"}]
    extra = {"messages": messages, "chat_template_kwargs": {"greeting": "Hello"}}
    tok = httpx.post(custom.base_url + "/tokenize", json=extra).json()
    assert engine.tokenizer.decode(tok["tokens"]) == "Hello [user] Hi\n[assistant] "
    chat = cclient.chat.completions.create(model="first-name", messages=messages, max_tokens=1,
                                           extra_body={"chat_template_kwargs": {"greeting": "Hello"}})
    assert chat.usage.prompt_tokens == tok["count"]
    for key in ("chat_template", "tokenize"):
        with pytest.raises(openai.BadRequestError) as e:
            cclient.chat.completions.create(model="first-name", messages=messages, max_tokens=1,
                                            extra_body={"chat_template_kwargs": {key: "x"}})
        assert e.value.body["param"] == f"chat_template_kwargs.{key}"


def test_serve_command_wires_the_flags(tmp_path):
    """`python -m sglang_lite.server` with the new flags, in a subprocess."""
    import os
    import subprocess
    import sys


    port = free_port()
    (tmp_path / "generation_config.json").write_text(json.dumps({"max_new_tokens": 3, "temperature": 0}))
    cmd = [sys.executable, "-m", "sglang_lite.server", "--port", str(port), "--log-level", "warning",
           "--dtype", "float32", "--kv-cache-memory", "32MiB", "--served-model-name", "m1", "m2",
           "--chat-template", TEMPLATE, "--allowed-origins", f'["{ORIGIN}"]',
           "--generation-config", str(tmp_path), "--scheduling-policy", "priority"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(proc, base)
        models = httpx.get(base + "/v1/models", headers={"Origin": ORIGIN})
        assert [m["id"] for m in models.json()["data"]] == ["m1", "m2"]
        assert models.headers["access-control-allow-origin"] == ORIGIN
        tok = httpx.post(base + "/tokenize", json={"messages": [{"role": "user", "content": "Yo"}]}).json()
        detok = httpx.post(base + "/detokenize", json={"tokens": tok["tokens"]}).json()
        assert detok["text"] == "[user] Yo\n[assistant] "
        chat = httpx.post(base + "/v1/chat/completions", timeout=60, json={
            "model": "m2", "messages": [{"role": "user", "content": "Yo"}], "ignore_eos": True}).json()
        assert chat["model"] == "m2" and chat["usage"]["completion_tokens"] == 3
        info = httpx.get(base + "/get_server_info").json()
        assert info["enable_priority_scheduling"] and info["schedule_low_priority_values_first"]
    finally:
        proc.kill()
        proc.wait()


def test_serve_command_rejects_a_bad_template():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "sglang_lite.server", "--chat-template", "no-such-file.jinja"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "chat_template" in r.stderr
