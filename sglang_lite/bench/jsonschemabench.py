"""Real-world JSON-schema benchmark (JSONSchemaBench sample): ours vs xgrammar / llguidance.

Driven from `python -m sglang_lite.bench.constraints_mask --schemas DIR --peers xgrammar,llguidance`.

Each engine runs in a fresh worker process (this module with --worker) over every schema in a
fixed order, one thread, no warm-up: first visits of new states count, caches shared across
schemas within the process are allowed. The worker's startup heap (imports, tokenizer) is
frozen out of the garbage collector's reach before the first schema, as a serving process does.
Per schema the worker compiles (timed), walks the constraint with the pseudo-model of
schema_walk (each mask fill timed) and validates the text.
The parent guards each schema with a wall-clock limit: a schema past it (or one that crashes the
worker) is recorded as a failure and a fresh worker resumes at the next schema.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .schema_walk import PseudoModel, SchemaResult, load_schemas, run_schema

_LINE = "@@ "  # worker lines carrying results; anything else a library prints is ignored
_STARTUP_TIMEOUT_S = 300.0
_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def worker_main(engine_name: str, schemas_dir: Path, start: int) -> None:
    """Run one engine over schemas[start:], one result line each (flushed as it finishes)."""
    import torch

    from constraints import TokenizerInfo

    from .constraint_engines import make_engine
    from .tokenizer import load_tokenizer

    torch.set_num_threads(1)
    tokenizer = load_tokenizer()
    info = TokenizerInfo.from_huggingface(tokenizer)
    engine = make_engine(engine_name, tokenizer, info)
    model = PseudoModel(info.token_bytes, info.eos_token_ids)
    schemas = load_schemas(schemas_dir)
    # The startup heap frozen out of the garbage collector's reach, as a serving process does
    # (sglang-lite serve, its compile workers; vLLM, SGLang's /freeze_gc): the same for every
    # engine, whose own objects made later are collected as usual.
    gc.collect()
    gc.freeze()
    print(_LINE + json.dumps({"ready": True}), flush=True)
    for schema in schemas[start:]:
        print(_LINE + json.dumps(asdict(run_schema(engine, schema, model))), flush=True)


def run_engine(engine_name: str, schemas_dir: Path, keys: list[tuple[str, str]],
               schema_timeout_s: float, log_path: Path) -> list[SchemaResult]:
    """All schemas through one engine in worker processes; a stuck or dead worker is replaced."""
    results: list[SchemaResult] = []
    with log_path.open("w") as log:
        while len(results) < len(keys):
            results += _run_worker(engine_name, schemas_dir, keys, len(results),
                                   schema_timeout_s, log)
    return results


def _run_worker(engine_name, schemas_dir, keys, start, schema_timeout_s, log) -> list[SchemaResult]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", RAYON_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(_PROJECT_ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "sglang_lite.bench.jsonschemabench", "--worker", engine_name,
           "--schemas", str(schemas_dir), "--start", str(start)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    lines = _line_queue(proc)
    out: list[SchemaResult] = []
    try:
        if _next_result(lines, _STARTUP_TIMEOUT_S) is None:
            raise RuntimeError(f"{engine_name} worker did not start (see {log.name})")
        while start + len(out) < len(keys):
            split, key = keys[start + len(out)]
            t0 = time.perf_counter()
            row = _next_result(lines, schema_timeout_s)
            if row is None:
                alive = proc.poll() is None
                why = f"over {schema_timeout_s:.0f} s" if alive else f"exit {proc.returncode}"
                out.append(SchemaResult(key, split, False, "timeout" if alive else "crash",
                                        "timeout" if alive else "crash", why,
                                        (time.perf_counter() - t0) * 1e3))
                return out
            out.append(SchemaResult(**row))
    finally:
        proc.kill()
        proc.wait()
    return out


def _line_queue(proc: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            if line.startswith(_LINE):
                lines.put(json.loads(line[len(_LINE):]))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


def _next_result(lines: queue.Queue, timeout_s: float) -> dict | None:
    try:
        return lines.get(timeout=timeout_s)
    except queue.Empty:
        return None


def summarize(results: list[SchemaResult]) -> dict:
    """declared / valid shares, compile and mask percentiles, refusals and errors by type."""
    n = len(results)
    declared = [r for r in results if r.declared]
    valid = sum(r.outcome == "valid" for r in results)
    compile_ms = [r.compile_ms for r in declared]
    mask_us = [t for r in declared for t in r.mask_us]
    return {
        "schemas": n, "declared": len(declared), "valid": valid,
        "declared_pct": _share(len(declared), n), "valid_pct": _share(valid, n),
        "valid_of_declared_pct": _share(valid, len(declared)),
        "compile_ms_p50": _pct(compile_ms, 50), "compile_ms_p90": _pct(compile_ms, 90),
        "mask_us_p50": _pct(mask_us, 50), "mask_us_p99": _pct(mask_us, 99),
        "mask_fills": len(mask_us),
        "outcomes": dict(Counter(r.outcome for r in results).most_common()),
        "refused_by_error": dict(Counter(r.error for r in results if r.outcome == "refused")
                                 .most_common()),
        "refused": sum(r.outcome == "refused" for r in results),
        "errored": sum(r.outcome in ("walk_error", "timeout", "crash") for r in results),
    }


def _share(part: int, whole: int) -> float:
    return 100.0 * part / whole if whole else float("nan")


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def report(by_engine: dict[str, list[SchemaResult]], splits: list[str]) -> dict:
    """{engine: {"overall": summary, "splits": {split: summary}, "rows": [...]}}."""
    out = {}
    for name, results in by_engine.items():
        out[name] = {
            "overall": summarize(results),
            "splits": {s: summarize([r for r in results if r.split == s]) for s in splits},
            "rows": [{k: v for k, v in asdict(r).items() if k != "mask_us"}
                     | {"mask_us_p50": _pct(r.mask_us, 50)} for r in results],
        }
    return out


def print_table(summary: dict) -> None:
    head = (f"{'split':<16}{'engine':<11}{'decl%':>6}{'valid%':>7}{'v/decl%':>8}{'c p50ms':>9}"
            f"{'c p90ms':>9}{'m p50us':>9}{'m p99us':>9}   ours/peer: compile p50, mask p50, p99")
    print(head)
    splits = list(next(iter(summary.values()))["splits"]) + ["overall"]
    for split in splits:
        ours = _split_summary(summary["ours"], split) if "ours" in summary else None
        for name, eng in summary.items():
            s = _split_summary(eng, split)
            line = (f"{split:<16}{name:<11}{s['declared_pct']:>6.0f}{s['valid_pct']:>7.0f}"
                    f"{s['valid_of_declared_pct']:>8.0f}{s['compile_ms_p50']:>9.1f}"
                    f"{s['compile_ms_p90']:>9.1f}{s['mask_us_p50']:>9.1f}{s['mask_us_p99']:>9.1f}")
            if ours is not None and name != "ours":
                line += "   " + ", ".join(_ratio(ours[k], s[k]) for k in _RATIO_KEYS)
            print(line)
    for name, eng in summary.items():
        o = eng["overall"]
        print(f"{name}: refused {o['refused']} "
              f"{o['refused_by_error']}, errored {o['errored']}, outcomes {o['outcomes']}")


_RATIO_KEYS = ("compile_ms_p50", "mask_us_p50", "mask_us_p99")


def ratios(summary: dict) -> dict:
    """{peer: {split | "overall": {metric: ours / peer}}}; above 1 means we are slower."""
    if "ours" not in summary:
        return {}
    splits = [*summary["ours"]["splits"], "overall"]
    return {peer: {split: {k: _ratio_value(_split_summary(summary["ours"], split)[k],
                                           _split_summary(eng, split)[k]) for k in _RATIO_KEYS}
                   for split in splits}
            for peer, eng in summary.items() if peer != "ours"}


def _ratio_value(ours: float, peer: float) -> float:
    return ours / peer if peer > 0 else float("nan")  # nan compares False: no data stays nan


def _ratio(ours: float, peer: float) -> str:
    value = _ratio_value(ours, peer)
    return "-" if np.isnan(value) else f"{value:.2f}x"


def _split_summary(engine_summary: dict, split: str) -> dict:
    return engine_summary["overall"] if split == "overall" else engine_summary["splits"][split]


def run_bench(schemas_dir: Path, peers: list[str], out: Path, schema_timeout_s: float) -> dict:
    from .constraint_engines import PEERS, peer_installed

    schemas = load_schemas(schemas_dir)
    keys = [(s.split, s.key) for s in schemas]
    splits = list(dict.fromkeys(s.split for s in schemas))
    engines = ["ours"]
    for peer in peers:
        if peer not in PEERS:
            raise SystemExit(f"--peers: unknown peer {peer!r} (known: {', '.join(PEERS)})")
        if peer_installed(peer):
            engines.append(peer)
        else:
            print(f"note: {peer} is not installed, skipped (pip install sglang-lite[peers])")
    out.parent.mkdir(parents=True, exist_ok=True)
    by_engine, wall = {}, {}
    for name in engines:
        t0 = time.perf_counter()
        by_engine[name] = run_engine(name, schemas_dir, keys, schema_timeout_s,
                                     out.with_suffix(f".{name}.log"))
        wall[name] = time.perf_counter() - t0
        print(f"{name}: {len(schemas)} schemas in {wall[name]:.0f} s", flush=True)
    summary = report(by_engine, splits)
    print_table(summary)
    result = {"data": str(schemas_dir), "tokenizer": "SmolLM2-135M-Instruct", "threads": 1,
              "max_tokens": 384, "schema_timeout_s": schema_timeout_s, "wall_s": wall,
              "ours_over_peer": ratios(summary), "engines": summary}
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description="jsonschemabench worker (one engine)")
    parser.add_argument("--worker", required=True, choices=["ours", "xgrammar", "llguidance"])
    parser.add_argument("--schemas", required=True, type=Path)
    parser.add_argument("--start", type=int, default=0)
    args = parser.parse_args()
    worker_main(args.worker, args.schemas, args.start)


if __name__ == "__main__":
    main()
