"""Passes replayed from CUDA graphs (runtime/graphs.py). On a CPU the static pass (fixed-address
inputs, K/V written at index slots, attention over the whole buffer under a mask) runs eagerly: these
tests check that it computes what the eager pass computes, on every cache that has slots, and that
every mode stays exactly `ar` with its lower levels on it. The capture itself is tested in
tests/test_gpu.py. Tiny random models: a claim about exactness, not acceptance."""
import copy

import pytest
import torch

from triforce.runtime import graphs
from triforce.runtime.bench.random_weights import random_ids
from triforce.runtime.cache_full import FullCache
from triforce.runtime.cache_retrieval import RetrievalCache
from triforce.runtime.cache_streaming import StreamingCache
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.graphs import GraphedForward
from triforce.runtime.model import load_model


def filled(kind: str, model, ids: list[int]):
    """A cache of `kind` holding ids (the retrieval cache selected from a full one)."""
    cfg, rope = model.cfg, model.rope(512)
    full = FullCache(cfg, rope, 1, 512, model.device, model.dtype)
    model(torch.tensor([ids]), full)
    if kind == "full":
        return full
    if kind == "retrieval":
        cache = RetrievalCache(cfg, rope, 1, budget=64, chunk=8, generated_capacity=40, device=model.device,
                               dtype=model.dtype, recent=16)
        cache.fill_from(full, len(ids))
        return cache
    cache = StreamingCache(cfg, rope, 1, sinks=4, window=40, device=model.device, dtype=model.dtype, scratch=20)
    cache.fill_from(full, len(ids))
    return cache


@pytest.mark.parametrize("kind", ["full", "retrieval", "streaming"])
@pytest.mark.parametrize("T, rows", [(1, 1), (4, 4), (5, 1)])
def test_static_pass_computes_the_eager_pass(tiny_random_pair, kind, T, rows, monkeypatch):
    """Three passes in a row through the static path (the third replays the first pass's inputs, rolled
    back and fed anew): the logits and every K/V slot and length equal the eager passes'."""
    monkeypatch.setattr(graphs, "CAPTURE_AT", 1)
    model = load_model(tiny_random_pair[0], "fp32")
    ids = random_ids(320, 200)
    eager = filled(kind, model, ids[:150])
    static = copy.deepcopy(eager)
    forward = GraphedForward(model, static, capture=False)
    start = eager.get_seq_length()
    for i, n in enumerate((T, T, T)):
        if i == 2:                                   # a rollback, as after a rejection
            eager.crop(start + T)
            static.crop(start + T)
        offset = eager.get_seq_length() - start
        x = torch.tensor([ids[150 + offset:150 + offset + n]])                  # [1, T]
        expected = model(x, eager, last_only=rows)                               # [1, rows, V]
        got = forward(x, static, last_only=rows)
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        assert static.get_seq_length() == eager.get_seq_length()
    length = eager.length
    torch.testing.assert_close(static.k[:, :, :, :length], eager.k[:, :, :, :length], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(static.v[:, :, :, :length], eager.v[:, :, :, :length])
    if kind == "full":
        torch.testing.assert_close(static.last_query, eager.last_query, rtol=1e-6, atol=1e-6)
    assert list(forward.passes) == [(T, rows)]


def test_shapes_asked_once_and_long_passes_run_eagerly(tiny_random_pair):
    model = load_model(tiny_random_pair[0], "fp32")
    cache = filled("full", model, random_ids(320, 40))
    forward = GraphedForward(model, cache, capture=False)
    forward(torch.tensor([random_ids(320, 3)]), cache, last_only=1)              # asked once: eager
    forward(torch.tensor([random_ids(320, 20)]), cache, last_only=20)           # above MAX_TOKENS
    forward(torch.tensor([random_ids(320, 20)]), cache, last_only=20)
    assert forward.passes == {}
    forward(torch.tensor([random_ids(320, 3)]), cache, last_only=False)         # all rows: the same (3, 3)
    forward(torch.tensor([random_ids(320, 3)]), cache, last_only=3)
    assert list(forward.passes) == [(3, 3)]
    other = filled("full", model, random_ids(320, 40))
    before = other.get_seq_length()
    forward(torch.tensor([random_ids(320, 3)]), other, last_only=3)             # another cache: the model's
    assert list(forward.passes) == [(3, 3)] and other.get_seq_length() == before + 3


@pytest.mark.parametrize("gammas", [(2, 6), (1, 3)])
def test_every_mode_equals_ar_with_static_lower_levels(tiny_random_pair, gammas, monkeypatch):
    """The engine's lower levels on the static path (as on a GPU, without the capture): every mode
    emits `ar`'s greedy tokens, and the static passes did run."""
    target, drafter = tiny_random_pair
    made = []
    build_stack = Engine.build_stack

    def static_lower_levels(self, run, capacity):
        stack, g = build_stack(self, run, capacity)
        for level in stack[:-1]:
            level.forward = GraphedForward(level.model, level.cache, capture=False)
            made.append(level.forward)
        return stack, g

    monkeypatch.setattr(Engine, "build_stack", static_lower_levels)
    base = dict(model=target, draft_model=drafter, dtype="fp32", max_new_tokens=40, retrieval_budget=128, chunk_size=8,
                retrieval_rebuild="every:16", gamma1=gammas[0], gamma2=gammas[1])
    engine = Engine(RunConfig(mode="triforce", **base))
    ids = random_ids(320, 301)
    expected = engine.generate(ids, RunConfig(mode="ar", **base)).token_ids
    for mode in ("spec", "retrieval", "streaming", "triforce"):
        assert engine.generate(ids, RunConfig(mode=mode, **base)).token_ids == expected, mode
    assert made and all(f.passes for f in made)


def test_no_cuda_graphs_flag():
    import argparse
    from triforce.runtime.run_args import GENERATE_KEYS, add_run_args, run_config_from_args
    parser = argparse.ArgumentParser()
    add_run_args(parser)
    parser.add_argument("--config")
    for name in GENERATE_KEYS:
        parser.set_defaults(**{name: None})
    assert run_config_from_args(parser.parse_args(["--no-cuda-graphs"])).cuda_graphs is False
    assert run_config_from_args(parser.parse_args([])).cuda_graphs is True


def test_bench_times_the_static_pass(tiny_random_pair):
    """The passes suite's --cuda-graph column times GraphedForward's pass (here run eagerly) and
    leaves the cache as it found it."""
    from triforce.runtime.bench.passes import time_graph_pass
    from triforce.runtime.sampling import SamplingParams
    from triforce.runtime.speculate import Level
    model = load_model(tiny_random_pair[0], "fp32")
    ids = random_ids(320, 60)
    level = Level("target", model, filled("full", model, ids[:50]), SamplingParams(), 64)
    seconds = time_graph_pass(level, ids[50:54], repeats=3, capture=False)
    assert len(seconds) == 3 and all(s > 0 for s in seconds)
    assert level.cache.get_seq_length() == 50


def test_gamma_probe_prices_the_replayed_pass(tiny_random_pair):
    """--gamma auto's probe times a level's forward as the run calls it: a replaying forward is
    asked often enough to be captured before the timed pass, and the cache is rolled back."""
    from triforce.runtime.gamma import pass_seconds
    from triforce.runtime.sampling import SamplingParams
    from triforce.runtime.speculate import Level
    model = load_model(tiny_random_pair[0], "fp32")
    ids = random_ids(320, 50)
    level = Level("retrieval", model, filled("retrieval", model, ids), SamplingParams(), 64)
    level.cached = ids
    level.forward = GraphedForward(model, level.cache, capture=False)
    assert pass_seconds(level, 3) > 0
    assert list(level.forward.passes) == [(3, 3)] and level.cache.get_seq_length() == 50


def test_models_that_stream_weights_are_not_replayed(tiny_random_pair):
    """A layer whose weights stream from the host tier orders its copies by Python-side state, which
    a replay would not repeat: the engine leaves such a level eager."""
    from triforce.offload.tier import Copier, HostTier
    from triforce.offload.weights import offload_weights
    from triforce.runtime.graphs import replayable
    model = load_model(tiny_random_pair[0], "fp32")
    assert replayable(model)
    tier = HostTier(torch.device("cpu"))
    try:
        offload_weights(model, tier, Copier(torch.device("cpu")), torch.device("cpu"))
        assert not replayable(model)
    finally:
        tier.close()


def test_level_forward_replays_only_resident_models_on_cuda(tiny_random_pair):
    """The one place the engine and the Ray coordinator ask: on a CPU, or with cuda_graphs off, a
    level runs its model as it is."""
    from triforce.runtime.graphs import level_forward
    model = load_model(tiny_random_pair[0], "fp32")
    for kind, role in (("streaming", "drafter"), ("full", "target")):
        cache = filled(kind, model, random_ids(320, 40))
        assert level_forward(model, cache, True, role) is model
        assert level_forward(model, cache, False, role) is model
    assert graphs.whole_tokens("drafter") == graphs.MAX_TOKENS and graphs.whole_tokens("target") == 1


@pytest.mark.parametrize("kind, dtype", [("full", "fp32"), ("full", "bf16"), ("retrieval", "fp32"), ("streaming", "fp32")])
def test_levels_on_the_target_weights_replay_longer_passes_in_pieces(tiny_random_pair, monkeypatch, kind, dtype):
    """A forward with TARGET_WHOLE_TOKENS (the levels on the target's weights) takes the whole
    static pass for 1-token passes and the piecewise one (attention between the pieces, over the
    filled length) for longer ones: each computes what the model's own pass computes, logits and
    K/V, pass after pass, on every cache that has slots; passes beyond MAX_TOKENS stay the model's."""
    monkeypatch.setattr(graphs, "CAPTURE_AT", 1)
    model = load_model(tiny_random_pair[0], dtype)
    ids = random_ids(320, 80)
    static_cache, eager_cache = (filled(kind, model, ids[:40]) for _ in range(2))
    forward = graphs.GraphedForward(model, static_cache, capture=False, whole_tokens=graphs.TARGET_WHOLE_TOKENS)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == "fp32" else dict(rtol=2e-2, atol=2e-2)
    at = 40
    for T, rows in ((1, 1), (4, 4), (1, 1), (3, 3), (4, 4), (17, 1), (2, 1)):
        x = torch.tensor([ids[at:at + T]])
        torch.testing.assert_close(forward(x, static_cache, last_only=rows), model(x, eager_cache, last_only=rows), **tol)
        at += T
        assert static_cache.get_seq_length() == eager_cache.get_seq_length() == at
    assert {key: type(p).__name__ for key, p in forward.passes.items()} == {
        (1, 1): "CapturedPass", (4, 4): "PiecewisePass", (3, 3): "PiecewisePass", (2, 1): "PiecewisePass"}
    assert forward.captured == 0                                 # run eagerly: none replays
    (k, v, n, last_query), (k_eager, v_eager, n_eager, last_query_eager) = static_cache.slots(), eager_cache.slots()
    assert n == n_eager
    torch.testing.assert_close(k[:, :, :, :n], k_eager[:, :, :, :n], **tol)
    torch.testing.assert_close(v[:, :, :, :n], v_eager[:, :, :, :n], **tol)
    if last_query is not None:
        torch.testing.assert_close(last_query, last_query_eager, **tol)


def test_a_cache_without_slots_runs_eagerly(tiny_random_pair, monkeypatch):
    """A cache whose layers are not simply its buffers (the offloaded one: slots() is None) never
    takes the static pass, however often a shape is asked for."""
    monkeypatch.setattr(graphs, "CAPTURE_AT", 1)
    model = load_model(tiny_random_pair[0], "fp32")
    cache = filled("full", model, random_ids(320, 40))
    monkeypatch.setattr(cache, "slots", lambda: None)
    forward = GraphedForward(model, cache, capture=False)
    for _ in range(3):
        forward(torch.tensor([random_ids(320, 2)]), cache, last_only=2)
    assert forward.passes == {} and cache.get_seq_length() == 46


def test_a_failed_capture_leaves_the_level_eager(tiny_random_pair, monkeypatch, capsys):
    """An op a graph refuses: one line on stderr, that pass computed eagerly on its static inputs,
    and every later pass the model's own."""
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(graphs.CapturedPass, "capture",
                        lambda self, pool: (_ for _ in ()).throw(RuntimeError("operation not permitted when capturing")))
    model = load_model(tiny_random_pair[0], "fp32")
    ids = random_ids(320, 60)
    eager = filled("full", model, ids[:50])
    graphed = copy.deepcopy(eager)
    forward = GraphedForward(model, graphed, capture=True)
    for i in range(3):
        x = torch.tensor([ids[50 + 2 * i:52 + 2 * i]])
        torch.testing.assert_close(forward(x, graphed, last_only=2), model(x, eager, last_only=2), rtol=1e-5, atol=1e-5)
    assert "CUDA graph capture failed (operation not permitted when capturing)" in capsys.readouterr().err
    assert forward.failed and forward.passes == {} and graphed.get_seq_length() == eager.get_seq_length() == 56
