"""The GPU benchmark's report: the phases' figures summed up against the issue's targets,
and the table printed at the end."""

from __future__ import annotations

from sglang_lite.bench.gpu_common import MODELS, TARGET_MODEL, preset


def get(d: dict, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def summary(report: dict) -> dict:
    p = report["phases"]
    out: dict = {"throughput": {}, "batch1_ms_per_token": {}}
    for name in MODELS:
        ours = get(p, f"engine:{name}", "throughput", "tok_per_s")
        static = get(p, f"hf:{name}", "static", "tok_per_s")
        cont = get(p, f"hf:{name}", "continuous", "tok_per_s")
        if ours or static or cont:
            out["throughput"][name] = {"sglang-lite": ours, "hf-static-b64": static, "hf-continuous": cont,
                                       "sglang-lite-one-step": get(p, f"engine:{name}", "throughput_one_step",
                                                                    "tok_per_s"),
                                       "x_hf_continuous": ours / cont if ours and cont else None,
                                       "x_hf_static": ours / static if ours and static else None}
        b1 = {"sglang-lite": get(p, f"engine:{name}", "batch1", "ms_per_token"),
              "sglang-lite-one-step": get(p, f"engine:{name}", "batch1_one_step", "ms_per_token"),
              "hf": get(p, f"hf:{name}", "batch1", "ms_per_token")}
        if any(b1.values()):
            out["batch1_ms_per_token"][name] = b1
    copy = get(p, "kernel", "copy_gbps")
    if copy:
        weights = preset(TARGET_MODEL).num_params() * 2
        out["batch1_floor_ms"] = {TARGET_MODEL: 1000 * weights / (copy * 1e9)}
    out["decode_attention_fraction_of_copy"] = get(p, "kernel", "best_fraction_4k_plus")
    out["parity"] = {k: get(p, "parity", k, "token_agreement")
                     for k in ("triton+graphs", "triton-eager", "triton+graphs one-step", "runs_vs_one_step")}
    t = out["throughput"].get(TARGET_MODEL, {})
    b1 = out["batch1_ms_per_token"].get(TARGET_MODEL, {}).get("sglang-lite")
    frac = out["decode_attention_fraction_of_copy"]
    out["targets"] = {
        "throughput >= 10x hf continuous": None if not t.get("x_hf_continuous") else t["x_hf_continuous"] >= 10,
        "batch-1 decode <= 0.75 ms/token": None if b1 is None else b1 <= 0.75,
        "decode attention >= 70% of copy": None if frac is None else frac >= 0.7,
    }
    return out


def render_table(report: dict) -> str:
    s = report["summary"]
    lines = [f"GPU bench ({report['mode']}): {report['machine'].get('gpu')}, "
             f"{report['workload']['n']} requests, prompts {report['workload']['prompt']}, "
             f"outputs {report['workload']['output']}, {report['total_seconds']:.0f}s total", ""]

    def num(x, fmt="{:,.0f}"):
        return fmt.format(x) if isinstance(x, (int, float)) else "-"

    lines.append(f"{'model':<14}{'sglang-lite':>13}{'1-step':>9}{'hf static':>11}{'hf cont.':>10}{'x cont.':>9}"
                 f"{'b1 ms/tok':>11}{'1-step':>8}{'hf b1':>8}")
    for name in MODELS:
        t = s["throughput"].get(name, {})
        b = s["batch1_ms_per_token"].get(name, {})
        if not t and not b:
            continue
        lines.append(f"{name:<14}{num(t.get('sglang-lite')):>13}{num(t.get('sglang-lite-one-step')):>9}"
                     f"{num(t.get('hf-static-b64')):>11}"
                     f"{num(t.get('hf-continuous')):>10}{num(t.get('x_hf_continuous'), '{:.1f}x'):>9}"
                     f"{num(b.get('sglang-lite'), '{:.3f}'):>11}{num(b.get('sglang-lite-one-step'), '{:.3f}'):>8}"
                     f"{num(b.get('hf'), '{:.1f}'):>8}")
    floor = s.get("batch1_floor_ms", {}).get(TARGET_MODEL)
    lines.append(f"batch-1 floor ({TARGET_MODEL}): {num(floor, '{:.3f}')} ms/token")
    lines.append(f"decode attention, best at 4k+ context: {num(s['decode_attention_fraction_of_copy'], '{:.0%}')}"
                 f" of copy ({num(get(report['phases'], 'kernel', 'copy_gbps'))} GB/s)")
    lines.append("greedy parity vs torch backend (bf16 token agreement): " + ", ".join(
        f"{k} {num(v, '{:.1%}')}" for k, v in s["parity"].items()))
    for k, v in s["targets"].items():
        lines.append(f"target {k}: {'-' if v is None else ('MET' if v else 'missed')}")
    for key, data in report["phases"].items():
        errs = [f"{key}: {data['error']}"] if "error" in data else []
        errs += [f"{key}/{k}: {v['error']}" for k, v in data.items() if isinstance(v, dict) and "error" in v]
        lines += [f"ERROR {e}" for e in errs]
    return "\n".join(lines)
