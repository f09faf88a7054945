#!/usr/bin/env bash
# The issue-14 GPU check, one prepared run on a lent CUDA machine (about 5 minutes on an H200):
# the quantized-matmul and attention kernel tests compiled for the device (8-bit KV pools
# included), then bench.quant_gpu (kernels vs cuBLAS bf16, the engine with each quantization).
# Logs and results go to $OUT (or /tmp/out).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout "${TEST_S:-150}" python3 -m pytest -q -p no:cacheprovider tests/kernels/test_quant_mm.py \
  tests/kernels/test_attention.py tests/kernels/test_triton_backend.py \
  2>&1 | tee "$OUT/pytest_quant.log" | tail -25
timeout "${BENCH_S:-330}" python3 -m sglang_lite.bench.quant_gpu "$@" 2>&1 | tee "$OUT/bench_quant.log" \
  | grep -v "random weights" | tail -70
