"""Achieved memory bandwidth of paged decode attention (GPU): ``python -m sglang_lite_kernels.bench_decode``.

Bytes counted are the K and V rows each step must read (``batch * context * kv_heads *
head_dim * 2 * itemsize``); the page table and q/o are small beside them. Pages are placed in
a random order, as a long-running pool leaves them. Compare against a measured device copy.
``ms`` times CUDA-graph replays of the call (as the engine runs decode); ``ms_eager`` times
plain calls, launcher overhead included.
"""

from __future__ import annotations

import json

import torch

from sglang_lite_kernels.decode_attention import decode_attention


def _graphed(fn):
    """``fn`` captured in a CUDA graph -> its replay, or None where capture fails.

    The engine replays decode in CUDA graphs; timing replays measures the kernels, not the
    launcher's Python checks and allocations (tens of microseconds, as long as a small call).
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(stream):
            fn()  # warm-up on a side stream, as torch.cuda.graph recommends
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    except RuntimeError:
        torch.cuda.synchronize()
        return None
    return graph.replay


def _time_ms(fn, iters: int = 50) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def copy_bandwidth_gbps(num_bytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth (read + write bytes per second), GB/s."""
    src = torch.empty(num_bytes // 2, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(src)
    return 2 * num_bytes / _time_ms(lambda: dst.copy_(src)) / 1e6


def decode_bandwidth(batch: int, context: int, num_heads: int = 32, num_kv_heads: int = 8,
                     head_dim: int = 64, page_size: int = 16, dtype=torch.bfloat16) -> dict:
    """Time one decode-attention call over ``batch`` requests of ``context`` tokens."""
    pages_per_req = context // page_size
    num_pages = batch * pages_per_req + 1
    order = torch.randperm(num_pages - 1, device="cuda") + 1  # page 0 reserved
    pages = order.view(batch, pages_per_req)  # [B, P]
    offsets = torch.arange(page_size, device="cuda")
    req_to_token = (pages[:, :, None] * page_size + offsets).reshape(batch, context).to(torch.int32)
    k_buf = torch.randn(num_pages * page_size, num_kv_heads, head_dim, device="cuda", dtype=dtype)
    v_buf = torch.randn_like(k_buf)
    q = torch.randn(batch, num_heads, head_dim, device="cuda", dtype=dtype)
    rows = torch.arange(batch, device="cuda")
    seq_lens = torch.full((batch,), context, device="cuda")
    def step():
        decode_attention(q, k_buf, v_buf, req_to_token, rows, seq_lens, head_dim**-0.5)

    ms_eager = _time_ms(step)
    replay = _graphed(step)
    ms = _time_ms(replay) if replay is not None else ms_eager
    kv_bytes = 2 * batch * context * num_kv_heads * head_dim * k_buf.element_size()
    return dict(batch=batch, context=context, num_heads=num_heads, num_kv_heads=num_kv_heads,
                head_dim=head_dim, ms=ms, gbps=kv_bytes / ms / 1e6, ms_eager=ms_eager,
                timing="cuda_graph" if replay is not None else "eager")


def main() -> None:
    copy = copy_bandwidth_gbps()
    rows = [decode_bandwidth(b, ctx) for b, ctx in [(1, 4096), (8, 4096), (32, 4096), (64, 8192), (1, 32768)]]
    for r in rows:
        r["fraction_of_copy"] = r["gbps"] / copy
        print(f"B={r['batch']:3d} ctx={r['context']:6d}  {r['ms']:.3f} ms  {r['gbps']:7.0f} GB/s  "
              f"{100 * r['fraction_of_copy']:.0f}% of copy ({copy:.0f} GB/s)")
    print(json.dumps(dict(copy_gbps=copy, decode=rows)))


if __name__ == "__main__":
    main()
