"""Cache policies in isolation: regions, selection, rollback. Keys carry their token's index so
that which tokens a cache holds can be read back directly."""
import dataclasses

import pytest
import torch

from triforce.runtime.cache_full import FullCache
from triforce.runtime.cache_retrieval import RetrievalCache, chunk_scores, select_positions
from triforce.runtime.cache_streaming import StreamingCache
from triforce.runtime.config import ModelConfig
from triforce.runtime.rope import Rope

CFG = ModelConfig(architecture="LlamaForCausalLM", vocab_size=16, hidden_size=8, intermediate_size=8, num_layers=2,
                  num_heads=4, num_kv_heads=2, head_dim=4, max_position_embeddings=4096, rms_norm_eps=1e-6,
                  rope_theta=10000.0, rope_scaling=None, tie_word_embeddings=True, qkv_bias=False, o_bias=False,
                  mlp_bias=False, sliding_window=None)


def feed(cache, first: int, count: int):
    """Feeds tokens first..first+count-1 whose V rows hold their index; returns the visible V of layer 0."""
    cache.begin(count)
    v = torch.arange(first, first + count, dtype=torch.float32).view(1, 1, count, 1).expand(1, 2, count, 4)
    q = torch.zeros(1, 4, count, 4)
    outs = [cache.update(layer, q, torch.zeros(1, 2, count, 4), v.clone())[1] for layer in range(CFG.num_layers)]
    out = outs[0]
    cache.end()
    return out[0, 0, :, 0].long().tolist()  # token indices visible to the pass, in slot order


def streaming(sinks=4, window=8, block=None, scratch=0):
    return StreamingCache(CFG, Rope(CFG, 64, torch.device("cpu"), torch.float32), 1, sinks, window,
                          torch.device("cpu"), torch.float32, scratch=scratch, evict_block=block)


def feed_committed(cache, first, count):
    visible = feed(cache, first, count)
    cache.commit(first + count)
    return visible


def test_streaming_keeps_sinks_and_the_most_recent_tokens():
    cache = streaming(sinks=4, window=8, block=1, scratch=4)
    assert feed_committed(cache, 0, 6) == list(range(6))
    feed_committed(cache, 6, 6)
    visible = feed_committed(cache, 12, 4)   # a pass sees sinks + window + itself (in scratch)
    assert visible == list(range(16))
    assert cache.get_seq_length() == 16
    # once committed, tokens beyond sinks + window are evicted, oldest first
    assert feed_committed(cache, 16, 1) == [0, 1, 2, 3] + list(range(8, 17))
    assert feed_committed(cache, 17, 1) == [0, 1, 2, 3] + list(range(9, 18))


def test_streaming_rollback_keeps_every_committed_token():
    speculating, plain = (streaming(sinks=4, window=8, block=1, scratch=4) for _ in range(2))
    for cache in (speculating, plain):
        feed_committed(cache, 0, 8)
        feed_committed(cache, 8, 3)           # 11 committed tokens
    feed(speculating, 11, 3)                  # 3 speculative tokens: they land in scratch...
    speculating.crop(11)                      # ...and are rejected
    # the next pass sees exactly what it sees in a cache that never saw the rejected tokens
    for t in range(11, 30):
        assert feed_committed(speculating, t, 1) == feed_committed(plain, t, 1)
    assert speculating.get_seq_length() == 30 and speculating.forced_evictions == 0


def test_streaming_forced_evictions_are_counted_and_reported():
    from types import SimpleNamespace

    from triforce.runtime.speculate import LevelStats, level_stats
    cache = streaming(sinks=4, window=8, block=1, scratch=2)
    feed_committed(cache, 0, 12)
    feed(cache, 12, 3)                        # 3 speculative tokens, 2 scratch slots: one forced eviction
    assert cache.forced_evictions == 1
    stats = level_stats([SimpleNamespace(name="drafter", stats=LevelStats(), cache=cache)])
    assert stats["levels"]["drafter"]["forced_evictions"] == 1


def test_streaming_queries_and_keys_use_slot_positions():
    cache = streaming(sinks=2, window=4, block=1)
    feed_committed(cache, 0, 6)
    cos, sin = cache.begin(1)             # the 7th token takes the last slot, not position 6
    slot_cos, _ = Rope(CFG, 64, torch.device("cpu"), torch.float32).tables(torch.tensor([[5]]))
    torch.testing.assert_close(cos, slot_cos)


def test_streaming_refuses_to_restore_evicted_tokens():
    cache = streaming(sinks=2, window=4, block=1)
    feed_committed(cache, 0, 6)
    feed_committed(cache, 6, 4)
    with pytest.raises(ValueError, match="evicted"):
        cache.crop(3)


def test_streaming_block_eviction_bounds_the_window():
    cache = streaming(sinks=4, window=16, block=4)
    feed_committed(cache, 0, 4)
    for t in range(4, 100):
        visible = feed_committed(cache, t, 1)
        assert visible[:4] == [0, 1, 2, 3] and visible[-1] == t
        # nothing evicted until sinks + window (20) fill; then between window - block + 1 and the full window
        assert len(visible) == t + 1 if t < 20 else 4 + 13 <= len(visible) <= 20
        assert visible[4:] == list(range(visible[4], t + 1))  # recent tokens are contiguous


def test_chunk_scores_sum_the_query_group_of_each_kv_head():
    keys = torch.zeros(1, 2, 16, 4)       # 2 KV heads, 4 chunks of 4
    keys[0, 0, 8:12, 0] = 1.0             # KV head 0: chunk 2 points along dim 0
    keys[0, 1, 4:8, 1] = 1.0              # KV head 1: chunk 1 points along dim 1
    query = torch.zeros(1, 4, 4)          # H=4, G=2: heads 0,1 read KV head 0; heads 2,3 KV head 1
    query[0, 0, 0], query[0, 1, 0] = 1.0, 2.0
    query[0, 3, 1] = 5.0
    scores = chunk_scores(keys, query, 4)
    assert scores[0, 0].tolist() == [0, 0, 3.0, 0]
    assert scores[0, 1].tolist() == [0, 5.0, 0, 0]


def test_select_positions_keeps_chunk0_the_best_chunks_and_the_tail():
    scores = torch.tensor([[[9.0, 1.0, 5.0, 3.0, 4.0], [0.0, 7.0, 1.0, 2.0, 6.0]]])  # [B=1, Hkv=2, C=5]
    pos = select_positions(scores, chunk=2, n_chunks=3, tail=1)                    # sequence of 11
    assert pos[0, 0].tolist() == [0, 1, 4, 5, 8, 9, 10]    # chunks 0, 2, 4 + tail 10
    assert pos[0, 1].tolist() == [0, 1, 2, 3, 8, 9, 10]    # chunks 0 (always), 1, 4 + tail
    recent = select_positions(scores, chunk=2, n_chunks=3, tail=1, recent_chunks=2)
    assert recent[0, 0].tolist() == [0, 1, 6, 7, 8, 9, 10]  # chunk 0 + the last two chunks, whatever they score


def test_retrieval_rebuild_selects_per_kv_head_and_generated_tokens_never_evict():
    rope = Rope(CFG, 256, torch.device("cpu"), torch.float32)
    full = FullCache(CFG, rope, 1, 128, torch.device("cpu"), torch.float32)
    full.begin(43)                                       # 43 tokens: 10 chunks of 4 + a tail of 3
    for layer in range(2):
        full.k[layer, 0, :, :43] = torch.randn(2, 43, 4)
        full.v[layer, 0, :, :43] = torch.arange(43.0).view(1, 43, 1)
    full._new = 0
    full.length = 43
    full.last_query.normal_()
    cache = RetrievalCache(CFG, rope, 1, budget=15, chunk=4, generated_capacity=10,
                           device=torch.device("cpu"), dtype=torch.float32)
    cache.fill_from(full, 43)
    assert cache.get_seq_length() == 43
    for layer in range(2):
        scores = chunk_scores(full.k[layer, :, :, :40], full.last_query[layer], 4)   # [1, 2, 10]
        for head in range(2):
            kept = cache.v[layer, 0, head, :cache.selected, 0].long().tolist()
            best = sorted(scores[0, head, 1:].topk(2).indices.add(1).tolist())    # (15 - 3) // 4 - 1 = 2
            expected = [0, 1, 2, 3] + [c * 4 + i for c in best for i in range(4)] + [40, 41, 42]
            assert kept == expected
    for t in range(43, 53):                              # generated tokens fill their own region
        visible = feed(cache, t, 1)
    assert visible[:12] == cache.v[0, 0, 0, :12, 0].long().tolist() and visible[-10:] == list(range(43, 53))
    cache.crop(48)
    assert cache.get_seq_length() == 48 and feed(cache, 48, 1)[-6:] == [43, 44, 45, 46, 47, 48]


def test_retrieval_keeps_everything_when_the_context_fits_the_budget():
    rope = Rope(CFG, 64, torch.device("cpu"), torch.float32)
    full = FullCache(CFG, rope, 1, 64, torch.device("cpu"), torch.float32)
    feed(full, 0, 10)
    cache = RetrievalCache(CFG, rope, 1, budget=16, chunk=4, generated_capacity=8,
                           device=torch.device("cpu"), dtype=torch.float32)
    cache.fill_from(full, 10)
    assert feed(cache, 10, 1) == list(range(11))


def test_streaming_fill_from_full_cache_equals_streaming_prefill():
    rope = Rope(CFG, 64, torch.device("cpu"), torch.float32)
    full = FullCache(CFG, rope, 1, 64, torch.device("cpu"), torch.float32)
    full.begin(20)
    raw = torch.randn(2, 1, 2, 20, 4)                    # keys before RoPE, per layer
    for layer in range(2):
        full.update(layer, torch.zeros(1, 4, 20, 4), raw[layer], raw[layer] + 1)
    full.end()
    cache = streaming(sinks=4, window=8, scratch=2)
    cache.fill_from(full, 20)
    assert cache.get_seq_length() == 20 and cache.length == 12 and cache.evicted == 8
    keep = [0, 1, 2, 3] + list(range(12, 20))
    cos, sin = rope.tables(torch.arange(12)[None])       # stored rotated by their slots
    for layer in range(2):
        torch.testing.assert_close(cache.k[layer, :, :, :12], Rope.rotate(raw[layer][:, :, keep], cos, sin),
                                   rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(cache.v[layer, :, :, :12], raw[layer][:, :, keep] + 1)


def test_streaming_keys_stay_rotated_by_their_slots_across_evictions():
    """Keys are stored rotated; when eviction moves the recent region left, they are turned back by
    as many positions: the cache then holds each visible token's key rotated by its new slot."""
    rope = Rope(CFG, 64, torch.device("cpu"), torch.float32)
    cache = streaming(sinks=4, window=8, block=3, scratch=2)
    raw = torch.randn(2, 1, 2, 40, 4, generator=torch.Generator().manual_seed(0))   # [L, B, Hkv, N, D]
    for t in range(40):
        cos, sin = cache.begin(1)
        for layer in range(2):
            v = torch.full((1, 2, 1, 4), float(t))
            cache.update(layer, torch.zeros(1, 4, 1, 4), raw[layer][:, :, t:t + 1], v)
        cache.end()
        cache.commit(t + 1)
        visible = cache.v[0, 0, 0, :cache.length, 0].long().tolist()
        slot_cos, slot_sin = rope.tables(torch.arange(cache.length)[None])
        for layer in range(2):
            torch.testing.assert_close(cache.k[layer, :, :, :cache.length],
                                       Rope.rotate(raw[layer][:, :, visible], slot_cos, slot_sin), rtol=1e-5, atol=1e-5)
    assert cache.evicted > 20


def test_streaming_skip_counts_tokens_between_the_sinks_and_the_recent_region():
    """A prefill that feeds only what the cache keeps: the sinks, skip, then the recent tokens. The
    cache then holds the same tokens at the same slots as one fed every token and committed."""
    fed, skipping = streaming(sinks=4, window=8, block=1), streaming(sinks=4, window=8, block=1)
    for t in range(20):
        feed_committed(fed, t, 1)
    feed_committed(skipping, 0, 4)
    skipping.skip(8)
    for t in range(12, 20):
        feed_committed(skipping, t, 1)
    assert skipping.get_seq_length() == fed.get_seq_length() == 20 and skipping.evicted == fed.evicted == 8
    assert feed_committed(skipping, 20, 1) == feed_committed(fed, 20, 1) == [0, 1, 2, 3] + list(range(13, 21))
    with pytest.raises(ValueError, match="skip"):
        skipping.skip(1)                     # recent tokens cached: skipping now would misplace them


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_spans_are_one_table_whatever_its_size(dtype):
    """A pass's cos/sin are slices of one table per Rope: the values of a position do not depend on
    how large the table had grown, nor on the pass's length; they are what the formula gives
    (cos/sin of position x inverse frequency, duplicated over D), and tables(positions) picks the
    same rows for any positions."""
    cfg = dataclasses.replace(CFG, head_dim=64, num_heads=2, num_kv_heads=1, hidden_size=128)
    rope = Rope(cfg, 64, torch.device("cpu"), dtype)
    cos, sin = rope.span(5, 3, 2)                                       # [B, T, D]
    assert cos.shape == sin.shape == (2, 3, 64) and cos.dtype == dtype and rope._cos.shape[0] % 64 == 0
    small = rope._cos.shape[0]
    freqs = torch.arange(5, 8).float()[:, None] * rope.inv_freq
    torch.testing.assert_close(cos[0], torch.cat((freqs, freqs), -1).cos().to(dtype), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(sin[1], torch.cat((freqs, freqs), -1).sin().to(dtype), rtol=1e-6, atol=1e-6)
    before = rope.span(0, small, 1)[0].clone()
    late_cos, _ = rope.span(3000, 2, 1)                                 # grows the table
    assert rope._cos.shape[0] >= 3002 and rope._cos.shape[0] % 64 == 0
    assert torch.equal(rope.span(0, small, 1)[0], before)              # the same bits for the rows it had
    one = torch.stack([rope.span(p, 1, 1)[0][0, 0] for p in range(5, 8)])
    assert torch.equal(one, cos[0])                                     # 1-token passes see the verify pass's rows
    picked, _ = rope.tables(torch.tensor([[3001, 6]]))
    assert torch.equal(picked[0, 0], late_cos[0, 1]) and torch.equal(picked[0, 1], cos[0, 1])


def test_rope_table_is_built_for_the_run_up_front():
    """Rope(cfg, run_length) holds positions [0, run_length) from the start, so no pass of the run
    grows it (a growth inside a timed --gamma auto probe priced that pass for the whole run), and
    its rows are the bits a table grown pass by pass gives."""
    cfg = dataclasses.replace(CFG, head_dim=64, num_heads=2, num_kv_heads=1, hidden_size=128)
    rope = Rope(cfg, 1000, torch.device("cpu"), torch.bfloat16)
    table = rope._cos
    assert table is not None and table.shape[0] >= 1000 and table.shape[0] % 64 == 0
    rope.span(998, 2, 1)
    assert rope._cos is table                                           # not rebuilt within the run's positions
    grown = Rope(cfg, 0, torch.device("cpu"), torch.bfloat16)          # lazily, pass by pass
    for end in (1, 65, 129, 999, 1000):
        grown.span(end - 1, 1, 1)
    assert torch.equal(grown.span(0, 1000, 1)[0], rope.span(0, 1000, 1)[0])
