"""The server's metrics under SGLang's own names too (``sglang:`` prefix, label
``model_name``), so SGLang's Grafana dashboards and alert rules read this server unchanged.

A view, not a second set of counters: at scrape time it renames the samples of the app's
registry (``sglang_lite:X`` -> ``sglang:X``, with SGLang's spelling where ours differs), so
both names always carry the same values.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric

OURS, SGLANG = "sglang_lite:", "sglang:"
# Our base name -> SGLang's, where they differ; metrics SGLang has no name for stay ours only.
_RENAMED = {"grammar_compile_seconds": "grammar_compilation_time_seconds"}
_OURS_ONLY = {"num_rejected_requests", "num_used_pages"}


class SGLangNames:
    """A collector: every metric of ``source`` (except ours-only ones) under SGLang's name."""

    def __init__(self, source: CollectorRegistry):
        self.source = source

    def collect(self):
        for family in self.source.collect():
            if not family.name.startswith(OURS):
                continue
            base = family.name.removeprefix(OURS)
            if base in _OURS_ONLY:
                continue
            name = SGLANG + _RENAMED.get(base, base)
            mirrored = Metric(name, family.documentation, family.type, family.unit)
            for sample in family.samples:
                suffix = sample.name.removeprefix(family.name)
                mirrored.add_sample(name + suffix, sample.labels, sample.value, sample.timestamp,
                                    sample.exemplar)
            yield mirrored


def sglang_registry(source: CollectorRegistry) -> CollectorRegistry:
    """A registry exposing ``source`` under SGLang's names (render both for one scrape)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SGLangNames(source))
    return registry
