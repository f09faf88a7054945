"""Compile the kernels for sm_90 through the real launchers, without a GPU:
``python tests/kernels/compile_jit_sm90.py``.

``compile_sm90.py`` compiles each kernel from a hand-written signature. This script instead
calls the launchers (``decode_attention``, ``extend_attention``, ``store_kv``, the sampler,
rmsnorm, silu_and_mul, rope, the quantized matmuls) on CPU tensors of the engine's real shapes and dtypes, with a stand-in driver that
reports an sm_90 target, and turns every launch into a warm-up (compile, never run). So the
JIT's own binder picks the signature and specializations (int32/int64 index tensors, strides
equal to 1 or divisible by 16, pointer alignment) exactly as it will on an H100/H200, and the
launchers' constexpr choices (split counts, block sizes) are the ones the engine makes. It
prints each compiled variant's shared memory, which must fit sm_90's 227 KiB.

Run in a fresh process: TRITON_INTERPRET must be off before triton is imported.
"""

import os
import sys

os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import torch  # noqa: E402
import triton.runtime.jit as jit  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.runtime import driver  # noqa: E402

SM90_MAX_SHARED = 232448  # bytes of shared memory one block may opt into on sm_90


class _Sm90Driver:
    """Just enough of a driver for the JIT to compile: target, device 0, stream 0."""

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")


_compiled: dict[str, int] = {}  # kernel name -> largest shared memory seen


def _install() -> None:
    driver.set_active(_Sm90Driver())
    run = jit.JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        kernel = run(self, *args, grid=grid, warmup=True, **kwargs)
        shared = kernel.metadata.shared
        if shared > SM90_MAX_SHARED:
            raise RuntimeError(f"{self.fn.__name__}: {shared} bytes of shared memory > {SM90_MAX_SHARED}")
        _compiled[self.fn.__name__] = max(shared, _compiled.get(self.fn.__name__, 0))
        return kernel

    jit.JITFunction.run = compile_only


def _attention(num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype) -> None:
    from sglang_lite_kernels.decode_attention import decode_attention
    from sglang_lite_kernels.extend_attention import extend_attention
    from sglang_lite_kernels.store_kv import store_kv

    k_buf = torch.zeros(1024, num_kv_heads, head_dim, dtype=dtype)
    req_to_token = torch.zeros(8, 512, dtype=torch.int32)  # the engine's ReqToTokenPool dtype
    for batch in (1, 5, 64):
        q = torch.zeros(batch, num_heads, head_dim, dtype=dtype)
        rows = torch.arange(batch)
        ones = torch.ones(batch, dtype=torch.int64)
        for splits in (None, 2, 32):
            decode_attention(q, k_buf, k_buf, req_to_token, rows, ones, head_dim**-0.5, num_kv_splits=splits)
        # v as the model makes it: a view into the fused qkv projection, rows strided
        qkv = torch.zeros(batch, (num_heads + 2 * num_kv_heads) * head_dim, dtype=dtype)
        v = qkv[:, (num_heads + num_kv_heads) * head_dim:].view(batch, num_kv_heads, head_dim)
        store_kv(v, v, k_buf, k_buf, rows)
        extend_attention(q, k_buf, k_buf, req_to_token, rows, ones - 1, ones, rows, head_dim**-0.5,
                         max_extend_len=1)


def _scaled_kv(num_heads: int, num_kv_heads: int, head_dim: int) -> None:
    """--kv-cache-dtype int8 / fp8_e4m3: the attention kernels reading codes and scales."""
    from sglang_lite_kernels.decode_attention import decode_attention
    from sglang_lite_kernels.extend_attention import extend_attention

    req_to_token = torch.zeros(8, 512, dtype=torch.int32)
    for codes in (torch.int8, torch.float8_e4m3fn):
        pool = torch.zeros(1024, 2, num_kv_heads, head_dim, dtype=codes)  # KVPool's layout
        scales = torch.zeros(1024, 2, num_kv_heads, dtype=torch.bfloat16)
        kv = dict(k_scale=scales[:, 0], v_scale=scales[:, 1])
        for batch in (1, 64):
            q = torch.zeros(batch, num_heads, head_dim, dtype=torch.bfloat16)
            rows, ones = torch.arange(batch), torch.ones(batch, dtype=torch.int64)
            decode_attention(q, pool[:, 0], pool[:, 1], req_to_token, rows, ones, head_dim**-0.5, **kv)
            extend_attention(q, pool[:, 0], pool[:, 1], req_to_token, rows, ones - 1, ones, rows,
                             head_dim**-0.5, max_extend_len=1, **kv)


def _sampling(vocab: int) -> None:
    from sglang_lite_kernels.sampling import apply_token_bitmask_inplace_triton, sample_triton

    for batch in (1, 8):
        logits = torch.zeros(batch, vocab)
        floats = torch.ones(batch)
        int32 = torch.zeros(batch, dtype=torch.int32)
        int64 = torch.zeros(batch, dtype=torch.int64)
        mask = torch.zeros(batch, (vocab + 31) // 32, dtype=torch.int32)
        sample_triton(logits, floats, int32, floats, floats, int64, int64)
        sample_triton(logits, floats, int32, floats, floats, int64, int64, bitmask=mask)
        apply_token_bitmask_inplace_triton(logits, mask)


def _quant_mm(n: int, k: int) -> None:
    from sglang_lite_kernels.quant_mm import fp8_mm, int4_mm, int4_rows_mm, int8_mm

    for rows in (1, 8, 64):
        x = torch.zeros(rows, k, dtype=torch.bfloat16)
        int4_mm(x, torch.zeros(n, k // 2, dtype=torch.uint8), torch.zeros(k // 32, n, 2, dtype=torch.bfloat16), 32)
        int4_rows_mm(x, torch.zeros(n, k // 2, dtype=torch.uint8), torch.ones(n, k // 32, dtype=torch.bfloat16),
                     torch.zeros(n, k // 32, dtype=torch.bfloat16))
        int8_mm(x, torch.zeros(n, k, dtype=torch.int8), torch.ones(n))
        fp8_mm(x, torch.zeros(n, k, dtype=torch.float8_e4m3fn), torch.ones(n, k // 32))


def main() -> None:
    _install()
    # Llama-3.2-1B, SmolLM2-135M, a head_dim-128 model, MQA; fp32/fp16 as the GPU kernel tests use.
    for shape in ((32, 8, 64), (9, 3, 64), (32, 8, 128), (8, 1, 128)):
        _attention(*shape, torch.bfloat16)
    for dtype in (torch.float32, torch.float16):
        _attention(32, 8, 128, dtype)
    _scaled_kv(32, 8, 64)
    for vocab in (49152, 128256):
        _sampling(vocab)
    from sglang_lite_kernels.activation import silu_and_mul
    from sglang_lite_kernels.rmsnorm import rmsnorm
    from sglang_lite_kernels.rope import apply_rope_

    for hidden, inter, hq, hkv, head_dim in ((576, 1536, 9, 3, 64), (2048, 8192, 32, 8, 64), (4096, 14336, 32, 8, 128)):
        x = torch.zeros(3, hidden, dtype=torch.bfloat16)
        rmsnorm(x, torch.ones(hidden, dtype=torch.bfloat16), 1e-5)
        rmsnorm(x, torch.ones(hidden, dtype=torch.bfloat16), 1e-5, residual=x.clone())
        silu_and_mul(torch.zeros(3, 2 * inter, dtype=torch.bfloat16))
        qkv = torch.zeros(3, (hq + 2 * hkv) * head_dim, dtype=torch.bfloat16)
        q, k, _ = qkv.split([hq * head_dim, hkv * head_dim, hkv * head_dim], dim=-1)
        tables = torch.zeros(2, 8192, head_dim // 2)
        apply_rope_(q.view(3, hq, head_dim), k.view(3, hkv, head_dim), tables[0], tables[1],
                    torch.zeros(3, dtype=torch.int64))
    for n, k in ((1728, 576), (28672, 4096)):  # SmolLM2's qkv, Llama-3-8B's gate_up
        _quant_mm(n, k)
    for name, shared in sorted(_compiled.items()):
        print(f"ok {name} (max shared {shared} B)")


if __name__ == "__main__":
    main()
