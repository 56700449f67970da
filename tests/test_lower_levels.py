"""Cheap lower levels (runtime/quant.py, runtime/vocab.py): quantized matmuls against dense ones,
the pruned head, the acceptance rule's output distribution through the real Level code with a
quantized middle level and a quantized, vocabulary-pruned drafter (a tiny random model, so that
its 6-token vocabulary gives a small histogram), and greedy identity with `ar` on the real default
model and its embedded drafter."""
import copy
import dataclasses

import pytest
import torch
import torch.nn as nn

from triforce.runtime.cache_full import FullCache
from triforce.runtime.config import RunConfig
from triforce.runtime.errors import UserError
from triforce.runtime.model import fuse_projections, load_model
from triforce.runtime import quant
from triforce.runtime.ops import PackedLinear
from triforce.runtime.quant import Int4Linear, Int8Linear, PrunedHead, RescoredHead, lower_level_copy, weight_bytes
from triforce.runtime.sampling import SamplingParams, probs_from_logits
from triforce.runtime.speculate import Level, SpecDecoder
from triforce.runtime.vocab import kept_token_ids

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cls,tol", [(Int8Linear, 0.02), (Int4Linear, 0.2)])
def test_quantized_matmul_matches_dense(cls, tol, dtype):
    torch.manual_seed(0)
    dense = nn.Linear(576, 200, bias=True).to(dtype)     # 200 rows: int4 pads to 208 and slices back
    quant = cls(dense)
    x = torch.randn(3, 5, 576, dtype=dtype)
    got = quant(x)
    assert got.shape == (3, 5, 200) and got.dtype == dtype
    exact = quant.reference(x)          # the kernel vs its own weights (and activation rounding, natively)
    torch.testing.assert_close(got.float(), exact, rtol=0.02, atol=0.05 if dtype == torch.bfloat16 else 1e-4)
    ref = dense(x).float()                                               # vs the dense layer: quantization error
    assert ((got.float() - ref).norm() / ref.norm()).item() < tol


def test_pruned_head_is_minus_infinity_outside_the_kept_ids():
    torch.manual_seed(0)
    head = nn.Linear(64, 50, bias=False)
    kept = torch.tensor([1, 7, 8, 30])
    pruned = PrunedHead(head, kept, 50)
    x = torch.randn(2, 3, 64)
    out = pruned(x)
    assert out.shape == (2, 3, 50) and out.dtype == torch.float32
    torch.testing.assert_close(out[..., kept], head(x)[..., kept])
    others = torch.ones(50, dtype=torch.bool)
    others[kept] = False
    assert torch.isneginf(out[..., others]).all()
    for params in (SamplingParams(), SamplingParams(0.7, top_p=0.9), SamplingParams(1.0, top_k=2)):
        p = probs_from_logits(out, params)
        assert torch.isfinite(p).all() and (p[..., others] == 0).all()
        torch.testing.assert_close(p.sum(-1), torch.ones(2, 3))


def test_kept_ids_hold_the_special_tokens_and_the_most_frequent():
    counts = torch.tensor([5, 0, 9, 9, 1, 7])
    assert kept_token_ids(counts, 3, always=[1]).tolist() == [1, 2, 3]
    assert kept_token_ids(counts, 2, always=[]).tolist() == [2, 3]
    with pytest.raises(UserError, match="draft_vocab 7"):
        kept_token_ids(counts, 7, always=[])


def test_bad_settings_are_refused_by_name():
    with pytest.raises(UserError, match="middle_weights 'int3'"):
        RunConfig(middle_weights="int3").validate()
    with pytest.raises(UserError, match="draft_vocab -1"):
        RunConfig(draft_vocab=-1).validate()
    with pytest.raises(UserError, match="draft_vocab 'many'"):
        RunConfig(draft_vocab="many").validate()
    with pytest.raises(UserError, match="not wired into --backend ray"):   # explicit settings still are
        RunConfig(backend="ray", middle_weights="int4").validate()


def test_auto_lower_levels_are_int4_and_a_pruned_head_only_where_measured():
    run = RunConfig(mode="triforce").validate()    # the defaults: auto everywhere
    assert (run.middle_weights, run.draft_weights, run.draft_vocab) == ("auto", "auto", "auto")
    kinds = lambda r: (r.middle_weights, r.draft_weights, r.draft_vocab)   # noqa: E731
    assert kinds(run.lower_levels(quantized=True, counted=True)) == ("int4", "int4", 4096)
    assert kinds(run.lower_levels(quantized=True, counted=False)) == ("int4", "int4", 0)   # no corpus counts
    assert kinds(run.lower_levels(quantized=False, counted=True)) == ("same", "same", 0)   # e.g. a GPU
    for elsewhere in (dict(backend="ray"), dict(offload_weights=True), dict(offload="auto")):
        auto = RunConfig(mode="triforce", **elsewhere).validate()       # auto is accepted where int4 is not wired
        assert kinds(auto.lower_levels(quantized=True, counted=True)) == ("same", "same", 0), elsewhere
    explicit = RunConfig(mode="triforce", middle_weights="int8", draft_weights="same", draft_vocab=500)
    assert kinds(explicit.lower_levels(quantized=False, counted=False)) == ("int8", "same", 500)
    assert kinds(explicit.lower_levels(quantized=True, counted=True)) == ("int8", "same", 500)


def test_draft_vocab_flag_takes_a_count_or_auto():
    import argparse
    from triforce.runtime.run_args import draft_vocab_arg
    assert draft_vocab_arg("auto") == "auto" and draft_vocab_arg("512") == 512 and draft_vocab_arg("0") == 0
    with pytest.raises(argparse.ArgumentTypeError, match="'many'"):
        draft_vocab_arg("many")


def test_gamma_is_auto_for_greedy_requests_unless_gammas_are_given():
    import dataclasses
    assert RunConfig().gamma_auto and RunConfig().gammas == (2, 6)
    sampled = RunConfig(temperature=0.6)
    assert not sampled.gamma_auto and sampled.gammas == (2, 6)                       # so a seed reproduces it
    assert RunConfig(temperature=0.6, gamma="auto").gamma_auto                      # unless asked for
    assert not dataclasses.replace(RunConfig(), temperature=0.6).gamma_auto         # decided per request (batch records)
    assert dataclasses.replace(RunConfig(), seed=5).gamma_auto
    for given in (dict(gamma1=3), dict(gamma2=4)):   # as runs before auto was a default
        assert not RunConfig(**given).gamma_auto, given
    assert RunConfig(gamma1=3).gammas == (3, 6) and RunConfig(gamma2=4).gammas == (2, 4)
    assert RunConfig(gamma="auto", gamma2=4).gamma_auto and not RunConfig(gamma="fixed").gamma_auto


# --- the acceptance rule with quantized / pruned lower levels, through the real Level code ---

def chi_square_p_value(freqs, expected, samples):
    """P(chi-square >= observed), as tests/test_speculate.py, with the cells expecting fewer than 5
    counts lumped into one (the chi-square approximation needs that)."""
    small = expected * samples < 5
    f = torch.cat([freqs[~small], freqs[small].sum()[None]])
    e = torch.cat([expected[~small], expected[small].sum()[None]])
    stat = (samples * (f - e) ** 2 / e.clamp_min(1e-12)).sum()
    dof = torch.tensor(len(e) - 1.0)
    return torch.special.gammaincc(dof / 2, stat / 2).item()


V = 6


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   tie_word_embeddings=False)
    path = tmp_path_factory.mktemp("tiny")
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(path)
    model = fuse_projections(load_model(path))
    model.lm_head.weight.mul_(15)      # random init is near uniform: spread the logits out
    return model


def level(name, model, params):
    cache = FullCache(model.cfg, model.rope(32), 1, 32, torch.device("cpu"), model.dtype)
    return Level(name, model, cache, params, 8)


@pytest.mark.slow   # ~25 s: 2000 samples through three real levels
def test_quantized_and_pruned_lower_levels_emit_the_target_distribution(tiny_target):
    torch.set_num_threads(1)   # tiny passes: thread hand-offs make them 10x slower (conftest restores it)
    params = SamplingParams(temperature=1.0)
    drafter = lower_level_copy(tiny_target, "int4", kept=torch.tensor([0, 2, 3]))   # zero mass on 1, 4, 5
    middle = lower_level_copy(tiny_target, "int8", dtype=torch.bfloat16)   # as an fp32 engine's on a CPU
    stack = [level("drafter", drafter, params), level("retrieval", middle, params),
             level("target", tiny_target, params)]
    prompt = [0, 3, 1]
    p1 = probs_from_logits(tiny_target(torch.tensor([prompt]), level("x", tiny_target, params).cache)[0, -1], params)
    p2 = torch.stack([probs_from_logits(tiny_target(torch.tensor([prompt + [x]]),
                                                    level("x", tiny_target, params).cache)[0, -1], params)
                      for x in range(V)])
    expected = p1[:, None] * p2                                                      # [V, V]
    assert expected[:, [1, 4, 5]].sum() > 0.1   # the target often wants tokens the drafter cannot propose
    samples, gen = 2000, torch.Generator().manual_seed(0)
    counts = torch.zeros(V, V)
    for _ in range(samples):
        for lv in stack:
            lv.commit(prompt)                   # each sample starts again after the prompt
        decoder = SpecDecoder(stack, [2, 3], list(prompt), gen)
        out = []
        while len(out) < 2:
            out += decoder.step(8)
        counts[out[0], out[1]] += 1
    freqs = counts / samples
    assert chi_square_p_value(freqs, expected, samples) > 1e-4, 0.5 * (freqs - expected).abs().sum().item()
    assert counts[:, [1, 4, 5]].sum() > 0 and counts[[1, 4, 5]].sum() > 0   # recovered through the residual
    assert 0 < stack[1].stats.accepted < stack[1].stats.drafted    # both levels really speculated
    assert 0 < stack[2].stats.accepted < stack[2].stats.drafted


def test_lower_level_copy_shares_embeddings_and_reports_its_bytes(tiny_target):
    copy = lower_level_copy(tiny_target, "int8")
    assert copy.model.embed_tokens.weight is tiny_target.model.embed_tokens.weight
    assert isinstance(copy.model.layers[0].self_attn.qkv_proj, Int8Linear)
    assert copy.dtype == tiny_target.dtype and copy.weights == "int8"
    assert weight_bytes(copy) < weight_bytes(tiny_target) / 3          # fp32 -> int8 (+ scales)
    assert lower_level_copy(tiny_target, "same") is tiny_target


def test_batcher_runs_a_quantized_middle_levels_passes_before_the_targets(tiny_target):
    """Batched decoding holds the dearer weights' requests: a quantized copy has the target's shape
    but reads fewer bytes, so its sequences' passes run first, whatever order the requests came
    in, and the target's pass packs the sequences gathered behind them."""
    from triforce.runtime.decode_batched import Batcher, Request, next_group
    middle = lower_level_copy(tiny_target, "int4")
    batcher = Batcher(live=3)
    assert batcher.weight_bytes(middle) == weight_bytes(middle) < weight_bytes(tiny_target)
    for order in ((tiny_target, middle, tiny_target), (middle, tiny_target, tiny_target)):
        pending = [Request(m, torch.zeros(1, 1, dtype=torch.long), None, 1) for m in order]
        assert [r.model for r in next_group(pending, batcher.weight_bytes)] == [middle]


def test_a_quantized_copy_may_compute_in_bf16_leaving_its_source_as_it_was(tiny_target):
    """An fp32 engine's quantized lower levels compute in bf16 on CPUs with the native kernels
    (Engine.lower_level_dtype): the copy converts its own embedding and norms, keeps its scales,
    and the source model (the target) is untouched."""
    before = {n: t.clone() for n, t in tiny_target.state_dict().items()}
    for weights, kept in (("int4", None), ("int8", torch.tensor([0, 2, 3]))):
        c = lower_level_copy(tiny_target, weights, kept, dtype=torch.bfloat16)
        assert c.dtype == torch.bfloat16 and tiny_target.dtype == torch.float32
        assert c.model.embed_tokens.weight.dtype == torch.bfloat16 and c.model.norm.weight.dtype == torch.bfloat16
        assert c.model.embed_tokens.weight is not tiny_target.model.embed_tokens.weight
        q = c.model.layers[0].mlp.down_proj
        assert q.weight.dtype == torch.bfloat16                                 # the dtype marker
        same = lower_level_copy(tiny_target, weights, kept)
        for (n, a), (_, b) in zip(sorted(c.named_buffers()), sorted(same.named_buffers())):
            if n.endswith("weight") and a.numel() == 0:
                continue                                                         # dtype markers
            assert torch.equal(a, b), n                                          # codes and scales as before
        x = torch.tensor([[0, 3, 1, 4]])
        cache = FullCache(c.cfg, c.rope(32), 1, 32, torch.device("cpu"), c.dtype)
        ref = FullCache(same.cfg, same.rope(32), 1, 32, torch.device("cpu"), same.dtype)
        with torch.inference_mode():
            torch.testing.assert_close(c(x, cache), same(x, ref), rtol=0.05, atol=0.3)
    for n, t in tiny_target.state_dict().items():
        assert t.dtype == before[n].dtype and torch.equal(t, before[n]), n
    with pytest.raises(ValueError, match="quantized"):
        lower_level_copy(tiny_target, "same", torch.tensor([0, 2]), dtype=torch.bfloat16)


def test_int4_copy_rescores_its_int4_head_where_the_dense_rows_are_shared(tiny_target):
    """int4 quantizes the head too, as a RescoredHead reading the source head's own rows for its
    candidates (a plain int4 head's rounding cut the middle level's acceptance: quant.HEAD_KIND);
    a pruned head, or one whose dense rows are not at hand (packed, untied), stays int8."""
    c = lower_level_copy(tiny_target, "int4")
    assert isinstance(c.lm_head, RescoredHead) and c.lm_head.dense.data_ptr() == tiny_target.lm_head.weight.data_ptr()
    assert c.weights == "int4" and c.dtype == tiny_target.dtype and c.device == tiny_target.device
    assert isinstance(c.model.layers[0].self_attn.qkv_proj, Int4Linear)
    int8_head = lower_level_copy(tiny_target, "int4", head="int8")
    assert isinstance(int8_head.lm_head, Int8Linear) and int8_head.weights == "int4+head-int8"
    assert weight_bytes(c) < weight_bytes(int8_head)              # the shared dense rows are not counted
    pruned = lower_level_copy(tiny_target, "int4", torch.tensor([0, 2, 3]))
    assert isinstance(pruned.lm_head.inner, Int8Linear) and pruned.weights == "int4+vocab3"
    packed = copy.deepcopy(tiny_target)
    packed.lm_head = PackedLinear(packed.lm_head)
    assert isinstance(lower_level_copy(packed, "int4").lm_head, Int8Linear)
    tied = copy.deepcopy(packed)                         # a tied head reads the embedding, the copy's own in its dtype
    tied.cfg = dataclasses.replace(tied.cfg, tie_word_embeddings=True)
    c = lower_level_copy(tied, "int4", dtype=torch.bfloat16)
    assert isinstance(c.lm_head, RescoredHead) and c.lm_head.dense.data_ptr() == c.model.embed_tokens.weight.data_ptr()
    assert c.lm_head.dense.dtype == torch.bfloat16 and tied.model.embed_tokens.weight.dtype == torch.float32


@pytest.mark.parametrize("native", [True, False])
def test_a_rescored_head_is_exact_at_its_candidates_and_int4_elsewhere(tiny_target, native, monkeypatch):
    """The RESCORED largest int4 logits of each row become x . w over the dense rows (fp32), the
    rest stay the int4 head's; the native kernel and the torch path give the same logits."""
    head = lower_level_copy(tiny_target, "int4").lm_head
    monkeypatch.setattr(quant, "RESCORED", 4)                                   # of the tiny vocabulary's V
    if not native:
        monkeypatch.setattr(quant.native, "quant_cpu", lambda: None)
    x = torch.randn(2, 5, tiny_target.cfg.hidden_size)
    with torch.inference_mode():
        approx = head.approx(x).float().view(10, -1)
        got = head(x).view(10, -1)
        exact = (x.view(10, -1) @ head.dense.float().T).to(x.dtype).float()     # [10, V], rounded as a dense head
    top = approx.topk(quant.RESCORED, dim=-1).indices
    torch.testing.assert_close(got.gather(-1, top), exact.gather(-1, top), rtol=1e-5, atol=1e-4)
    rest = torch.ones_like(got, dtype=torch.bool).scatter_(-1, top, False)
    assert torch.equal(got[rest], approx[rest])
    assert (got.argmax(-1) == exact.argmax(-1)).all()


def test_lower_levels_of_a_packed_model_equal_those_of_the_dense_one(tiny_target):
    """The engine packs a bf16 target (ops.pack_linears) before the middle level and the drafter
    are copied from it: the quantized and pruned copies are made from the same dense weights."""
    from triforce.runtime.ops import PackedLinear, pack_linears, packable
    dense = copy.deepcopy(tiny_target).bfloat16()
    if not packable(dense.lm_head):
        pytest.skip("the packed bf16 kernel did not build here")
    packed = pack_linears(copy.deepcopy(dense))
    assert isinstance(packed.model.layers[0].mlp.down_proj, PackedLinear)
    kept = torch.tensor([0, 2, 3])
    for weights in ("int8", "int4"):
        a, b = lower_level_copy(dense, weights, kept), lower_level_copy(packed, weights, kept)
        for (name, x), (_, y) in zip(sorted(a.named_buffers()), sorted(b.named_buffers())):
            assert torch.equal(x, y), (weights, name)
    pruned = lower_level_copy(packed, "same", kept)
    assert isinstance(pruned.lm_head.inner, PackedLinear)
    x = torch.randn(1, 3, 64).bfloat16()
    with torch.inference_mode():
        torch.testing.assert_close(pruned.lm_head(x), lower_level_copy(dense, "same", kept).lm_head(x),
                                   rtol=2 ** -6, atol=0.05)


def test_packed_and_quantized_weights_share_one_allocation_and_compute_the_same(tiny_target):
    """ops.one_allocation: a packed model's weights, and a quantized copy's own ones, are views of
    one allocation, each on a page boundary, holding the bytes they held (so the same outputs);
    what a copy shares with its model stays where it was."""
    from triforce.runtime.ops import PAGE, PackedLinear, one_allocation, pack, pack_linears, packable
    dense = copy.deepcopy(tiny_target).bfloat16()
    if not packable(dense.lm_head):
        pytest.skip("the packed bf16 kernel did not build here")
    packed = pack_linears(copy.deepcopy(dense))
    linears = [m for m in packed.modules() if isinstance(m, PackedLinear)]
    assert len(linears) > 2
    storages = {m.packed.untyped_storage().data_ptr() for m in linears}
    assert len(storages) == 1, "one allocation"
    assert all(m.packed.data_ptr() % PAGE == 0 for m in linears)
    for m, (name, d) in zip(linears, [(n, c) for n, c in dense.named_modules() if isinstance(c, torch.nn.Linear)]):
        assert torch.equal(m.packed, pack(d.weight.detach())), name
    for weights in ("int8", "int4"):
        low = lower_level_copy(packed, weights)
        own = [m for m in low.modules() if isinstance(m._buffers.get("packed"), torch.Tensor)]
        ptrs = {m.packed.untyped_storage().data_ptr() for m in own}
        assert len(ptrs) == 1 and ptrs != storages, weights
        apart = lower_level_copy(packed, weights)
        for m in apart.modules():   # the same copy with each block back in an allocation of its own
            if isinstance(m._buffers.get("packed"), torch.Tensor):
                m._buffers["packed"] = m.packed.clone()
        pairs = [(a, b) for (name, a), (_, b) in zip(low.named_modules(), apart.named_modules())
                 if isinstance(a._buffers.get("packed"), torch.Tensor)]
        assert len(pairs) == len(own)
        with torch.inference_mode():
            for a, b in pairs:
                x = torch.randn(3, a.in_features).bfloat16()
                assert torch.equal(a(x), b(x)), (weights, type(a).__name__)
    one_allocation([])   # nothing to move: a no-op


# --- greedy identity on the real default model ---

@pytest.fixture(scope="module")
def engine(default_model_dir):
    from triforce.runtime.engine import Engine
    return Engine(RunConfig(mode="triforce"))   # fp32: exact on every backend (bf16 is exact only where the
                                                # kernels are row-invariant: test_modes' bf16 test)


@pytest.mark.slow   # 30-60 s: every lower-level combination on the default model
def test_quantized_and_pruned_lower_levels_keep_greedy_output_equal_to_ar(engine):
    from triforce.runtime.assets import kjv_books
    ids = engine.tokenizer.encode(kjv_books(["Jonah"]))[:180]
    base = dict(max_new_tokens=16, retrieval_budget=96, chunk_size=8, draft_sinks=4,
                draft_window=60, gamma1=2, gamma2=4, retrieval_rebuild="every:8")
    expected = engine.generate(ids, RunConfig(mode="ar", **base)).token_ids
    for kw in [dict(mode="triforce"),   # the defaults: int4 levels and a 4,096-token drafter head where the kernels run
               dict(mode="triforce", middle_weights="int8", draft_weights="int4", draft_vocab=2000),
               dict(mode="triforce", middle_weights="int4"),
               dict(mode="retrieval", middle_weights="int4"),
               dict(mode="spec", draft_weights="int8", draft_vocab=500)]:
        result = engine.generate(ids, RunConfig(**base, **kw))
        assert result.token_ids == expected, kw
        levels = result.stats["levels"]
        assert levels["target"]["weights"] == "same" and levels["target"]["drafted"] > 0, kw
        if kw == dict(mode="triforce"):
            from triforce.runtime.quant import native_kernels_run
            cheap = native_kernels_run(engine.model)   # where not, auto is the model's own weights
            assert levels["retrieval"]["weights"] == ("int4" if cheap else "same")
            assert levels["drafter"]["weights"] == ("int4+vocab4096" if cheap else "same")
            lower = engine.lower_level_dtype(RunConfig(**base, **kw), engine.model, "int4")
            assert levels["target"]["dtype"] == "float32"
            assert levels["retrieval"]["dtype"] == ("bfloat16" if cheap and lower else "float32")
            continue
        lower = levels["retrieval" if kw["mode"] != "spec" else "drafter"]
        assert lower["weight_bytes"] < levels["target"]["weight_bytes"], kw
        if "middle_weights" in kw:
            assert levels["retrieval"]["weights"] == kw["middle_weights"], kw
