"""stop_regex: the leftmost match, and how far a stream must hold back (partial matches)."""

from __future__ import annotations

import pytest

from sglang_lite.sampling_params import SamplingParams
from sglang_lite.stop_regex import first_match, hold_from


@pytest.mark.parametrize("patterns,text,expected", [
    ([r"\d+\."], "abc 12. def", (4, "12.")),
    ([r"\d+\.", "de"], "abc 12. def", (4, "12.")),
    (["de", r"\d+\."], "abc de 12.", (4, "de")),
    ([r"x{2}"], "abc", None),
])
def test_first_match_is_leftmost(patterns, text, expected):
    assert first_match(patterns, text) == expected


@pytest.mark.parametrize("patterns,text,start,expected", [
    ([r"END\d"], "hello EN", 0, 6),  # "EN" may become END<digit>
    ([r"END\d"], "hello END", 0, 6),
    ([r"END\d"], "hello", 0, 5),  # nothing can start a match yet
    ([r"END\d", r"!!"], "hello EN!", 0, 8),  # "EN!" cannot become END<digit>; "!" may become "!!"
    ([r"END\d"], "ENhello", 2, 7),  # only from start on
])
def test_hold_from_partial_matches(patterns, text, start, expected):
    assert hold_from(patterns, text, start) == expected


@pytest.mark.parametrize("params", [
    {"stop_regex": "(open"}, {"stop_regex": "a*"}, {"stop_regex": [""]}, {"stop_regex": 5},
    {"stop_regex": ["a"] * 17},
])
def test_bad_stop_regex_names_the_field(params):
    with pytest.raises(ValueError, match="stop_regex"):
        SamplingParams.from_dict(params)


@pytest.mark.parametrize("params,field", [
    ({"choices": []}, "choices"), ({"choices": ["a", ""]}, "choices"), ({"choices": "ab"}, "choices"),
    ({"choices": ["a"], "regex": "a"}, "choices"),
])
def test_bad_choices_name_the_field(params, field):
    with pytest.raises(ValueError, match=field):
        SamplingParams.from_dict(params)


def test_normalized():
    p = SamplingParams.from_dict({"stop_regex": r"\d", "choices": ["x", "y"]})
    assert p.stop_regex == [r"\d"] and p.constraint == ("choices", ["x", "y"])
