"""Model-free parts of the DSL: expressions, errors, chat-template derivation, tracing."""

from __future__ import annotations

import pytest

from frontend_dsl import ProgramError, assistant, function, gen, select, system, user
from frontend_dsl.chat_template import PLAIN, derive, from_tokenizer
from frontend_dsl.scoring import _greedy_pick
from frontend_dsl.tracer import constant_prefix


def _chatml(messages):
    return "".join(f"<s>{m['role']}\n{m['content']}</s>\n" for m in messages)


def test_derive_role_prefixes_and_suffixes():
    t = derive(_chatml)
    assert t.begin("user") == "<s>user\n" and t.end("user") == "</s>\n"
    assert t.begin("system") == "<s>system\n" and t.end("assistant") == "</s>\n"


def test_template_that_rewrites_content_falls_back_to_plain():
    class Tok:
        chat_template = "x"

        def apply_chat_template(self, messages, **kw):
            return "".join(m["content"].upper() for m in messages)

    assert from_tokenizer(Tok()) is PLAIN
    assert from_tokenizer(None) is PLAIN


def test_gen_maps_sglang_keywords():
    g = gen("x", max_tokens=5, stop="\n", temperature=0, json_schema={"type": "integer"})
    assert g.sampling == {"max_new_tokens": 5, "stop": "\n", "temperature": 0,
                          "json_schema": '{"type": "integer"}'}
    assert g.where and g.where.endswith(".py:" + g.where.rsplit(":", 1)[1])


@pytest.mark.parametrize("kwargs", [{"regex": "a", "json_schema": {}}, {"regex": "a", "ebnf": "x"}])
def test_conflicting_constraints_name_the_variable(kwargs):
    with pytest.raises(ValueError, match=r'gen\("answer"\) at .*test_units.py:\d+: conflicting'):
        gen("answer", **kwargs)


def test_expressions_concatenate_in_order():
    g, c = gen("a"), select("c", choices=["x", "y"])
    expr = "Q: " + g + "\n" + c
    assert tuple(expr) == ("Q: ", g, "\n", c)
    assert tuple(user("hi") + g) == (user("hi"), g)
    with pytest.raises(TypeError):
        g + 3  # noqa: B018


def test_gen_dtype_is_a_regex_and_rejects_bad_input():
    assert gen("n", dtype=int).sampling == {"regex": r"[-+]?[0-9]+"}
    assert gen("n", dtype="bool").sampling == {"regex": "(True|False)"}
    with pytest.raises(ValueError, match=r'gen\("n"\) at .*dtype must be one of'):
        gen("n", dtype=list)
    with pytest.raises(ValueError, match="dtype= cannot be combined with regex="):
        gen("n", dtype=int, regex="[0-9]")


def test_choices_make_a_select_and_reject_bad_input():
    assert gen("c", choices=["a", "b"]).choices == ["a", "b"]
    with pytest.raises(ValueError, match='select\\("c"\\)'):
        select("c", choices=[])
    with pytest.raises(ValueError, match="choices_method"):
        select("c", choices=["a"], choices_method="vote")
    with pytest.raises(ValueError, match="unknown keyword 'max_token'"):
        gen("c", max_token=3)
    assert issubclass(ProgramError, Exception)


def test_greedy_pick_compares_token_by_token():
    assert _greedy_pick([[-1.0, -9.0], [-2.0, -0.1]]) == 0
    assert _greedy_pick([[-1.0, -9.0], [-1.0, -0.1]]) == 1
    assert _greedy_pick([[-1.0], [-1.0, -0.5]]) == 1  # the short one continues at its mean, -1


def test_constant_prefix_stops_at_arguments_and_gen():
    @function
    def prog(s, question, examples=()):
        s += system("Be brief.")
        s += "Examples:\n"
        for e in examples:
            s += e
        s += user(f"Q: {question}")
        s += assistant(gen("a"))

    assert constant_prefix(prog.func, PLAIN) == "System: Be brief.\nExamples:\n"

    @function
    def prog2(s, q):
        s += "Intro. " + q
        s += gen("x")

    assert constant_prefix(prog2.func, PLAIN) == "Intro. "

    @function
    def prog3(s, q):
        s += user("Say hi.")
        s += assistant(gen("x"))

    assert constant_prefix(prog3.func, PLAIN) == "User: Say hi.\nAssistant: "


def test_sglang_names_are_importable_with_sglangs_values():
    import frontend_dsl as sgl
    from frontend_dsl.ir import REGEX_BOOL, REGEX_FLOAT, REGEX_INT, REGEX_STR

    assert (REGEX_INT, REGEX_FLOAT, REGEX_BOOL, REGEX_STR) == (
        r"[-+]?[0-9]+[ \n]*", r"[-+]?[0-9]*\.?[0-9]+[ \n]*", r"(True|False)", r"\"[\w\d\s]*\"")
    for name in ("function", "gen", "gen_int", "gen_string", "select", "system", "user", "assistant",
                 "system_begin", "system_end", "user_begin", "user_end", "assistant_begin",
                 "assistant_end", "set_default_backend", "flush_cache", "get_server_info",
                 "global_config", "RuntimeEndpoint", "OpenAI", "ProgramState", "ProgramStateGroup"):
        assert hasattr(sgl, name), name
    assert sgl.user_begin().role == "user" and sgl.assistant_end().role == "assistant"


def test_gen_takes_sglangs_positional_order():
    g = gen("x", 16, 2, 1, "\n")  # name, max_tokens, min_tokens, n, stop
    assert g.sampling == {"max_new_tokens": 16, "min_new_tokens": 2, "n": 1, "stop": "\n"}
    g = gen("y", return_logprob=True, top_logprobs_num=3, stop_regex="a+")
    assert g.request == {"return_logprob": True, "top_logprobs_num": 3}
    assert g.sampling == {"stop_regex": "a+"}
    from frontend_dsl import gen_int, gen_string

    assert gen_int("n", 4).sampling == {"max_new_tokens": 4, "regex": r"[-+]?[0-9]+"}
    assert gen_string("s").sampling == {"regex": r'"[^"\\\n]*"'}
    assert "test_units.py" in gen_int("n").where
    with pytest.raises(ValueError, match="takes no regex"):
        gen_int("n", regex="1")


def test_bind_and_call_forms():
    import frontend_dsl as sgl

    @sgl.function
    def prog(s, a, b="x"):
        s += a + b

    bound = prog.bind(b="y")
    assert bound.bind_arguments == {"b": "y"} and bound.arg_names == ["a", "b"]
    with pytest.raises(TypeError, match="no argument 'c'"):
        prog.bind(c=1)
    with pytest.raises(RuntimeError, match="no backend"):
        prog(a="hi")  # a direct call is run(): it needs a backend
    # Tracing sees through inline calls of other programs.
    @sgl.function
    def outer(s, q):
        s += "Intro. "
        prog(s, "More. ")
        s += q

    assert constant_prefix(outer.func, PLAIN) == "Intro. More. x"


def test_constant_prefix_includes_the_templates_default_system_turn():
    from frontend_dsl.chat_template import ChatTemplate

    t = ChatTemplate({"system": "<s>", "user": "<u>", "assistant": "<a>"},
                     {"system": "</s>", "user": "</u>", "assistant": "</a>"}, default_system_prompt="Be nice.")

    @function
    def prog(s, q):
        s += user("Hello " + q)

    assert constant_prefix(prog.func, t) == "<s>Be nice.</s><u>Hello "
