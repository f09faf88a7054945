"""Turns a scheduled batch into tensors, runs the model through the attention backend,
and returns logits."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable

import torch

from sglang_lite.attention.base import AttentionBackend, ForwardBatch, ForwardMode
from sglang_lite.compiled_decode import CompiledDecode
from sglang_lite.cuda_graph import CudaGraphRunner, capture_batch_sizes
from sglang_lite.mem.req_to_token import ReqToTokenPool
from sglang_lite.model.batch_invariant import BatchInvariantMode
from sglang_lite.request import Req
from sglang_lite.scheduled_batch import ScheduledBatch


class ModelRunner:
    def __init__(self, model: torch.nn.Module, backend: AttentionBackend, req_pool: ReqToTokenPool,
                 device: torch.device, cuda_graph_max_bs: int = 0, deterministic: bool = False,
                 compile_decode_max_bs: int = 0):
        self.model = model
        self.backend = backend
        # deterministic: every forward inside BatchInvariantMode (fixed-shape matmuls)
        self._numerics = BatchInvariantMode if deterministic else contextlib.nullcontext
        self.req_pool = req_pool
        self.device = device
        self.graph_runner = None  # decode batches up to cuda_graph_max_bs replay captured graphs
        # CPU decode batches up to compile_decode_max_bs rows run through torch.compile
        self.compiled = CompiledDecode(model, backend, compile_decode_max_bs) if compile_decode_max_bs else None
        if cuda_graph_max_bs > 0:
            self.graph_runner = CudaGraphRunner(model, backend, req_pool, device,
                                                capture_batch_sizes(cuda_graph_max_bs))

    def build_forward_batch(self, batch: ScheduledBatch) -> tuple[ForwardBatch, list[list[int]]]:
        """The step's tensors, and for each request the input positions whose logits are
        wanted for input logprobs (their rows come before the request's last row)."""
        ids, positions, logit_rows, lp_positions = [], [], [], []
        prefix_lens = [r.kv_len for r in batch.reqs]
        for req, n, start in zip(batch.reqs, batch.extend_lens, prefix_lens):
            row0 = len(ids)
            ids.extend(req.tokens(start, start + n))
            positions.extend(range(start, start + n))
            wanted = req.input_logprob_positions(start, n)
            lp_positions.append(wanted)
            logit_rows.extend(row0 + p - start for p in wanted)
            logit_rows.append(row0 + n - 1)
        extend = torch.tensor(batch.extend_lens, dtype=torch.int64)
        start_loc = torch.cumsum(extend, 0) - extend
        seq_lens = [p + n for p, n in zip(prefix_lens, batch.extend_lens)]
        rows = [r.req_pool_idx for r in batch.reqs]
        dev = self.device

        def to_dev(x):
            return torch.as_tensor(x, dtype=torch.int64).to(dev, non_blocking=True)

        fb = ForwardBatch(
            mode=ForwardMode.DECODE if batch.is_decode else ForwardMode.EXTEND,
            input_ids=to_dev(ids),
            positions=to_dev(positions),
            out_cache_loc=to_dev(torch.cat(batch.slots)),
            req_pool_indices=to_dev(rows),
            seq_lens=to_dev(seq_lens),
            prefix_lens=to_dev(prefix_lens),
            extend_lens=to_dev(extend),
            extend_start_loc=to_dev(start_loc),
            logits_indices=to_dev(logit_rows),
            req_to_token=self.req_pool.req_to_token,
            seq_lens_cpu=seq_lens,
            prefix_lens_cpu=prefix_lens,
            extend_lens_cpu=list(batch.extend_lens),
            req_pool_indices_cpu=rows,
        )
        return fb, lp_positions

    @torch.inference_mode()
    def forward(self, batch: ScheduledBatch) -> torch.Tensor:
        """Logits [B, vocab] fp32 at each request's last new token. Input logprobs asked
        for by requests are recorded on them (``req.input_logprobs``) on the way."""
        if self.graph_runner is not None and self.graph_runner.can_run(batch):
            return self.graph_runner.forward(batch)
        fb, lp_positions = self.build_forward_batch(batch)
        logits = self.run_model(fb)  # [rows, vocab]
        if not any(lp_positions):
            return logits
        last_rows, row = [], 0
        for req, wanted in zip(batch.reqs, lp_positions):
            if wanted:
                _record_input_logprobs(req, wanted, logits[row : row + len(wanted)])
            row += len(wanted)
            last_rows.append(row)
            row += 1
        return logits[last_rows]

    @torch.inference_mode()
    def decode_steps(self, batch: ScheduledBatch, sample_next: Callable[[torch.Tensor], torch.Tensor]
                     ) -> list[list[int]]:
        """Run ``batch.num_steps`` decode steps back to back: each step's sampled tokens are
        the next step's inputs without leaving the device, and the host syncs once, at the
        end. ``sample_next(logits [B, V]) -> ids [B]`` samples one step. Returns each
        request's ``num_steps`` sampled tokens."""
        if self.graph_runner is not None and self.graph_runner.can_run(batch):
            return self.graph_runner.decode_steps(batch, sample_next)
        steps = batch.num_steps
        slots = torch.stack(batch.slots, 1).to(self.device, non_blocking=True)  # [steps, B]
        fb, _ = self.build_forward_batch(ScheduledBatch(batch.reqs, batch.extend_lens,
                                                        [s[:1] for s in batch.slots]))
        out = torch.empty((steps, len(batch.reqs)), dtype=torch.int64, device=self.device)
        for i in range(steps):
            if i:
                fb = _next_decode_step(fb, out[i - 1], slots[i])
            out[i] = sample_next(self.run_model(fb))
        return out.T.tolist()

    def run_model(self, fb: ForwardBatch) -> torch.Tensor:
        """One forward of the model over ``fb``: logits [rows, vocab] fp32. The tensor-parallel
        runner (parallel/runner.py) hooks here to send the plan to its workers first."""
        self.backend.init_forward_metadata(fb)
        with self._numerics():
            if self.compiled is not None and self.compiled.can_run(fb):
                return self.compiled(fb)
            return self.model(fb, self.backend)


def _next_decode_step(fb: ForwardBatch, input_ids: torch.Tensor, out_cache_loc: torch.Tensor) -> ForwardBatch:
    """The decode step after ``fb``: every request one position further."""
    return dataclasses.replace(
        fb, input_ids=input_ids, positions=fb.positions + 1, out_cache_loc=out_cache_loc,
        seq_lens=fb.seq_lens + 1, prefix_lens=fb.prefix_lens + 1,
        seq_lens_cpu=[n + 1 for n in fb.seq_lens_cpu], prefix_lens_cpu=[n + 1 for n in fb.prefix_lens_cpu])


def _record_input_logprobs(req: Req, positions: list[int], logits: torch.Tensor) -> None:
    # logits[i] scores the prompt token after positions[i]. A request recomputed after a
    # retraction passes its positions again: only new ones are recorded.
    first = max(req.logprob_start_len, 1) - 1
    new = [i for i, p in enumerate(positions) if p - first >= len(req.input_logprobs)]
    if not new:
        return
    positions, logits = [positions[i] for i in new], logits[new[0] : new[-1] + 1]
    targets = torch.tensor([req.origin_input_ids[p + 1] for p in positions], device=logits.device)
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    lps = logprobs.gather(1, targets[:, None]).squeeze(1).tolist()
    req.input_logprobs.extend(zip(lps, targets.tolist()))
    if req.top_logprobs_num:
        vals, ids = logprobs.topk(req.top_logprobs_num, dim=-1)
        req.input_top_logprobs.extend(list(zip(v, i)) for v, i in zip(vals.tolist(), ids.tolist()))
