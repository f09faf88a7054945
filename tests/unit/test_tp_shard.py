"""Tensor-parallel sharding (sglang_lite/parallel/shard.py): every rank's weights put back
together equal the model's, heads split along KV groups (KV heads replicated where there are
fewer than ranks), and a tp that cannot split the model is a clear error naming ``tp``."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from sglang_lite.config import EngineConfig
from sglang_lite.model.config import ModelConfig
from sglang_lite.model.llama import LlamaForCausalLM
from sglang_lite.parallel.shard import plan_heads, plan_layout, shard_model, split_evenly

# SmolLM2-135M's head layout (9 query heads, 3 KV heads) at toy width, odd sizes elsewhere so
# uneven splits and vocabulary padding are exercised.
SMOL_HEADS = ModelConfig(vocab_size=101, hidden_size=72, intermediate_size=40, num_layers=2, num_heads=9,
                         num_kv_heads=3, head_dim=8, tie_word_embeddings=True, qkv_bias=True, o_bias=True,
                         mlp_bias=True)
# Fewer KV heads than ranks (tp=4): each KV head on two ranks, its query heads split between them.
FEW_KV = dataclasses.replace(SMOL_HEADS, num_heads=8, num_kv_heads=2, tie_word_embeddings=False)


def _model(cfg: ModelConfig) -> LlamaForCausalLM:
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():  # biases too: nn.Linear leaves none at zero by chance
            p.normal_()
    return model.eval()


def _shards(model, tp):
    layout = plan_layout(model.config, tp)
    return layout, [shard_model(copy.deepcopy(model), layout, r, None) for r in range(tp)]


def _qkv_parts(attn, cfg, rank_heads):
    d = cfg.head_dim
    nq, nkv = len(rank_heads.q_heads), len(rank_heads.kv_heads)
    w = attn.qkv_proj.weight
    return w[: nq * d], w[nq * d : (nq + nkv) * d], w[(nq + nkv) * d :]


@pytest.mark.parametrize(("cfg", "tp"), [(SMOL_HEADS, 1), (SMOL_HEADS, 2), (SMOL_HEADS, 3), (FEW_KV, 4)])
def test_shards_put_together_equal_the_model(cfg, tp):
    model = _model(cfg)
    layout, shards = _shards(model, tp)
    d, q_size, kv_size = cfg.head_dim, cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    for i, layer in enumerate(model.layers):
        attn, mlp = layer.self_attn, layer.mlp
        ranks = [s.layers[i] for s in shards]
        full_q, full_k, full_v = attn.qkv_proj.weight.split([q_size, kv_size, kv_size])
        # query heads: each on exactly one rank, in order
        q = torch.cat([_qkv_parts(r.self_attn, cfg, layout.heads[n])[0] for n, r in enumerate(ranks)])
        assert torch.equal(q, full_q)
        # KV heads: every rank holds exactly its heads' rows; together they cover all heads
        for n, r in enumerate(ranks):
            kv = layout.heads[n].kv_heads
            _, k, v = _qkv_parts(r.self_attn, cfg, layout.heads[n])
            assert torch.equal(k, full_k[kv.start * d : kv.stop * d])
            assert torch.equal(v, full_v[kv.start * d : kv.stop * d])
        assert set().union(*(set(h.kv_heads) for h in layout.heads)) == set(range(cfg.num_kv_heads))
        # qkv bias follows the same rows
        q_bias = torch.cat([r.self_attn.qkv_proj.bias[: len(layout.heads[n].q_heads) * d] for n, r in enumerate(ranks)])
        assert torch.equal(q_bias, attn.qkv_proj.bias[:q_size])
        # row-parallel: input columns concatenate; the bias sums to the original once
        assert torch.equal(torch.cat([r.self_attn.o_proj.weight for r in ranks], 1), attn.o_proj.weight)
        assert torch.equal(sum(r.self_attn.o_proj.bias for r in ranks), attn.o_proj.bias)
        assert torch.equal(torch.cat([r.mlp.down_proj.weight for r in ranks], 1), mlp.down_proj.weight)
        assert torch.equal(sum(r.mlp.down_proj.bias for r in ranks), mlp.down_proj.bias)
        gate, up = mlp.gate_up_proj.weight.chunk(2)
        assert torch.equal(torch.cat([r.mlp.gate_up_proj.weight.chunk(2)[0] for r in ranks]), gate)
        assert torch.equal(torch.cat([r.mlp.gate_up_proj.weight.chunk(2)[1] for r in ranks]), up)
        for n, r in enumerate(ranks):  # the forward's views match the shard's heads
            assert r.self_attn.q_size == len(layout.heads[n].q_heads) * d
            assert r.self_attn.kv_size == len(layout.heads[n].kv_heads) * d
    vocab = torch.cat([s.embed_tokens.weight for s in shards])
    assert torch.equal(vocab[: cfg.vocab_size], model.embed_tokens.weight)
    assert not vocab[cfg.vocab_size :].any()  # padding rows of the last shard
    head = torch.cat([s.lm_head.weight for s in shards])[: cfg.vocab_size]
    assert torch.equal(head, model.lm_head.weight)
    for s in shards:
        assert (s.lm_head.weight is s.embed_tokens.weight) == cfg.tie_word_embeddings


@pytest.mark.parametrize(("heads", "kv", "tp"), [(9, 3, 1), (9, 3, 2), (9, 3, 3), (9, 3, 9), (8, 2, 4),
                                                 (32, 8, 8), (32, 8, 3), (32, 8, 16), (4, 1, 4)])
def test_every_query_head_reads_its_own_kv_head_locally(heads, kv, tp):
    """Each rank's heads keep the grouped-query layout the attention backends assume (local q
    head i reads local kv head i // (local q heads / local kv heads))."""
    group = heads // kv
    plan = plan_heads(heads, kv, tp)
    assert [h for r in plan for h in r.q_heads] == list(range(heads))  # each query head once
    for r in plan:
        local_group = len(r.q_heads) // len(r.kv_heads)
        assert len(r.q_heads) == local_group * len(r.kv_heads)
        for i, h in enumerate(r.q_heads):
            assert r.kv_heads[i // local_group] == h // group


def test_smollm2_heads_over_two_ranks_split_by_kv_group():
    plan = plan_heads(9, 3, 2)
    assert [(len(r.q_heads), len(r.kv_heads)) for r in plan] == [(6, 2), (3, 1)]


def test_split_evenly():
    assert [len(r) for r in split_evenly(10, 3)] == [4, 3, 3]
    assert [len(r) for r in split_evenly(1536, 2)] == [768, 768]


@pytest.mark.parametrize(("tp", "words"), [(0, ">= 1"), (10, "at most 9"), (4, "multiple of 3"),
                                           (6, "multiple of 3")])
def test_a_tp_that_cannot_split_the_heads_is_refused(tp, words):
    with pytest.raises(ValueError, match=rf"^tp: .*{words}"):
        plan_heads(9, 3, tp)


@pytest.mark.parametrize(("options", "field"), [({"tp": 0}, "tp"), ({"tp": -2}, "tp"), ({"tp": True}, "tp"),
                                                ({"tp": 2, "quantization": "gguf"}, "quantization")])
def test_bad_tp_options_are_config_errors(options, field):
    with pytest.raises(ValueError, match=rf"^{field}: "):
        EngineConfig.create(device="cpu", **options)


def test_tp_resolves_quantization_auto_to_none():
    assert EngineConfig.create(device="cpu", dtype="bfloat16", tp=2).quantization == "none"


def test_tp_size_is_sglangs_name_for_tp():
    assert EngineConfig.create(device="cpu", tp_size=3).tp == 3
    with pytest.raises(ValueError, match="^tp_size: "):
        EngineConfig.create(device="cpu", tp=2, tp_size=2)


def test_a_plan_rebuilds_the_forward_batch_with_its_own_page_table_rows():
    """What a worker runs: the same tensors, and request i's slots in row i of the table."""
    from sglang_lite.attention.base import ForwardBatch, ForwardMode
    from sglang_lite.parallel.plan import _pack, _unpack

    table = torch.arange(6 * 40, dtype=torch.int32).view(6, 40)  # 6 request rows
    rows, prefix, extend = [4, 1], [5, 0], [1, 3]
    seq = [p + n for p, n in zip(prefix, extend)]
    fb = ForwardBatch(
        mode=ForwardMode.EXTEND, input_ids=torch.tensor([7, 8, 9, 10]), positions=torch.tensor([5, 0, 1, 2]),
        out_cache_loc=torch.tensor([165, 40, 41, 42]), req_pool_indices=torch.tensor(rows),
        seq_lens=torch.tensor(seq), prefix_lens=torch.tensor(prefix), extend_lens=torch.tensor(extend),
        extend_start_loc=torch.tensor([0, 1]), logits_indices=torch.tensor([0, 3]), req_to_token=table,
        seq_lens_cpu=seq, prefix_lens_cpu=prefix, extend_lens_cpu=extend, req_pool_indices_cpu=rows)
    header, payload = _pack(fb)
    got = _unpack(header.tolist(), payload, torch.device("cpu"))
    assert got.mode is ForwardMode.EXTEND and got.req_pool_indices_cpu == [0, 1]
    for name in ("input_ids", "positions", "out_cache_loc", "seq_lens", "prefix_lens", "extend_lens",
                 "extend_start_loc", "logits_indices"):
        assert torch.equal(getattr(got, name), getattr(fb, name)), name
    assert (got.seq_lens_cpu, got.prefix_lens_cpu, got.extend_lens_cpu) == (seq, prefix, extend)
    assert got.req_to_token.dtype == torch.int32
    for i, row in enumerate(rows):
        assert torch.equal(got.req_to_token[got.req_pool_indices[i], : seq[i]], table[row, : seq[i]])


@pytest.mark.parametrize("method", ["int4", "fp8"])
def test_quantized_shards_hold_the_codes_of_the_whole_model(method):
    """Each rank packs its float shard (``load_shard``); int4 / fp8 groups of 32 input features
    never straddle two ranks, so the shards' weights, unpacked and put together, equal the
    whole model's packed at tp=1 exactly."""
    from sglang_lite.model.loader import ModelSource, load_model
    from sglang_lite.parallel.launcher import load_shard

    source = ModelSource("dummy-tiny", None, dummy_preset="tiny")
    cfg = EngineConfig.create(model="dummy:tiny", device="cpu", dtype="float32", tp=2, quantization=method)
    whole = load_model(source, torch.float32, torch.device("cpu"), cfg.seed, method)
    layout = plan_layout(whole.config, 2)
    shards = [load_shard(cfg, source, layout, r, None, torch.device("cpu")) for r in range(2)]

    def w(module):
        return module.weight_q.dequantize(torch.float32)

    for i, layer in enumerate(whole.layers):
        ranks = [s.layers[i] for s in shards]
        assert torch.equal(torch.cat([w(r.self_attn.o_proj) for r in ranks], 1), w(layer.self_attn.o_proj))
        assert torch.equal(torch.cat([w(r.mlp.down_proj) for r in ranks], 1), w(layer.mlp.down_proj))
        gate, up = w(layer.mlp.gate_up_proj).chunk(2)
        assert torch.equal(torch.cat([w(r.mlp.gate_up_proj).chunk(2)[0] for r in ranks]), gate)
        assert torch.equal(torch.cat([w(r.mlp.gate_up_proj).chunk(2)[1] for r in ranks]), up)
        q_size = whole.config.num_heads * whole.config.head_dim
        q = torch.cat([w(r.self_attn.qkv_proj)[: r.self_attn.q_size] for r in ranks])
        assert torch.equal(q, w(layer.self_attn.qkv_proj)[:q_size])
    head = torch.cat([w(s.lm_head) for s in shards])[: whole.config.vocab_size]
    assert torch.equal(head, w(whole.lm_head))
    assert all(s.embed_tokens.weight_q is s.lm_head.weight_q for s in shards)  # tied, packed once
