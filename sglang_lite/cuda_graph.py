"""CUDA graphs for decode steps: one captured forward per batch size in a fixed set.

A decode step of B requests runs the graph of the smallest captured size >= B. Its inputs
live in static device buffers that each step overwrites with one pinned, non-blocking copy;
rows past B are padding: they read token 0 at position 0, write their k/v into slot 0 (the
reserved page 0 of the KV pool, never handed out), attend to one token, and their logits are
dropped. All captures share one memory pool, largest first, so the smaller graphs reuse the
larger ones' scratch memory.

Nothing in a replay depends on host values of the batch: the attention backend takes
``seq_lens`` from device memory and a kv-split count fixed per captured size, so the
longest context in the batch never reaches the host.

Continuous decoding (``decode_steps``) replays a graph several times in a row: between two
replays, the sampled tokens and the next step's slots are copied into the static buffers and
positions advance, all on the device, so the host enqueues every step without waiting and
syncs once at the end.

Without CUDA (``use_graphs=False``) the same padded, static-buffer path runs eagerly: that
is how its padding logic is tested on CPU.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from sglang_lite.attention.base import AttentionBackend, ForwardBatch, ForwardMode
from sglang_lite.config import MAX_CONTINUOUS_DECODE_STEPS
from sglang_lite.mem.req_to_token import ReqToTokenPool

if TYPE_CHECKING:
    from sglang_lite.request import Req
    from sglang_lite.scheduled_batch import ScheduledBatch

# Rows of the packed input buffer [NUM_ROWS, max_bs], and what a padding row holds in each.
INPUT_IDS, POSITIONS, OUT_CACHE_LOC, REQ_POOL_INDICES, SEQ_LENS, PREFIX_LENS = range(6)
NUM_ROWS = 6
PAD_VALUES = (0, 0, 0, 0, 1, 0)  # slot 0 = reserved page 0; seq_len 1 reads one valid slot


def capture_batch_sizes(max_bs: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 8 up to ``max_bs`` (and ``max_bs`` itself):
    padding wastes at most 7 rows past 8, under 1/3 of the batch."""
    if max_bs < 1:
        raise ValueError(f"cuda_graph_max_bs: must be >= 1, got {max_bs}")
    sizes = {s for s in (1, 2, 4, 8) if s <= max_bs} | set(range(16, max_bs + 1, 8)) | {max_bs}
    return sorted(sizes)


def padded_batch_size(batch_size: int, sizes: list[int]) -> int | None:
    """The smallest captured size >= ``batch_size``; None if the batch is too large."""
    i = bisect_left(sizes, batch_size)
    return sizes[i] if i < len(sizes) else None


def _token_at(req: Req, pos: int) -> int:
    # fill_ids would concatenate the whole sequence; a decode step needs one token.
    n = len(req.origin_input_ids)
    return req.origin_input_ids[pos] if pos < n else req.output_ids[pos - n]


def fill_decode_inputs(host: torch.Tensor, batch: ScheduledBatch, padded_bs: int) -> None:
    """Write a decode batch into ``host`` [NUM_ROWS, >= padded_bs] int64, padding rows after it."""
    bs = len(batch.reqs)
    kv_lens = [r.kv_len for r in batch.reqs]
    rows = torch.tensor([
        [_token_at(r, p) for r, p in zip(batch.reqs, kv_lens)],
        kv_lens,
        [0] * bs,  # slots, filled below from the scheduler's tensors
        [r.req_pool_idx for r in batch.reqs],
        [p + 1 for p in kv_lens],
        kv_lens,
    ], dtype=torch.int64)
    rows[OUT_CACHE_LOC] = torch.stack([s[0] for s in batch.slots]).to(torch.int64)  # first step's
    host[:, :bs] = rows
    for row, value in enumerate(PAD_VALUES):
        host[row, bs:padded_bs] = value


class CudaGraphRunner:
    """Runs decode batches of up to ``max_bs`` requests through captured graphs.

    ``model(forward_batch, backend) -> logits [B, V]``; the backend must declare
    ``supports_cuda_graph`` (its decode launch has no host-dependent shapes and no syncs).
    """

    def __init__(self, model: torch.nn.Module, backend: AttentionBackend, req_pool: ReqToTokenPool,
                 device: torch.device, batch_sizes: list[int], use_graphs: bool = True):
        if use_graphs and not getattr(backend, "supports_cuda_graph", False):
            raise ValueError(f"cuda graphs: the {type(backend).__name__} cannot be captured "
                             "(use attention_backend='triton' or disable_cuda_graph=True)")
        if use_graphs and torch.device(device).type != "cuda":
            raise ValueError(f"cuda graphs: need a CUDA device, got {device}")
        self.model = model
        self.backend = backend
        self.req_pool = req_pool
        self.device = torch.device(device)
        self.batch_sizes = sorted(batch_sizes)
        self.max_bs = self.batch_sizes[-1]
        self.use_graphs = use_graphs
        pin = self.device.type == "cuda"
        with torch.inference_mode():
            self._host = torch.zeros((NUM_ROWS, self.max_bs), dtype=torch.int64, pin_memory=pin)
            self._inputs = torch.zeros((NUM_ROWS, self.max_bs), dtype=torch.int64, device=self.device)
            self._host_slots = torch.zeros((MAX_CONTINUOUS_DECODE_STEPS, self.max_bs), dtype=torch.int64, pin_memory=pin)
            self._slots = torch.zeros((MAX_CONTINUOUS_DECODE_STEPS, self.max_bs), dtype=torch.int64, device=self.device)
            self._arange = torch.arange(self.max_bs, dtype=torch.int64, device=self.device)
            self._ones = torch.ones(self.max_bs, dtype=torch.int64, device=self.device)
            self._advance = torch.zeros((NUM_ROWS, 1), dtype=torch.int64, device=self.device)
            self._advance[[POSITIONS, SEQ_LENS, PREFIX_LENS]] = 1
        self._copy_done = torch.cuda.Event() if pin else None
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._outputs: dict[int, torch.Tensor] = {}  # [bs, V] logits each graph writes
        if use_graphs:
            self.capture()

    def can_run(self, batch: ScheduledBatch) -> bool:
        """Pure decode, small enough, and no input logprobs wanted (those need extend rows)."""
        return (len(batch.reqs) <= self.max_bs and batch.is_decode
                and not any(r.logprob_start_len is not None and r.input_logprob_positions(r.kv_len, 1)
                            for r in batch.reqs))

    @torch.inference_mode()
    def forward(self, batch: ScheduledBatch) -> torch.Tensor:
        """Logits [B, V] for a batch that ``can_run``. With graphs, the tensor is a view of the
        graph's output buffer: valid until the next call."""
        bs, padded = self._load_inputs(batch)
        return self._run(bs, padded)

    @torch.inference_mode()
    def decode_steps(self, batch: ScheduledBatch, sample_next: Callable[[torch.Tensor], torch.Tensor]
                     ) -> list[list[int]]:
        """``ModelRunner.decode_steps`` for a batch that ``can_run``: ``batch.num_steps``
        replays, the inputs of each step advanced on the device, one sync at the end."""
        steps = batch.num_steps
        if steps > MAX_CONTINUOUS_DECODE_STEPS:
            raise ValueError(f"num_steps: at most {MAX_CONTINUOUS_DECODE_STEPS}, got {steps}")
        bs, padded = self._load_inputs(batch)
        ins = self._inputs
        out = torch.empty((steps, bs), dtype=torch.int64, device=self.device)
        for i in range(steps):
            if i:
                ins[INPUT_IDS, :bs].copy_(out[i - 1])
                ins[:, :bs] += self._advance  # positions, seq_lens, prefix_lens
                ins[OUT_CACHE_LOC, :bs].copy_(self._slots[i, :bs])
            out[i] = sample_next(self._run(bs, padded, step=i))
        return out.T.tolist()

    def _load_inputs(self, batch: ScheduledBatch) -> tuple[int, int]:
        """Copy the batch's first-step inputs (and, for a continuous run, every step's slots)
        into the static buffers, padding rows after it. -> (batch size, padded size)."""
        bs = len(batch.reqs)
        padded = padded_batch_size(bs, self.batch_sizes)
        if self._copy_done is not None:
            self._copy_done.synchronize()  # the last copy has left the pinned buffers
        fill_decode_inputs(self._host, batch, padded)
        # Whole rows: a column slice of a pinned buffer is not contiguous, and torch would
        # stage it through pageable memory (a blocking copy). Columns past ``padded`` are stale
        # and never read.
        self._inputs.copy_(self._host, non_blocking=True)
        if batch.num_steps > 1:
            self._host_slots[: batch.num_steps, :bs] = torch.stack(batch.slots, 1)
            self._slots[: batch.num_steps].copy_(self._host_slots[: batch.num_steps], non_blocking=True)
        if self._copy_done is not None:
            self._copy_done.record()
        return bs, padded

    def _run(self, bs: int, padded: int, step: int = 0) -> torch.Tensor:
        """One forward over the static buffers -> logits [bs, V]. Eagerly, the backend's host
        values are the loaded batch's, ``step`` positions further."""
        if not self.use_graphs:
            host = self._host[:, :padded].tolist()
            for row in (SEQ_LENS, PREFIX_LENS):
                host[row] = [v + step for v in host[row][:bs]] + host[row][bs:]
            fb = self._forward_batch(padded, host)
            self.backend.init_forward_metadata(fb)
            return self.model(fb, self.backend)[:bs]
        self._graphs[padded].replay()
        return self._outputs[padded][:bs]

    def _forward_batch(self, bs: int, host_rows: list[list[int]] | None = None) -> ForwardBatch:
        """A ForwardBatch over the first ``bs`` rows of the static buffers. ``host_rows`` are
        the host values for backends that read them (eager mode); a graph bakes in padding."""
        ins = self._inputs
        if host_rows is None:
            host_rows = [[v] * bs for v in PAD_VALUES]
        return ForwardBatch(
            mode=ForwardMode.DECODE,
            input_ids=ins[INPUT_IDS, :bs],
            positions=ins[POSITIONS, :bs],
            out_cache_loc=ins[OUT_CACHE_LOC, :bs],
            req_pool_indices=ins[REQ_POOL_INDICES, :bs],
            seq_lens=ins[SEQ_LENS, :bs],
            prefix_lens=ins[PREFIX_LENS, :bs],
            extend_lens=self._ones[:bs],
            extend_start_loc=self._arange[:bs],
            logits_indices=self._arange[:bs],
            req_to_token=self.req_pool.req_to_token,
            seq_lens_cpu=host_rows[SEQ_LENS],
            prefix_lens_cpu=host_rows[PREFIX_LENS],
            extend_lens_cpu=[1] * bs,
            req_pool_indices_cpu=host_rows[REQ_POOL_INDICES],
        )

    @torch.inference_mode()
    def capture(self) -> None:
        """Capture one graph per batch size, largest first, in one shared memory pool."""
        for row, value in enumerate(PAD_VALUES):
            self._inputs[row].fill_(value)
        pool = torch.cuda.graph_pool_handle()
        stream = torch.cuda.Stream(self.device)
        stream.wait_stream(torch.cuda.current_stream(self.device))
        for bs in reversed(self.batch_sizes):
            fb = self._forward_batch(bs)
            self.backend.init_forward_metadata(fb)
            with torch.cuda.stream(stream):  # warm-up: Triton JIT, cuBLAS handles and workspaces
                for _ in range(2):
                    self.model(fb, self.backend)
            stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            # thread_local: another engine's scheduler thread in this process may keep running
            with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
                self._outputs[bs] = self.model(fb, self.backend)
            self._graphs[bs] = graph
        torch.cuda.current_stream(self.device).wait_stream(stream)
        torch.cuda.synchronize(self.device)
