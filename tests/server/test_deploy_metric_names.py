"""Every metric the Grafana dashboard, the alert rules and the autoscaler query exists: in a live
server's /metrics (after a request, so histograms have samples) or in a live router's, or is a
recording rule of the rule file itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import yaml

from tests.router.conftest import router

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
_METRIC = re.compile(r"\b(sglang_lite(?:_router)?:[A-Za-z0-9_:]+)")


def _sample_names(text: str) -> set[str]:
    return {line.split("{", 1)[0].split(" ", 1)[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def _queried() -> dict[str, set[str]]:
    dash = json.loads((DEPLOY / "monitoring" / "grafana-dashboard.json").read_text())
    exprs = {"dashboard": [t["expr"] for p in dash["panels"] for t in p["targets"]]
             + [v["definition"] for v in dash["templating"]["list"] if "definition" in v]}
    rules = yaml.safe_load((DEPLOY / "monitoring" / "alerts.yaml").read_text())
    exprs["alerts"] = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    scaled = yaml.safe_load((DEPLOY / "k8s" / "base" / "scaledobject.yaml").read_text())
    exprs["autoscaler"] = [t["metadata"]["query"] for t in scaled["spec"]["triggers"]]
    return {where: {m for e in es for m in _METRIC.findall(e)} for where, es in exprs.items()}


def test_every_queried_metric_exists(server, http):
    # one constrained request: TTFT, inter-token and grammar-compile histograms get samples
    body = {"prompt": "A number:", "max_tokens": 4, "regex": "[0-9]{4}"}
    assert http.post("/v1/completions", json=body).status_code == 200
    names = _sample_names(http.get("/metrics").text)
    with router([server.base_url], "cache_aware") as r:
        assert httpx.post(r.base_url + "/v1/completions", json={**body, "stream": True},
                          timeout=120).status_code == 200
        names |= _sample_names(httpx.get(r.base_url + "/metrics").text)
    rules = yaml.safe_load((DEPLOY / "monitoring" / "alerts.yaml").read_text())
    recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
    queried = _queried()
    assert all(queried.values()), queried
    missing = {where: sorted(ms - names - recorded) for where, ms in queried.items() if ms - names - recorded}
    assert not missing, missing
    assert "sglang_lite:time_to_first_token_seconds_bucket" in queried["dashboard"]
    assert "sglang_lite_router:cache_affinity_hit_rate" in queried["dashboard"]
