"""A small CPU decode step as a short list of C calls per layer, no module calls.

Eagerly, each decoder layer of a decode step is about fifteen Python frames (modules, the
quantized linear's dispatch, the attention backend) around ten kernels, and on a small model
the frames cost more than the kernels: at one row, under cProfile, the embedded model spent
7.0 of 16.2 ms a step in the int4 kernel and most of the rest in Python around it. Where every layer is the plain shape (int4 weights with int8 activations,
RMSNorm, SiLU MLP, no biases, qk-norms, windows or soft-caps, a plain KV pool in the model's
dtype), ``NativeDecodeStep`` runs a layer as ten direct calls into the C kernels the eager
path uses one by one (``native_ops``, ``quant/native_int4``, ``attention/native_decode``),
on buffers allocated once per step: the same functions on the same values, so the same
logits. Past a dense copy's threshold (``dense_weights_above``) the matmuls are the copies'
``torch.mm``, as the modules' ``F.linear``. Anything else, and every step with a prefill row,
runs the modules as before.
"""

from __future__ import annotations

import math
import operator

import torch

from sglang_lite.attention import native_decode
from sglang_lite.model import native_ops
from sglang_lite.quant import native_int4
from sglang_lite.quant.modules import QuantLinear

_DTYPES = {torch.float32: 0, torch.bfloat16: 1}
_WEIGHT_Q = operator.attrgetter("weight_q")


class _Linear:
    """One int4 linear's kernel arguments, its dense copy's transpose (None without one), and
    the module's weight they were read from."""

    __slots__ = ("module", "weight", "args", "out_features", "in_features", "max_rows", "dense_t")

    def __init__(self, module, int4, max_rows: float, dense: torch.Tensor | None):
        self.module, self.weight = module, module.weight_q  # kept: the pointers below stay valid
        self.max_rows = max_rows  # the most rows the module sends to the int4 weight
        self.dense_t = None if dense is None else dense.t()  # what F.linear multiplies above them
        self.out_features, self.in_features = int4.out_features, int4.in_features
        self.args = (int4.packed.data_ptr(), int4.packed.shape[0], int4.scales.data_ptr(),
                     native_int4.scales_code(int4.scales), int4.group)


def _int4_of(linear):
    """The packed int4 weight ``linear`` runs with int8 activations (up to its dense copy's rows), or None."""
    from sglang_lite.quant.by_rows import ByRowsWeight
    from sglang_lite.quant.int4 import Int4Weight

    if not isinstance(linear, QuantLinear) or linear.bias is not None:
        return None
    w = linear.weight_q
    rows, dense = math.inf, None
    if isinstance(w, ByRowsWeight):  # the packed weight up to its row limit, the dense copy above
        w, rows, dense = w.packed, w.max_rows, w.dense
    if not isinstance(w, Int4Weight) or not w.int8_activations or native_int4.scales_code(w.scales) is None:
        return None
    return _Linear(linear, w, rows, dense)


class NativeDecodeStep:
    """The per-layer arguments of the C decode path, built once from a model (``build``)."""

    def __init__(self, model, layers: list[tuple], dtype: torch.dtype):
        cfg = model.config
        self.dtype, self.code, self.size = dtype, _DTYPES[dtype], torch.empty(0, dtype=dtype).element_size()
        self.hidden, self.inter = cfg.hidden_size, cfg.intermediate_size
        self.hq, self.hkv, self.d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_size, self.kv_size = self.hq * self.d, self.hkv * self.d
        self.rope = model.rope
        self.layers = layers  # (input norm, qkv, o, post norm, gate_up, down, eps, sm_scale) per layer
        self.linears = [layer[j] for layer in layers for j in (1, 2, 4, 5)]
        self._modules, self._weights = [lin.module for lin in self.linears], [lin.weight for lin in self.linears]
        self._version = QuantLinear.weights_version
        self.max_rows = min(lin.max_rows for lin in self.linears)  # the rows the modules would multiply in int4
        # Above them the modules multiply each dense copy (F.linear): the plan does too, where
        # every linear has one and all send the same rows to int4 (else those steps run the modules).
        self.dense = (all(lin.dense_t is not None and lin.max_rows == self.max_rows for lin in self.linears)
                      and all(lin.dense_t.dtype == dtype for lin in self.linears))

    @classmethod
    def build(cls, model) -> NativeDecodeStep | None:
        """The plan for ``model``, or None where a layer is not the plain shape (module docstring)."""
        cfg = model.config
        dtype = model.norm.weight.dtype
        q_size, kv_size = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
        shapes = ((cfg.hidden_size, q_size + 2 * kv_size), (q_size, cfg.hidden_size),
                  (cfg.hidden_size, 2 * cfg.intermediate_size), (cfg.intermediate_size, cfg.hidden_size))
        if (dtype not in _DTYPES or model.tp is not None or model.local_rope is not None or cfg.qk_norm
                or cfg.sandwich_norms or cfg.hidden_act == "gelu_pytorch_tanh" or cfg.attn_logit_softcap is not None
                or cfg.num_heads % cfg.num_kv_heads or cfg.num_heads // cfg.num_kv_heads > 16 or cfg.head_dim > 256
                or model.rope.fused is not None or model.rope.rotary_dim % 2
                or model.rope.rotary_dim > min(cfg.head_dim, 512)):
            return None
        layers = []
        for layer in model.layers:
            attn, mlp = layer.self_attn, layer.mlp
            linears = [_int4_of(m) for m in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)]
            norms = (layer.input_layernorm, layer.post_attention_layernorm)
            if (any(lin is None or (lin.in_features, lin.out_features) != shape for lin, shape in zip(linears, shapes))
                    or attn.attn_options or attn.q_norm is not None
                    or attn.tp is not None or mlp.tp is not None or mlp.gelu
                    or any(n.weight.dtype != dtype or n.fused is not None for n in norms) or mlp.fused is not None
                    or norms[0].eps != norms[1].eps):
                return None
            qkv, o, gate_up, down = linears
            layers.append((norms[0].weight, qkv, o, norms[1].weight, gate_up, down, norms[0].eps, attn.sm_scale))
        return cls(model, layers, dtype)

    def current(self) -> bool:
        """Whether every weight is still the one the plan read (quantization can swap them).
        Asked every step: where no QuantLinear's weight was set since the last check
        (``QuantLinear.weights_version``) an int compare; else every weight, by identity (over
        a step's cold caches the 120 checks cost ~0.1 ms)."""
        version = QuantLinear.weights_version
        if version == self._version:
            return True
        if not all(map(operator.is_, map(_WEIGHT_Q, self._modules), self._weights)):
            return False
        self._version = version  # (another model's weights, say)
        return True

    def takes(self, x: torch.Tensor, batch, backend) -> bool:
        """Whether this step can run here: all decode rows (the torch backend's), no more than
        the modules would send to the int4 kernel, in the plan's dtype, a plain pool in it,
        eagerly, the C kernels built."""
        from sglang_lite.attention.torch_backend import TorchAttentionBackend

        if not (isinstance(backend, TorchAttentionBackend) and backend._decode is not None and not backend._extend
                and 1 <= x.shape[0] and (x.shape[0] <= self.max_rows or self.dense)
                and x.dtype == self.dtype and x.device.type == "cpu"
                and not torch.compiler.is_compiling()):
            return False
        pool = backend.kv_pool
        return (not pool.format.scaled and pool.dtype == self.dtype and backend._decode.page_table.shape[0] == x.shape[0]
                and native_ops.module() is not None and native_int4.module() is not None
                and native_decode.module() is not None)

    def run(self, x: torch.Tensor, batch, backend) -> tuple[torch.Tensor, torch.Tensor]:
        """Every layer on ``x`` [B, hidden] (the embeddings): (last MLP output, residual), as the
        modules' loop returns them."""
        ops, int4_mm, attend = native_ops.module(), native_int4.module().int4_mm, native_decode.module().decode_attention
        b, code, size = x.shape[0], self.code, self.size
        hidden, q_size, kv_size = self.hidden, self.q_size, self.kv_size
        qkv_width = q_size + 2 * kv_size
        pool, rows = backend.kv_pool, backend._decode
        positions, slots = batch.positions, batch.out_cache_loc
        cos, sin = self.rope.cos_cache, self.rope.sin_cache
        rot = self.rope.rotary_dim
        pages, lens = rows.page_table, rows.lens
        if positions.dtype != torch.int64 or slots.dtype != torch.int64:
            positions, slots = positions.long(), slots.long()
        positions, slots = positions.contiguous(), slots.contiguous()
        residual = x.clone()
        out = torch.empty_like(x)  # each layer's o_proj and down_proj output
        normed = torch.empty_like(x)
        qkv = torch.empty((b, qkv_width), dtype=x.dtype)
        attn = torch.empty((b, q_size), dtype=x.dtype)
        gate_up = torch.empty((b, 2 * self.inter), dtype=x.dtype)
        act = torch.empty((b, self.inter), dtype=x.dtype)
        p_res, p_out, p_norm, p_qkv = residual.data_ptr(), out.data_ptr(), normed.data_ptr(), qkv.data_ptr()
        p_attn, p_gu, p_act = attn.data_ptr(), gate_up.data_ptr(), act.data_ptr()
        p_k, p_v = p_qkv + q_size * size, p_qkv + (q_size + kv_size) * size
        if b <= self.max_rows:
            def mm(src, lin, dst):
                int4_mm(src.data_ptr(), code, b, lin.in_features, *lin.args, dst.data_ptr(), lin.out_features, code)
        else:  # the dense copies, as the modules' F.linear multiplies them (into the step's buffers)
            def mm(src, lin, dst):
                torch.mm(src, lin.dense_t, out=dst)
        num_slots = pool.k_buffers[0].shape[0]
        for i, (w_in, qkv_w, o_w, w_post, gu_w, down_w, eps, scale) in enumerate(self.layers):
            if i == 0:  # the first layer normalizes the embeddings; they are the residual
                ops.rmsnorm(p_res, 0, w_in.data_ptr(), p_norm, 0, hidden, 0, b, hidden, eps, code)
            else:  # residual += the last MLP output, then normalized
                ops.rmsnorm(p_out, p_res, w_in.data_ptr(), p_norm, p_res, hidden, hidden, b, hidden, eps, code)
            mm(normed, qkv_w, qkv)
            bad = ops.rope(p_qkv, p_k, cos.data_ptr(), sin.data_ptr(), positions.data_ptr(), qkv_width, qkv_width,
                           cos.shape[0], b, self.hq, self.hkv, self.d, rot, code)
            if bad >= 0:
                raise native_ops.outside_tables(positions, bad, cos)
            k_buf, v_buf = pool.k_buffers[i], pool.v_buffers[i]
            if ops.store_kv(p_k, p_v, qkv_width, slots.data_ptr(), k_buf.data_ptr(), v_buf.data_ptr(), num_slots,
                            b, kv_size, size) >= 0:
                raise IndexError(f"KV store: a slot outside the pool ({num_slots} slots)")
            attend(p_qkv, k_buf.data_ptr(), v_buf.data_ptr(), pages.data_ptr(), lens.data_ptr(), p_attn, b, self.hq,
                   self.hkv, self.d, pages.shape[1], pool.page_size, scale, code, qkv_width)
            mm(attn, o_w, out)
            ops.rmsnorm(p_out, p_res, w_post.data_ptr(), p_norm, p_res, hidden, hidden, b, hidden, eps, code)
            mm(normed, gu_w, gate_up)
            ops.silu_and_mul(p_gu, p_act, 2 * self.inter, b, self.inter, code)
            mm(act, down_w, out)
        return out, residual
