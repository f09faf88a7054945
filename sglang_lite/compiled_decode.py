"""Decode steps through ``torch.compile`` (``enable_torch_compile``, SGLang's flag): on a CPU a
small decode step is hundreds of small ops, each paying Python and dispatch cost; inductor
fuses the norms, RoPE, the activation and the attention's surroundings into generated C++.

One compiled function is the model's whole forward with the attention backend, both passed
in, so every tensor and size of a step (batch size, KV length, pages) is a dynamic input and a
new length does not compile again. A batch of one row compiles once more (inductor
specializes sizes 0 and 1), and so does each batch size range the model's own branches tell
apart (the packed weights' kernel up to ``KERNEL_MAX_ROWS``). Those compiles run at start-up
(``warm_up``), so no request waits on one; a batch above ``max_bs`` runs eagerly.

Measured on a 2-core CPU (SmolLM2-135M, the embedded GGUF, bf16), in one process: a step
of 1 / 2 / 4 / 8 rows 11.8 / 15.4 / 21.5 / 35.6 ms against eager's 17.7 / 20.0 / 25.0 / 37.5;
served (bench.peer) at concurrency 1 TPOT 13.3-14.4 ms against 19.1, but at concurrency 8,
with the batch graph, 55 against 46 (not understood yet), hence ``torch_compile_max_bs`` 1 by
default. Compiling takes 20-70 s a graph. Where it fails (no C++ compiler, say) the runner
logs it and stays eager.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time

import torch

from sglang_lite.attention.base import AttentionBackend, ForwardBatch, ForwardMode
from sglang_lite.quant.int4 import Int4Weight
from sglang_lite.quant.int8 import Int8Weight

log = logging.getLogger(__name__)


class CompiledDecode:
    def __init__(self, model: torch.nn.Module, backend: AttentionBackend, max_bs: int):
        self.model, self.backend, self.max_bs = model, backend, max_bs
        forward = type(model).forward
        self._eager_forward = getattr(forward, "__wrapped__", forward)  # without inference_mode
        self._compiled = torch.compile(self._forward)
        self.failed: str | None = None  # why compiling failed: the runner stays eager
        cxx = os.environ.get("CXX") or "g++"  # the compiler inductor builds its C++ with
        if shutil.which(cxx) is None:
            self._fail(f"no C++ compiler: {cxx!r} not found (set CXX)")
        elif type(backend).step_tensors is AttentionBackend.step_tensors:  # every new length: a compile
            self._fail(f"attention backend {type(backend).__name__} has no symbolic step sizes")

    def can_run(self, fb: ForwardBatch) -> bool:
        return self.failed is None and fb.mode == ForwardMode.DECODE and fb.input_ids.shape[0] <= self.max_bs

    def _forward(self, model: torch.nn.Module, fb: ForwardBatch, backend: AttentionBackend) -> torch.Tensor:
        return self._eager_forward(model, fb, backend)

    def __call__(self, fb: ForwardBatch) -> torch.Tensor:
        """Logits of one decode step (the backend's metadata for ``fb`` already built)."""
        try:
            _mark_step_sizes_dynamic(fb, self.backend)
            return self._compiled(self.model, fb, self.backend)
        except Exception as e:  # inductor could not build: this step and every later one eager
            self._fail(f"{type(e).__name__}: {e}")
            return self.model(fb, self.backend)

    def _fail(self, why: str) -> None:
        self.failed = why
        log.warning("enable_torch_compile: cannot compile the decode step, running eagerly (%s)",
                    why.splitlines()[0][:300])


def _mark_step_sizes_dynamic(fb: ForwardBatch, backend: AttentionBackend) -> None:
    """Sizes that change from step to step are symbolic from the first compile: the batch axis
    of the step's tensors, and every axis of the backend's per-step metadata (rows, pages,
    padded KV length). Weights and pools keep static sizes, which inductor specializes on."""
    for f in dataclasses.fields(fb):
        t = getattr(fb, f.name)
        if isinstance(t, torch.Tensor) and t.dim() == 1:
            torch._dynamo.maybe_mark_dynamic(t, 0)
    for t in backend.step_tensors():
        for dim, size in enumerate(t.shape):
            if size > 1:
                torch._dynamo.maybe_mark_dynamic(t, dim)


def warm_up_batch_sizes(max_bs: int, row_thresholds: list[int]) -> list[int]:
    """One decode batch size per graph: 1, 2, and the first size past each row threshold at
    which the model takes another branch (a packed weight's kernel, its dense copy)."""
    return sorted({b for b in (1, 2, *(t + 1 for t in row_thresholds if t)) if b <= max_bs})


def warm_up(scheduler, intake, cfg) -> None:
    """With ``enable_torch_compile``, compile every graph a decode step can need before
    serving: decode batches of each ``warm_up_batch_sizes`` size, a few tokens each, run
    through the scheduler itself (their KV stays in the prefix cache, to be evicted)."""
    if not cfg.enable_torch_compile:
        return
    start = time.perf_counter()
    thresholds = [cfg.dense_weights_above or 0, Int4Weight.KERNEL_MAX_ROWS, Int8Weight.KERNEL_MAX_ROWS]
    for bs in warm_up_batch_sizes(cfg.torch_compile_max_bs, thresholds):
        ids = [[1 + (7 * i + j) % 97 for j in range(40)] for i in range(bs)]  # distinct prompts
        reqs, _ = intake.make_reqs(None, ids, {"max_new_tokens": 4, "ignore_eos": True}, False, 0,
                                   False, None, None)
        for req in reqs:
            req.on_output = _ignore
            scheduler.add_request(req)
        while scheduler.has_work:
            scheduler.step()
    log.info("enable_torch_compile: decode graphs compiled in %.1f s", time.perf_counter() - start)


def _ignore(chunk) -> None:
    pass
