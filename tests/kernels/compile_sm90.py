"""Compile every kernel for sm_90 (H100/H200) without a GPU: ``python tests/kernels/compile_sm90.py``.

The interpreter accepts programs the compiler rejects (dtype mixing, tl.dot shapes, loop-carried
types), so CI compiles each kernel to a cubin with triton's bundled ptxas as well. Run in a
fresh process: TRITON_INTERPRET must be off before triton is imported.
"""

import os
import sys

os.environ["TRITON_INTERPRET"] = "0"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from sglang_lite_kernels import decode_attention, extend_attention, rmsnorm, sampling, store_kv  # noqa: E402

I32 = "i32"


def _compile(fn, types: dict, constexprs: dict) -> None:
    signature = {n: "constexpr" if n in constexprs else types.get(n, I32) for n in fn.arg_names}
    triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", 90, 32))
    print(f"ok {fn.__name__} {constexprs}")


def main() -> None:
    sample_types = dict(logits_ptr="*fp32", temps_ptr="*fp32", top_ks_ptr="*i32", top_ps_ptr="*fp32",
                        min_ps_ptr="*fp32", seeds_ptr="*i64", steps_ptr="*i64", mask_ptr="*i32",
                        out_ptr="*i64")
    for has_mask in (True, False):
        _compile(sampling._sample_kernel, sample_types, dict(HAS_MASK=has_mask, BLOCK=1024))
    _compile(sampling._apply_bitmask_kernel, dict(logits_ptr="*fp32", mask_ptr="*i32"), dict(BLOCK=1024))
    bf16 = "*bf16"
    _compile(store_kv._store_kv_kernel, dict(k_ptr="*fp32", v_ptr="*bf16", kb_ptr=bf16, vb_ptr=bf16,
                                             slots_ptr="*i64"), dict(HEAD_DIM=64, BLOCK_D=64))
    for codes, scaled in ((bf16, False), ("*fp8e4nv", True)):  # the model's dtype; --kv-cache-dtype fp8
        paged = dict(q_ptr=bf16, k_ptr=codes, v_ptr=codes, req_to_token_ptr="*i32", req_pool_ptr="*i64",
                     sm_scale="fp32", ks_ptr=bf16, vs_ptr=bf16)
        _compile(decode_attention._decode_stage1,
                 dict(paged, seq_lens_ptr="*i64", mid_o_ptr="*fp32", mid_lse_ptr="*fp32"),
                 dict(GROUP=3, HEAD_DIM=64, NUM_SPLITS=8, BLOCK_H=16, BLOCK_D=64, BLOCK_N=64, PRECISION="tf32",
                      SCALED=scaled))
        _compile(extend_attention._extend_kernel,
                 dict(paged, o_ptr=bf16, prefix_lens_ptr="*i64", extend_lens_ptr="*i64", extend_start_ptr="*i64"),
                 dict(GROUP=3, HEAD_DIM=64, BLOCK_M=64, BLOCK_N=64, BLOCK_D=64, PRECISION="tf32", SCALED=scaled))
    _compile(decode_attention._decode_stage2, dict(mid_o_ptr="*fp32", mid_lse_ptr="*fp32", o_ptr=bf16),
             dict(HEAD_DIM=64, NUM_SPLITS=8, BLOCK_D=64, BLOCK_S=8))
    _compile(rmsnorm._rmsnorm_kernel, dict(x_ptr=bf16, res_ptr=bf16, w_ptr=bf16, out_ptr=bf16, h_ptr=bf16,
                                           eps="fp32"), dict(HAS_RES=True, BLOCK=1024))


if __name__ == "__main__":
    main()
