"""Engine options: "auto" values are resolved once in ``EngineConfig.create`` and the
result is frozen; runtime state never writes back into it."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from sglang_lite.mem.kv_format import KVFormat, kv_format, resolve_kv_cache_dtype

MAX_CONTINUOUS_DECODE_STEPS = 64  # longest run of decode steps between two host syncs
QUANTIZATIONS = ("none", "int8", "int4", "fp8", "gguf")
# quantization "auto" for llama-architecture GGUF files on CPU (the embedded model too): the
# file's own blocks, and a dense copy of each weight for steps of more than
# DEFAULT_DENSE_WEIGHTS_ABOVE rows (quant/by_rows.py), the setting measured fastest for the
# embedded model (README: Quantized weights)
DEFAULT_GGUF_QUANTIZATION = "gguf"
DEFAULT_DENSE_WEIGHTS_ABOVE = 8
# ... and where our C int4 kernel runs them (int8 activations, quant/native_int4.py) on a CPU
# with AMX (bf16 GEMMs in tiles): the decoder's 120 linears of the embedded model, bf16, 2
# threads, an AMX Xeon, C kernel against the dense copy: 8 rows 9.4 / 18.4 ms, 16 rows 16.1 /
# 20.9, 24 rows 21.5 / 20.4, 32 rows 26.9 / 22.1
DEFAULT_DENSE_ABOVE_C_KERNEL = 16
# ... and without AMX no dense copy at all, so no copy's memory: the C kernel, which takes any
# number of rows, is faster up to about 128 rows, about as fast past them (prefill). In fp32
# (the dtype of a CPU without native bf16) the GEMM runs at half bf16's rate: an AVX2-only EPYC,
# the same 120 linears, fp32, 2 threads, one quiet run: 1 row 15.8 / 29.3 ms, 8 rows 32.0 / 68.9,
# 32 rows 77.7 / 107.9, 64 rows 138 / 158, 128 rows 267 / 280, 256 rows 500 / 484. In bf16 on an
# AVX512-BF16 EPYC (Zen 4, no AMX), one layer's four linears: 8 rows 190 / 334 us, 32 rows
# 586 / 727, 64 rows 1213 / 1542, 128 rows 2445 / 2581, 256 rows 5054 / 4688; the offline mixed
# workload with a copy above 16 rows 7.5-8.3 s, above 128 6.5-7.2, none 6.6-8.0.
DEFAULT_DENSE_ABOVE_C_KERNEL_NO_AMX = 0
# torch's weight-only int4 / int8 CPU kernels are fast in bf16 / fp16 only. One 1536x576 layer,
# one thread, on an AMX/AVX512-BF16 Xeon: int4 89 / 244 us at 1 / 8 rows in bf16, 2,152 /
# 16,955 us in fp32, where the dense fp32 GEMM takes 278 / 571 us (int8 alike: 84 / 274 bf16,
# 947 / 10,542 fp32). So "auto" packs nothing in fp32, an AVX2-only CPU's dtype.

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
           "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}


def cpuinfo_values(*keys: str) -> list[str]:
    """The values of /proc/cpuinfo's lines named ``keys`` (one per CPU); [] where there is none."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux
        return []
    out = []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in keys:
            out.append(value.strip())
    return out


@lru_cache(maxsize=1)
def native_cpu_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively (x86 AVX512-BF16 or AMX, Arm BF16). There a
    bf16 matmul runs about 4x faster than fp32 (593 against 145 GFLOP/s measured on an AVX512-BF16
    EPYC); without it, bf16 is emulated and far slower (DESIGN.md: 0.3 against 144 GFLOP/s on
    an AVX2-only CPU), so "auto" means fp32 (and fp32 where /proc/cpuinfo is not there)."""
    flags = {f for value in cpuinfo_values("flags", "Features") for f in value.split()}
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


@lru_cache(maxsize=1)
def cpu_amx() -> bool:
    """Whether this CPU multiplies bf16 in AMX tiles (Sapphire Rapids and later) and the OS lets
    this process use them (torch asks it, ``_init_amx``): there a bf16 GEMM of many rows beats
    our int4 kernel (DEFAULT_DENSE_ABOVE_C_KERNEL)."""
    flags = {f for value in cpuinfo_values("flags") for f in value.split()}
    if "amx_bf16" not in flags:
        return False
    init = getattr(torch._C._cpu, "_init_amx", None)
    return bool(init()) if init is not None else True


def int4_kernel_vectorized() -> bool:
    """Whether our C int4 kernel built with vector code (AVX2, VNNI), the build the no-copy
    measurements above were made with; its plain-C build (other CPUs) is far slower per row."""
    from sglang_lite.quant import native_int4

    mod = native_int4.module()
    return mod is not None and mod.features()[0] != "scalar"


def packs_in_fp32() -> bool:
    """Whether packed weights beat dense ones in fp32 on this CPU: where our C int4 kernel
    builds (quant/native_int4.py), which multiplies fp32 activations as fast as bf16 ones (it
    quantizes them to int8); torch's int4 kernel is 10-100x slower in fp32 than in bf16.
    Measured with the embedded model in fp32, batch-1 decode: dense 124-184 ms a token, the
    GGUF blocks through the C kernel 65-72, through torch's 377-399 (2 cores, one session)."""
    from sglang_lite.quant import native_int4

    return native_int4.module() is not None


@dataclass(frozen=True, slots=True)
class EngineConfig:
    model: str | None = None
    tokenizer: str | None = None  # tokenizer dir for dummy models
    revision: str | None = None  # hub models (org/name): branch, tag or commit; default main
    device: str = "auto"  # auto -> cuda if available else cpu
    dtype: str = "auto"  # auto -> bfloat16 on cuda and on CPUs with native bf16, else float32
    attention_backend: str = "auto"  # auto -> triton on cuda, torch on cpu; invariant when deterministic
    # Greedy outputs independent of the batch a request runs in (batch-invariant matmuls and
    # attention, model/batch_invariant.py): slower, off by default.
    deterministic: bool = False
    # Weights kept quantized: none | int8 | int4 | fp8 (packed at load, group-wise scales) |
    # gguf (a GGUF file's own Q4_0/Q4_1/Q8_0 blocks). auto -> DEFAULT_GGUF_QUANTIZATION for a
    # llama-architecture GGUF file (the embedded model too), else none.
    quantization: str = "auto"
    # With packed weights: steps of more rows than this (batched decode, prefill) multiply by a
    # copy of each weight in the model's dtype kept beside the packed one; steps of this many rows
    # or fewer by the packed kernel. 0 = no copy. None -> DEFAULT_DENSE_WEIGHTS_ABOVE when
    # quantization is auto and packs, else 0.
    dense_weights_above: int | None = None
    # On a CPU, a packed int4 weight (int4, gguf's Q4 blocks and the int4 halves of its Q8_0)
    # multiplies its steps (those up to a dense copy's rows, where it has one) through our C
    # kernel with each row's activations quantized to int8 per weight group, as llama.cpp
    # multiplies Q4 by Q8 (quant/native_int4.py).
    # False: torch's kernel, the activations as they are (the dequantized model's logits).
    int8_activations: bool = True
    page_size: int = 16
    kv_cache_memory: str | int = "1GiB"  # CPU: size of the KV pool
    # KV pool storage: auto (the model's dtype), bf16, fp8_e4m3 or int8 (8-bit codes with a
    # scale per token and kv head: ~2x the tokens of bf16 in one budget; torch attention only).
    kv_cache_dtype: str = "auto"
    mem_fraction_static: float = 0.85  # GPU: fraction of free memory for weights + KV
    max_total_tokens: int | None = None  # overrides both sizes above
    max_running_requests: int = 256
    max_prefill_tokens: int = 4096  # token budget of one step (decode + prefill); 16384 on cuda
    chunked_prefill_size: int = 1024  # longest piece of one prompt in one step; 8192 on cuda
    context_length: int | None = None  # default: the model's max positions (capped by the pool)
    max_queue_size: int = 4096  # waiting requests beyond this are refused
    disable_radix_cache: bool = False
    schedule_policy: str = "lpm"  # lpm (longest prefix match) or fcfs
    # Priority scheduling (SGLang's flags): requests' `priority` orders the queue, picks the
    # requests retracted when KV memory is short, and lets a waiting request preempt running
    # ones whose priority is lower by more than the threshold. Higher values first unless
    # schedule_low_priority_values_first (vLLM's convention).
    enable_priority_scheduling: bool = False
    schedule_low_priority_values_first: bool = False
    priority_scheduling_preemption_threshold: int = 10
    new_token_ratio: float = 0.4  # share of remaining decode tokens reserved at admission
    enable_jump_forward: bool = True
    # Fill a step's grammar bitmasks in a worker thread while the model runs.
    overlap_grammar_masks: bool = True
    # Decode steps of up to torch_compile_max_bs rows through torch.compile (compiled_decode.py):
    # CPU only (CUDA decode runs CUDA graphs); start-up compiles its graphs first (20-70 s each).
    # 1 by default: measured faster at one row; at concurrency 8 the batch graph served slower.
    enable_torch_compile: bool = False
    torch_compile_max_bs: int = 1
    disable_cuda_graph: bool = False  # CUDA graphs for decode are on by default on cuda (triton)
    cuda_graph_max_bs: int = 256
    # Decode steps run back to back on the device between two host syncs, when every running
    # request is a plain decode and nothing waits: None -> 8 on cuda, 1 (off) on cpu.
    num_continuous_decode_steps: int | None = None
    seed: int = 0  # dummy weights
    stream_interval: int = 1
    num_threads: int | None = None  # CPU torch threads (per rank; tp > 1 on CPU: cores // tp)
    # Tensor parallelism: ranks sharding the model (parallel/): rank 0 runs the engine, the
    # other ranks are processes it starts itself (gloo on CPU, NCCL on CUDA, one GPU each).
    tp: int = 1
    # Constraint compiles: 0 -> in the caller's thread (offline use); N -> N worker processes
    # (the server's default), each compile killed past grammar_compile_timeout seconds.
    grammar_compile_workers: int = 0
    grammar_compile_timeout: float = 10.0
    grammar_compile_queue: int = 32  # compiles waiting for a worker before new ones are refused

    @classmethod
    def create(cls, **options: Any) -> EngineConfig:
        known = {f.name for f in fields(cls)}
        if "tp_size" in options:  # SGLang's Engine(tp_size=N)
            if "tp" in options:
                raise ValueError("tp_size: give tp or tp_size (the same option), not both")
            options = {("tp" if k == "tp_size" else k): v for k, v in options.items()}
        for key in options:
            if key not in known:
                raise ValueError(f"engine option: unknown option {key!r} (known: {sorted(known)})")
        cfg = cls(**options)
        device = cfg.device if cfg.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        on_gpu = device.startswith("cuda")
        dtype = cfg.dtype if cfg.dtype != "auto" else ("bfloat16" if on_gpu or native_cpu_bf16() else "float32")
        kv_dtype = resolve_kv_cache_dtype(cfg.kv_cache_dtype, dtype)
        quantization = cfg.quantization
        if quantization == "auto":  # the quantized kernels are not batch-invariant; nor sharded
            # on a GPU they dequantize; in fp32 only the C kernel beats the dense GEMM (above),
            # and a dtype asked for as float32 keeps the weights as they are
            fp32 = _DTYPES.get(dtype) == torch.float32
            fp32_packs = fp32 and cfg.dtype == "auto" and cfg.int8_activations and not on_gpu and packs_in_fp32()
            packs = not (cfg.deterministic or cfg.tp != 1 or on_gpu or (fp32 and not fp32_packs))
            quantization = _auto_quantization(cfg.model) if packs else "none"
        dense_above = cfg.dense_weights_above
        if dense_above is None:
            dense_above = 0
            if cfg.quantization == "auto" and quantization != "none":
                c_kernel = cfg.int8_activations and not on_gpu and packs_in_fp32()  # (it builds)
                dense_above = DEFAULT_DENSE_WEIGHTS_ABOVE
                if c_kernel:  # bf16 keeps the copy where AMX or a kernel without vectors beats it
                    fp32 = _DTYPES.get(dtype) == torch.float32
                    copy = not fp32 and (cpu_amx() or not int4_kernel_vectorized())
                    dense_above = DEFAULT_DENSE_ABOVE_C_KERNEL if copy else DEFAULT_DENSE_ABOVE_C_KERNEL_NO_AMX
        backend = cfg.attention_backend
        if backend == "auto":  # the triton kernels read every KV format (8-bit codes with scales too)
            backend = "invariant" if cfg.deterministic else "triton" if on_gpu else "torch"
        budgets = {}
        if cfg.num_continuous_decode_steps is None:
            budgets["num_continuous_decode_steps"] = 8 if on_gpu else 1
        if on_gpu:  # the defaults are CPU-sized; a GPU wants big prefill steps
            budgets["max_prefill_tokens"] = options.get("max_prefill_tokens", 16384)
            budgets["chunked_prefill_size"] = options.get(
                "chunked_prefill_size", min(8192, budgets["max_prefill_tokens"]))
        resolved = cls(**{**{f.name: getattr(cfg, f.name) for f in fields(cls)},
                          "device": device, "dtype": dtype, "attention_backend": backend,
                          "kv_cache_dtype": kv_dtype, "quantization": quantization,
                          "dense_weights_above": dense_above,
                          **budgets})
        resolved.validate()
        return resolved

    def validate(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype: unknown dtype {self.dtype!r} (known: {sorted(_DTYPES)})")
        if self.quantization not in ("auto", *QUANTIZATIONS):
            raise ValueError(f"quantization: unknown method {self.quantization!r} (known: {list(QUANTIZATIONS)})")
        if self.attention_backend not in ("torch", "triton", "invariant"):
            raise ValueError(f"attention_backend: unknown backend {self.attention_backend!r}")
        if self.deterministic and self.attention_backend != "invariant":
            raise ValueError(f"deterministic: needs attention_backend 'invariant' (or auto), "
                             f"not {self.attention_backend!r}")
        if self.deterministic and self.quantization != "none":
            raise ValueError(f"deterministic: needs quantization 'none' (or auto), not {self.quantization!r}: "
                             f"the quantized kernels are not batch-invariant")
        self._validate_dense_weights()
        if not isinstance(self.int8_activations, bool):
            raise ValueError(f"int8_activations: must be true or false, got {self.int8_activations!r}")
        if self.attention_backend == "triton" and not self.device.startswith("cuda"):
            raise ValueError("attention_backend: 'triton' needs a CUDA device")
        resolve_kv_cache_dtype(self.kv_cache_dtype, self.dtype)  # a clear error for an unknown one
        for name in ("page_size", "max_running_requests", "max_prefill_tokens", "chunked_prefill_size",
                     "max_queue_size", "stream_interval"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}: must be >= 1")
        if not 1 <= self.num_continuous_decode_steps <= MAX_CONTINUOUS_DECODE_STEPS:
            raise ValueError(f"num_continuous_decode_steps: must be in [1, {MAX_CONTINUOUS_DECODE_STEPS}]")
        if self.chunked_prefill_size > self.max_prefill_tokens:
            raise ValueError("chunked_prefill_size: must be <= max_prefill_tokens")
        if self.grammar_compile_workers < 0 or self.grammar_compile_queue < 0:
            raise ValueError("grammar_compile_workers: must be >= 0")
        if not self.grammar_compile_timeout > 0:
            raise ValueError("grammar_compile_timeout: must be > 0")
        if not 0 < self.mem_fraction_static < 1:
            raise ValueError("mem_fraction_static: must be in (0, 1)")
        if self.priority_scheduling_preemption_threshold < 0:
            raise ValueError("priority_scheduling_preemption_threshold: must be >= 0")
        if self.schedule_policy not in ("lpm", "fcfs"):
            raise ValueError("schedule_policy: must be 'lpm' or 'fcfs'")
        parse_size(self.kv_cache_memory)
        self._validate_tp()
        self._validate_torch_compile()

    def _validate_torch_compile(self) -> None:
        if not self.enable_torch_compile:
            return
        if isinstance(self.torch_compile_max_bs, bool) or not isinstance(self.torch_compile_max_bs, int) \
                or self.torch_compile_max_bs < 1:
            raise ValueError(f"torch_compile_max_bs: must be an integer >= 1, got {self.torch_compile_max_bs!r}")
        if self.device != "cpu":
            raise ValueError(f"enable_torch_compile: the CPU decode path only (device {self.device!r} runs "
                             "CUDA graphs)")
        if self.tp != 1:
            raise ValueError(f"enable_torch_compile: not with tensor parallelism (tp={self.tp})")
        if self.attention_backend != "torch":  # the backend whose step sizes stay symbolic
            raise ValueError(f"enable_torch_compile: needs attention_backend 'torch', not {self.attention_backend!r}")

    def _validate_dense_weights(self) -> None:
        above = self.dense_weights_above
        if above is None:
            return
        if isinstance(above, bool) or not isinstance(above, int) or above < 0:
            raise ValueError(f"dense_weights_above: must be an integer >= 0, got {above!r}")
        if above and self.quantization == "none":
            raise ValueError("dense_weights_above: needs packed weights (quantization int8, int4, fp8 or gguf); "
                             "with quantization 'none' every weight is dense already")
        if above and self.tp != 1:
            raise ValueError(f"dense_weights_above: not with tensor parallelism (tp={self.tp}); use 0")

    def _validate_tp(self) -> None:
        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp < 1:
            raise ValueError(f"tp: must be an integer >= 1, got {self.tp!r}")
        if self.tp == 1:
            return
        if self.quantization == "gguf":
            raise ValueError(f"quantization: 'gguf' keeps a GGUF file's blocks, which are not sharded "
                             f"across ranks; tp={self.tp} needs quantization none, int8, int4 or fp8")
        if self.device.startswith("cuda"):
            index = torch.device(self.device).index or 0
            if index + self.tp > torch.cuda.device_count():
                raise ValueError(f"tp: {self.tp} ranks need {self.tp} GPUs from {self.device}, "
                                 f"found {torch.cuda.device_count()}")

    @property
    def cuda_graph_batch_limit(self) -> int:
        """Largest decode batch captured in a CUDA graph; 0 = no graphs (CPU, torch backend,
        or disabled)."""
        if (self.disable_cuda_graph or not self.device.startswith("cuda") or self.attention_backend != "triton"
                or self.tp > 1):  # graphs would have to capture the workers' plans too
            return 0
        return min(self.cuda_graph_max_bs, self.max_running_requests)

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @property
    def kv_format(self) -> KVFormat:
        """How the KV pool stores k/v (``kv_cache_dtype`` with "auto" resolved)."""
        return kv_format(resolve_kv_cache_dtype(self.kv_cache_dtype, self.dtype))

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)



def _auto_quantization(model: str | None) -> str:
    """What "auto" means for ``model``: the embedded model and llama-architecture GGUF files
    keep their blocks when DEFAULT_GGUF_QUANTIZATION says so; everything else runs unquantized."""
    if model is None or model in ("default", "SmolLM2-135M-Instruct"):
        return DEFAULT_GGUF_QUANTIZATION
    path = Path(model).expanduser()
    if path.suffix == ".gguf" and path.is_file():
        from sglang_lite.quant.gguf_blocks import gguf_architecture

        return DEFAULT_GGUF_QUANTIZATION if gguf_architecture(path) == "llama" else "none"
    return "none"


def parse_size(size: str | int) -> int:
    """'512MiB', '2GB', '1g' or an int of bytes -> bytes."""
    if isinstance(size, int) and not isinstance(size, bool):
        return size
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", str(size), re.IGNORECASE)
    if not m:
        raise ValueError(f"kv_cache_memory: cannot parse size {size!r} (e.g. '512MiB', '2GB')")
    power = " kmgt".index(m.group(2).lower() or " ")
    base = 1024 if m.group(3).lower().startswith("i") or m.group(3) == "" else 1000
    return int(float(m.group(1)) * base**power)
