"""Req's derived token lists: built once per sequence length, not on every access."""

from __future__ import annotations

from sglang_lite.request import Req
from sglang_lite.sampling_params import SamplingParams


def test_fill_ids_and_cache_ids_are_built_once_per_length():
    req = Req("r", [1, 2, 3], SamplingParams(), seed=0, on_output=None, cache_salt="s")
    fill, keyed = req.fill_ids, req.cache_ids
    assert fill == [1, 2, 3] and keyed == [("s", 1), 2, 3]
    assert req.fill_ids is fill and req.cache_ids is keyed  # a waiting request: no new lists
    req.output_ids.append(4)
    assert req.fill_ids == [1, 2, 3, 4] and req.fill_ids is not fill
    assert req.cache_ids == [("s", 1), 2, 3, 4]
    assert req.tokens(2, 4) == [3, 4]


def test_without_a_salt_cache_ids_are_the_fill_ids():
    req = Req("r", [5, 6], SamplingParams(), seed=0, on_output=None)
    assert req.cache_ids is req.fill_ids == [5, 6]
