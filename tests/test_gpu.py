"""GPU paths (CUDA, bf16/fp16, flash-attn when installed): skipped on machines without CUDA.

They check the same claims as the CPU tests against the CPU path itself: the attention backends
agree, and every mode's greedy output equals `ar` on the device. The models are tiny and random
(random weights make no claim about acceptance, only about exactness), so that a GPU machine with
none of the real assets runs them."""
import pytest
import torch

from triforce.runtime.attention import _attend_sdpa, attend
from triforce.runtime.bench.random_weights import random_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("T, S", [(1, 300), (7, 300), (64, 64), (33, 1000)])
def test_attention_backends_agree_on_cuda(T, S):
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 9, T, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(2, 3, S, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(2, 3, S, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
    reference = _attend_sdpa(q.float().cpu(), k.float().cpu(), v.float().cpu())
    torch.testing.assert_close(attend(q, k, v).float().cpu(), reference, rtol=2e-2, atol=2e-2)


def every_mode_equals_ar(tiny_random_pair, device: str):
    target, drafter = tiny_random_pair
    base = dict(model=target, draft_model=drafter, device=device, dtype="fp32", max_new_tokens=32,
                retrieval_budget=128, chunk_size=8, retrieval_rebuild="every:16")   # exactness is an fp32 claim
    engine = Engine(RunConfig(mode="triforce", **base))
    ids = random_ids(320, 517)
    expected = engine.generate(ids, RunConfig(mode="ar", **base)).token_ids
    for mode in ("spec", "retrieval", "streaming", "triforce"):
        assert engine.generate(ids, RunConfig(mode=mode, **base)).token_ids == expected, mode


def every_mode_offloaded_equals_resident(tiny_random_pair, device: str):
    target, drafter = tiny_random_pair
    base = dict(model=target, draft_model=drafter, device=device, dtype="fp32")
    resident = Engine(RunConfig(mode="triforce", **base))
    streamed = Engine(RunConfig(mode="triforce", offload_weights=True, **base))
    ids = random_ids(320, 517)
    base.update(max_new_tokens=32, retrieval_budget=128, chunk_size=8, retrieval_rebuild="every:16", prefill_chunk=128)
    for mode in ("ar", "spec", "retrieval", "streaming", "triforce"):
        expected = resident.generate(ids, RunConfig(mode=mode, **base)).token_ids
        assert resident.generate(ids, RunConfig(mode=mode, on_chip_layers=2, **base)).token_ids == expected, mode
        assert streamed.generate(ids, RunConfig(mode=mode, on_chip_layers=0, **base)).token_ids == expected, mode


def test_every_mode_equals_ar_on_cuda(tiny_random_pair):
    every_mode_equals_ar(tiny_random_pair, "cuda")


def test_every_mode_with_kv_and_weights_offloaded_equals_resident_on_cuda(tiny_random_pair):
    every_mode_offloaded_equals_resident(tiny_random_pair, "cuda")


def test_copy_lanes_order_by_events_on_cuda():
    """A slow, poisoning copy on the load lane: compute that waits on its event sees the data."""
    from triforce.offload.tier import Copier, HostTier

    class SlowPoison(Copier):
        def _copy(self, dst, src):
            dst.fill_(float("nan"))
            torch.cuda._sleep(2_000_000)  # ~1 ms of GPU cycles on the copy stream
            dst.copy_(src, non_blocking=True)

    tier, copier = HostTier(torch.device("cuda")), SlowPoison(torch.device("cuda"))
    host = tier.allocate("x", (1024, 1024), torch.float32)
    host.fill_(3.0)
    assert host.is_pinned()
    dst = torch.empty(1024, 1024, device="cuda")
    for _ in range(5):
        event = copier.copy("load_cache", dst, host, [copier.record()])
        copier.wait(event)
        assert float(dst.sum()) == 3.0 * 1024 * 1024
    tier.close()


def test_lower_levels_replay_cuda_graphs(tiny_random_pair):
    """A captured pass, whole or in pieces, computes what the same static pass computes eagerly,
    logits and K/V, pass after pass (runtime/graphs.py); and a `triforce` request on CUDA replays its lower
    levels' passes from graphs while emitting `ar`'s tokens, as `ar` does replaying its 1-token
    passes and running them eagerly."""
    from triforce.runtime import graphs
    from triforce.runtime.cache_full import FullCache
    from triforce.runtime.model import load_model
    model = load_model(tiny_random_pair[0], "bf16", device="cuda")
    ids = random_ids(320, 400)
    caches = []
    for _ in range(2):
        cache = FullCache(model.cfg, model.rope(512), 1, 512, model.device, model.dtype)
        model(torch.tensor([ids[:300]], device="cuda"), cache)
        caches.append(cache)
    at = 300
    for whole in (graphs.MAX_TOKENS, graphs.TARGET_WHOLE_TOKENS):   # 3-token passes whole, then in pieces
        replayed = graphs.GraphedForward(model, caches[0], whole_tokens=whole)
        eager = graphs.GraphedForward(model, caches[1], capture=False, whole_tokens=whole)
        for T in (1, 3, 1, 3, 1, 3, 2):
            x = torch.tensor([ids[at:at + T]], device="cuda")
            torch.testing.assert_close(replayed(x, caches[0], last_only=T), eager(x, caches[1], last_only=T),
                                       rtol=1e-3, atol=1e-3)    # the same kernels: equal unless capture picks others
            at += T
        assert replayed.captured == 2 and replayed.failed is None            # (1, 1) and (3, 3); (2, 2) asked once
        assert isinstance(replayed.passes[(3, 3)], graphs.PiecewisePass if whole == 1 else graphs.CapturedPass)
        torch.testing.assert_close(caches[0].k[:, :, :, :at], caches[1].k[:, :, :, :at], rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(caches[0].v[:, :, :, :at], caches[1].v[:, :, :, :at], rtol=1e-2, atol=1e-2)

    target, drafter = tiny_random_pair
    base = dict(model=target, draft_model=drafter, device="cuda", dtype="fp32", max_new_tokens=32,
                retrieval_budget=128, chunk_size=8, gamma1=2, gamma2=4)   # exactness is an fp32 claim
    engine = Engine(RunConfig(mode="triforce", **base))
    stacks = []
    build_stack = engine.build_stack
    engine.build_stack = lambda run, capacity: stacks.append(build_stack(run, capacity)) or stacks[-1]
    prompt = random_ids(320, 517)
    expected = engine.generate(prompt, RunConfig(mode="ar", **base)).token_ids
    (ar_target,) = stacks[-1][0]
    assert ar_target.forward.captured == 1                      # `ar`'s 1-token passes replay
    assert engine.generate(prompt, RunConfig(mode="ar", cuda_graphs=False, **base)).token_ids == expected
    assert engine.generate(prompt, RunConfig(mode="triforce", **base)).token_ids == expected
    drafter_level, middle, top = stacks[-1][0]
    assert drafter_level.forward.captured and middle.forward.captured
    pieces = [p for (T, _), p in top.forward.passes.items() if T > 1]
    assert pieces and all(isinstance(p, graphs.PiecewisePass) and p.graphs for p in pieces)   # the verify passes
    assert engine.generate(prompt, RunConfig(mode="triforce", cuda_graphs=False, **base)).token_ids == expected
    assert stacks[-1][0][0].forward is stacks[-1][0][0].model
