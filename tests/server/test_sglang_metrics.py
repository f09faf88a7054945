"""/metrics also under SGLang's names (``sglang:`` prefix, label ``model_name``), with the
same values as ours, so SGLang's dashboards and alerts read this server unchanged."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.server.conftest import wait_idle

# Names SGLang's collectors export (python/sglang/srt/metrics/collector.py) that we serve.
SGLANG_COUNTERS = ["prompt_tokens", "generation_tokens", "cached_tokens", "num_requests",
                   "num_aborted_requests"]
SGLANG_GAUGES = ["num_running_reqs", "num_queue_reqs", "token_usage", "cache_hit_rate",
                 "gen_throughput", "num_used_tokens", "max_total_num_tokens"]
SGLANG_HISTOGRAMS = ["time_to_first_token_seconds", "inter_token_latency_seconds",
                     "e2e_request_latency_seconds", "grammar_compilation_time_seconds"]


def _families(http) -> dict:
    return {f.name: f for f in text_string_to_metric_families(http.get("/metrics").text)}


def _value(families, name: str, suffix: str = "") -> float:
    family = families[name]
    return next(s.value for s in family.samples if s.name == name + suffix)


def test_sglang_names_labels_and_values(http, client, model_name, engine):
    client.completions.create(model=model_name, prompt="Metrics, please:", max_tokens=3,
                              extra_body={"regex": "[a-z]{3}"})
    wait_idle(http)
    before = _families(http)
    r = client.completions.create(model=model_name, prompt="Count to three:", max_tokens=4,
                                  extra_body={"ignore_eos": True})
    wait_idle(http)
    fams = _families(http)
    for name in SGLANG_COUNTERS + SGLANG_GAUGES + SGLANG_HISTOGRAMS:
        family = fams.get("sglang:" + name)
        assert family is not None, name
        assert all(s.labels.get("model_name") == model_name for s in family.samples), name
    for name in ("prompt_tokens", "generation_tokens", "num_requests"):
        ours, theirs = "sglang_lite:" + name, "sglang:" + name
        assert _value(fams, theirs, "_total") == _value(fams, ours, "_total")
    assert (_value(fams, "sglang:prompt_tokens", "_total") - _value(before, "sglang:prompt_tokens", "_total")
            == r.usage.prompt_tokens)
    assert (_value(fams, "sglang:generation_tokens", "_total")
            - _value(before, "sglang:generation_tokens", "_total") == 4)
    assert (_value(fams, "sglang:time_to_first_token_seconds", "_count")
            - _value(before, "sglang:time_to_first_token_seconds", "_count") == 1)
    assert _value(fams, "sglang:grammar_compilation_time_seconds", "_count") >= 1
    assert _value(fams, "sglang:max_total_num_tokens") == (
        engine.get_stats()["num_usable_pages"] * engine.config.page_size)
    assert _value(fams, "sglang:num_running_reqs") == 0
    assert "sglang:num_rejected_requests" not in fams  # ours only: SGLang has no such metric
