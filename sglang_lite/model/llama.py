"""Our Llama-family decoder, written against the paged-KV ``AttentionBackend`` seam.

q/k/v and gate/up projections are merged into single matmuls; weights load from Hugging
Face names through ``load_weights`` (Phi-3 ships them merged already). The families differ
by switches in ``ModelConfig``: Qwen2's qkv bias, Qwen3's per-head qk-norm, Gemma's scaled
embeddings, (1 + w) norms around attention and MLP, GELU, soft-capped attention scores and
logits, sliding-window layers with their own RoPE; Phi-4-mini's partial rotary.

On CUDA the elementwise work runs in fused Triton kernels (``sglang_lite_kernels/``): residual add +
RMSNorm, RoPE on q and k in place, SiLU-and-mul. A decode step of a small batch is a chain of
launches, so each op fused away is latency saved; the math and its rounding points are the
plain-torch path's (``use_fused_ops`` chooses). On a CPU, eagerly, the same three run as one C
call each (``native_ops``) where it builds, else as the plain-torch chains.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from sglang_lite.attention.base import AttentionBackend, ForwardBatch
from sglang_lite.model import native_ops
from sglang_lite.model.config import ModelConfig
from sglang_lite.model.native_step import NativeDecodeStep
from sglang_lite.model.rope import RotaryEmbedding
from sglang_lite_kernels._triton import runs_fused
from sglang_lite_kernels.activation import silu_and_mul, silu_and_mul_ref
from sglang_lite_kernels.rmsnorm import rmsnorm

if TYPE_CHECKING:
    from sglang_lite.parallel.shard import ModelShard


class RMSNorm(nn.Module):
    """``norm(x)``, or with a residual ``(norm(x + residual), x + residual)``: the sum is the
    next residual, so the add and the norm are one fused kernel."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.fused: bool | None = None

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None):
        if x.dim() == 2 and runs_fused(self.fused, x):
            out, h = rmsnorm(x, self.weight, self.eps, residual)
            return out if residual is None else (out, h)
        if self.fused is None and native_ops.usable(x):
            done = native_ops.rmsnorm(x, self.weight, self.eps, residual)
            if done is not None:
                return done[0] if residual is None else done
        h = x if residual is None else x + residual
        hf = h.float()
        out = self.weight * (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)
        return out if residual is None else (out, h)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int, rope: RotaryEmbedding, rope_index: int):
        super().__init__()
        self.layer_id = layer_id
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_size = cfg.num_heads * cfg.head_dim
        self.kv_size = cfg.num_kv_heads * cfg.head_dim
        self.qkv_proj = nn.Linear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(self.q_size, cfg.hidden_size, bias=cfg.o_bias)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.rope, self.rope_index = rope, rope_index  # rope_index: its batch in the forward's list
        self.sm_scale = cfg.sm_scale
        # Only what differs from plain causal attention goes to the backend, so a backend
        # that lacks a feature sees it asked for and refuses.
        self.attn_options = {k: v for k, v in (("sliding_window", cfg.window(layer_id)),
                                               ("logit_softcap", cfg.attn_logit_softcap)) if v is not None}
        self.tp: ModelShard | None = None  # tensor parallelism: o_proj is row-parallel

    def forward(self, x: torch.Tensor, batch: ForwardBatch, backend: AttentionBackend, rope_batches) -> torch.Tensor:
        # x: [T, hidden]
        qkv = self.qkv_proj(x)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)
        k = k.view(-1, self.num_kv_heads, self.head_dim)
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.rope(rope_batches[self.rope_index], q, k)
        o = backend.forward(q, k, v, self.layer_id, batch, self.sm_scale, **self.attn_options)  # [T, Hq, D]
        out = self.o_proj(o.reshape(-1, self.q_size))
        return out if self.tp is None else self.tp.all_reduce(out)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=cfg.mlp_bias)
        self.gelu = cfg.hidden_act == "gelu_pytorch_tanh"
        self.fused: bool | None = None
        self.tp: ModelShard | None = None  # tensor parallelism: down_proj is row-parallel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        if self.gelu:
            gate, up = gate_up.chunk(2, dim=-1)
            act = F.gelu(gate, approximate="tanh") * up
        else:
            act = None
            if runs_fused(self.fused, x):
                act = silu_and_mul(gate_up)
            elif self.fused is None and native_ops.usable(gate_up):
                act = native_ops.silu_and_mul(gate_up)
            if act is None:
                act = silu_and_mul_ref(gate_up)
        out = self.down_proj(act)
        return out if self.tp is None else self.tp.all_reduce(out)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_id: int, rope: RotaryEmbedding, rope_index: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer_id, rope, rope_index)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)
        # Gemma: post_attention_layernorm normalizes the attention output; the MLP has its own
        # norms before and after.
        self.pre_feedforward_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps) if cfg.sandwich_norms else None
        self.post_feedforward_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps) if cfg.sandwich_norms else None

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None, batch: ForwardBatch,
                backend: AttentionBackend, rope_batches) -> tuple[torch.Tensor, torch.Tensor]:
        """-> (this layer's MLP output, the residual stream before it); their sum is the
        layer's output, formed by the next layer's fused add + norm."""
        if residual is None:
            h, residual = self.input_layernorm(x), x
        else:
            h, residual = self.input_layernorm(x, residual)
        h = self.self_attn(h, batch, backend, rope_batches)
        if self.pre_feedforward_layernorm is None:
            h, residual = self.post_attention_layernorm(h, residual)
            return self.mlp(h), residual
        h, residual = self.pre_feedforward_layernorm(self.post_attention_layernorm(h), residual)
        return self.post_feedforward_layernorm(self.mlp(h)), residual


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        rotary_dim = cfg.rotary_dim or cfg.head_dim
        self.rope = RotaryEmbedding(rotary_dim, cfg.max_position_embeddings, cfg.rope_theta, cfg.rope_scaling)
        # Gemma 3's sliding layers turn at their own base frequency.
        self.local_rope = None
        if cfg.local_rope_theta is not None and cfg.has_sliding_window:
            self.local_rope = RotaryEmbedding(rotary_dim, cfg.max_position_embeddings, cfg.local_rope_theta,
                                              cfg.local_rope_scaling)
        # Left uninitialized, as a loader fills every weight: nn.Embedding's normal_ init on the
        # meta device (where loader.py builds the model) imports seconds of torch modules.
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size,
                                         _weight=torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, *self._layer_rope(i)) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.tie_weights()
        # Tensor parallelism (parallel/shard.py): vocabulary-parallel embedding and LM head.
        self.tp: ModelShard | None = None
        # The C decode step (native_step.py): None until a CPU step asks, False where it cannot run.
        self._native_plan: NativeDecodeStep | bool | None = None

    def _layer_rope(self, layer_id: int) -> tuple[RotaryEmbedding, int]:
        if self.local_rope is not None and self.config.window(layer_id) is not None:
            return self.local_rope, 1
        return self.rope, 0

    @property
    def ropes(self) -> list[RotaryEmbedding]:
        return [self.rope] if self.local_rope is None else [self.rope, self.local_rope]

    def build_rope_tables(self, device: torch.device) -> None:
        for rope in self.ropes:
            rope.build_tables(device)

    def use_fused_ops(self, fused: bool | None) -> None:
        """Triton kernels for norms, RoPE and SiLU-and-mul: True, False, or None = on CUDA."""
        for m in self.modules():
            if hasattr(m, "fused"):
                m.fused = fused

    def tie_weights(self) -> None:
        """Share the embedding with the LM head (again after ``to_empty``, which unties)."""
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, backend: AttentionBackend) -> torch.Tensor:
        """Logits [B, vocab] (fp32) at each request's last new token."""
        ids = batch.input_ids
        x = self.embed_tokens(ids) if self.tp is None else self.tp.embed(self.embed_tokens, ids)  # [T, hidden]
        if self.config.embed_scale is not None:
            x = x * torch.tensor(self.config.embed_scale, dtype=x.dtype)
        step = self._native_step(x, batch, backend)
        if step is not None:  # a small CPU decode step: the layers as direct C calls (native_step.py)
            x, residual = step.run(x, batch, backend)
        else:
            rope_batches = [rope.prepare(batch.positions) for rope in self.ropes]
            residual = None
            for layer in self.layers:
                x, residual = layer(x, residual, batch, backend, rope_batches)
        rows = batch.logits_indices
        x, _ = self.norm(x[rows], residual[rows])  # [B, hidden]
        logits = self.lm_head(x).float()
        if self.tp is not None:
            logits = self.tp.gather_logits(logits)  # [B, vocab]
        cap = self.config.final_logit_softcap
        return logits if cap is None else torch.tanh(logits / cap) * cap

    def _native_step(self, x: torch.Tensor, batch: ForwardBatch, backend: AttentionBackend) -> NativeDecodeStep | None:
        """The C decode plan when it takes this step; built on the first CPU step that could use
        it, and again when a weight it read was replaced."""
        if torch.compiler.is_compiling() or x.device.type != "cpu":
            return None  # (a compiled step traces the modules)
        plan = self._native_plan
        if plan is None or (plan is not False and not plan.current()):
            plan = self._native_plan = NativeDecodeStep.build(self) or False
        return plan if plan is not False and plan.takes(x, batch, backend) else None

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy Hugging Face-named tensors in, merging q/k/v and gate/up on the way."""
        params = dict(self.named_parameters(remove_duplicate=False))
        loaded: set[str] = set()
        for name, tensor in weights:
            target, offset = map_hf_name(name, self.config)
            if target is None:
                continue
            if target not in params:
                raise ValueError(f"weights: unexpected tensor {name!r}")
            param = params[target]
            if self.config.norm_weight_offset and target.endswith("norm.weight"):
                tensor = tensor.float() + self.config.norm_weight_offset  # Gemma's (1 + w), in fp32
            with torch.no_grad():
                if offset is None:
                    param.copy_(tensor.to(param.dtype))
                else:
                    param[offset : offset + tensor.shape[0]].copy_(tensor.to(param.dtype))
            loaded.add(target)
        if self.config.tie_word_embeddings:
            loaded.add("lm_head.weight")
        missing = {n for n in params if n not in loaded}
        if missing:
            raise ValueError(f"weights: missing tensors {sorted(missing)[:5]}")


def map_hf_name(name: str, cfg: ModelConfig) -> tuple[str | None, int | None]:
    """HF tensor name -> (our parameter name, row offset inside a merged weight)."""
    if "rotary_emb" in name or name.startswith(_SKIPPED_PREFIXES):
        return None, None
    for prefix in _LANGUAGE_MODEL_PREFIXES:  # Gemma 3's multimodal checkpoints
        if name.startswith(prefix):
            name = "model." + name.removeprefix(prefix)
    if name in ("lm_head.weight", "language_model.lm_head.weight"):
        return (None, None) if cfg.tie_word_embeddings else ("lm_head.weight", None)
    name = name.removeprefix("model.")
    q = cfg.num_heads * cfg.head_dim
    kv = cfg.num_kv_heads * cfg.head_dim
    merged = {
        "self_attn.q_proj": ("self_attn.qkv_proj", 0),
        "self_attn.k_proj": ("self_attn.qkv_proj", q),
        "self_attn.v_proj": ("self_attn.qkv_proj", q + kv),
        "mlp.gate_proj": ("mlp.gate_up_proj", 0),
        "mlp.up_proj": ("mlp.gate_up_proj", cfg.intermediate_size),
    }
    for src, (dst, offset) in merged.items():
        if f".{src}." in name:
            return name.replace(src, dst), offset
    return name, None


_SKIPPED_PREFIXES = ("vision_tower.", "model.vision_tower.", "multi_modal_projector.", "model.multi_modal_projector.")
_LANGUAGE_MODEL_PREFIXES = ("model.language_model.", "language_model.model.")
