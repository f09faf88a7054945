"""JSONSchemaBench dev sample (240 real-world schemas, 8 splits) against the committed baseline.

Per split: how many schemas our compiler declares (compiles) and how many whose model-free walk
(the benchmark's own, sglang_lite/bench/schema_walk.py) validates. A lower count in any split
fails; so does any complete output that does not validate (an under-constraint). Set
CONSTRAINTS_UPDATE_BASELINE=1 to rewrite the baseline after an intended improvement.

Compiles are capped per schema. The baseline is written with a cap 2.5x shorter than the check
uses, so a machine up to 2.5x slower (or busier) than the one that wrote it still declares every
schema the baseline counts. Runtime here: 75-95 s of CPU, 110 s wall on the 2 shared cores when
quiet, nearly 4 min when other sessions load them.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from sglang_lite.bench.constraint_engines import OursEngine
from sglang_lite.bench.schema_walk import PseudoModel, SchemaResult, load_schemas, run_schema

DATA = Path(__file__).resolve().parents[3] / "shared/data/jsonschemabench-dev"
BASELINE = Path(__file__).with_name("baseline_jsonschemabench.json")
CHECK_TIMEOUT_S = 1.5
BASELINE_TIMEOUT_S = 0.6
UNDER_CONSTRAINED = ("invalid", "unparsable")


@pytest.fixture(scope="module")
def results(tokenizer_info) -> list[SchemaResult]:
    if not DATA.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{DATA} is missing: CI must provide the JSONSchemaBench dev sample")
        pytest.skip(f"{DATA} not present")
    update = os.environ.get("CONSTRAINTS_UPDATE_BASELINE") == "1"
    engine = OursEngine(tokenizer_info, BASELINE_TIMEOUT_S if update else CHECK_TIMEOUT_S)
    model = PseudoModel(tokenizer_info.token_bytes, tokenizer_info.eos_token_ids)
    rows = [run_schema(engine, schema, model) for schema in load_schemas(DATA)]
    if update:
        BASELINE.write_text(json.dumps({
            "data": DATA.name, "compile_timeout_s": BASELINE_TIMEOUT_S,
            "splits": split_counts(rows),
            "outcomes": dict(sorted(Counter(r.outcome for r in rows).items())),
        }, indent=1) + "\n")
    return rows


def split_counts(rows: list[SchemaResult]) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        c = counts.setdefault(r.split, {"schemas": 0, "declared": 0, "valid": 0})
        c["schemas"] += 1
        c["declared"] += r.declared
        c["valid"] += r.outcome == "valid"
    return counts


def test_no_output_is_under_constrained(results):
    bad = [f"{r.key} ({r.outcome})" for r in results if r.outcome in UNDER_CONSTRAINED]
    assert not bad, f"complete outputs that do not validate against their schema: {bad}"


def test_no_split_regresses(results):
    baseline = json.loads(BASELINE.read_text())["splits"]
    now = split_counts(results)
    missing = sorted(set(now) - set(baseline))
    assert not missing, f"splits not in {BASELINE.name} (rerun with CONSTRAINTS_UPDATE_BASELINE=1): {missing}"
    worse = {f"{split}.{k}": (baseline[split][k], c[k]) for split, c in now.items()
             for k in ("declared", "valid") if c[k] < baseline[split][k]}
    assert not worse, f"counts fell below the baseline (baseline, now): {worse}"


def test_outputs_are_checked_where_re_cannot_read_the_pattern():
    r"""The walk's validation (validate_text) reads a ``pattern`` with ``\p{...}`` classes, which
    Python's ``re`` rejects, through ``regex`` instead of counting a validator error: such an
    output is checked, a match is valid and a mismatch invalid (in ``pattern`` and in
    ``patternProperties`` names); a pattern both fail on stays a validator error."""
    from sglang_lite.bench.schema_walk import validate_text

    schema = json.dumps({"type": "object",
                         "properties": {"orb": {"type": "string", "pattern": r"^[a-z]+@(dev:[^\s\p{Cc}]+|\d+)$"}},
                         "patternProperties": {r"^\p{Lu}": {"type": "integer"}}})
    assert validate_text(schema, json.dumps({"orb": "abc@dev:x1", "Ab": 3})) == "valid"
    assert validate_text(schema, json.dumps({"orb": "abc@dev:x\u0007"})) == "invalid"  # a Cc character
    assert validate_text(schema, json.dumps({"orb": "abc@12", "Ab": "x"})) == "invalid"  # \p{Lu} names
    assert validate_text(schema, json.dumps({"orb": "abc@12", "ab": "x"})) == "valid"
    broken = json.dumps({"type": "string", "pattern": "(unclosed"})
    assert validate_text(broken, json.dumps("x")) == "validator_error"
