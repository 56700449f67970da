"""Our model against transformers' own, on tiny random checkpoints of every supported flavour.

Random weights are fine here: the claim is exactness of the forward pass, not quality.
"""
import json

import pytest
import torch

from triforce.runtime.cache_full import FullCache
from triforce.runtime.config import ModelConfig, with_rope_scaling
from triforce.runtime.errors import UserError
from triforce.runtime.model import fuse_projections, load_model

transformers = pytest.importorskip("transformers")

TINY = dict(vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)


def save_tiny(tmp_path, config_cls, model_cls, **overrides):
    torch.manual_seed(0)
    cfg = config_cls(**{**TINY, **overrides})
    model_cls(cfg).eval().save_pretrained(tmp_path)
    return tmp_path


def full_cache(model, T, batch=1):
    return FullCache(model.cfg, model.rope(T), batch, T, model.device, model.dtype)


def assert_matches_hf(model_dir, tokens, dtype="fp32", rtol=1e-5):
    hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = hf(tokens).logits
    for ours in (load_model(model_dir, dtype), fuse_projections(load_model(model_dir, dtype))):  # HF names, fused
        got = ours(tokens, full_cache(ours, tokens.shape[1], tokens.shape[0]))
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        assert err < rtol, f"relative error {err:.2e}"
        rows = ours(tokens, full_cache(ours, tokens.shape[1], tokens.shape[0]), last_only=3)   # a verify pass
        assert rows.shape == (tokens.shape[0], 3, ref.shape[-1])
        torch.testing.assert_close(rows, got[:, -3:], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("flavour", ["llama-untied", "llama-tied", "llama-bias", "mistral", "qwen2", "mha"])
def test_forward_matches_transformers(tmp_path, flavour):
    t = transformers
    make = {
        "llama-untied": lambda: save_tiny(tmp_path, t.LlamaConfig, t.LlamaForCausalLM, tie_word_embeddings=False),
        "llama-tied": lambda: save_tiny(tmp_path, t.LlamaConfig, t.LlamaForCausalLM, tie_word_embeddings=True),
        "llama-bias": lambda: save_tiny(tmp_path, t.LlamaConfig, t.LlamaForCausalLM, attention_bias=True,
                                        mlp_bias=True),
        "mistral": lambda: save_tiny(tmp_path, t.MistralConfig, t.MistralForCausalLM, sliding_window=None),
        "qwen2": lambda: save_tiny(tmp_path, t.Qwen2Config, t.Qwen2ForCausalLM, tie_word_embeddings=False),
        "mha": lambda: save_tiny(tmp_path, t.LlamaConfig, t.LlamaForCausalLM, num_key_value_heads=4),
    }[flavour]
    model_dir = make()
    tokens = torch.randint(0, TINY["vocab_size"], (2, 40), generator=torch.Generator().manual_seed(1))
    assert_matches_hf(model_dir, tokens)


ROPE_SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "dynamic": {"rope_type": "dynamic", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
}


@pytest.mark.parametrize("kind", sorted(ROPE_SCALINGS))
def test_rope_scaling_matches_transformers(tmp_path, kind):
    t = transformers
    model_dir = save_tiny(tmp_path, t.LlamaConfig, t.LlamaForCausalLM, max_position_embeddings=32)
    raw = json.loads((model_dir / "config.json").read_text())
    theta = raw.get("rope_theta") or (raw.get("rope_parameters") or {}).get("rope_theta", 10000.0)
    raw.pop("rope_parameters", None)
    raw["rope_theta"], raw["rope_scaling"] = theta, ROPE_SCALINGS[kind]
    (model_dir / "config.json").write_text(json.dumps(raw))
    # 100 positions: beyond the original 32, where every scaling type differs from plain RoPE
    tokens = torch.randint(0, TINY["vocab_size"], (1, 100), generator=torch.Generator().manual_seed(2))
    assert_matches_hf(model_dir, tokens)


def test_chunked_prefill_and_decode_equal_one_forward(tmp_path):
    t = transformers
    model = load_model(save_tiny(tmp_path, t.LlamaConfig, t.LlamaForCausalLM))
    tokens = torch.randint(0, TINY["vocab_size"], (2, 60), generator=torch.Generator().manual_seed(3))
    whole = model(tokens, full_cache(model, 60, batch=2))
    cache = full_cache(model, 60, batch=2)
    parts = [model(tokens[:, :17], cache), model(tokens[:, 17:50], cache)]
    parts += [model(tokens[:, i:i + 1], cache) for i in range(50, 60)]
    torch.testing.assert_close(torch.cat(parts, 1), whole, rtol=1e-5, atol=1e-5)


def test_crop_rolls_back_exactly(tmp_path):
    t = transformers
    model = load_model(save_tiny(tmp_path, t.LlamaConfig, t.LlamaForCausalLM))
    tokens = torch.randint(0, TINY["vocab_size"], (1, 30), generator=torch.Generator().manual_seed(4))
    cache = full_cache(model, 40)
    model(tokens[:, :20], cache)
    expected = model(tokens[:, 20:25], cache)
    model(tokens[:, 25:30], cache)           # speculative tokens, then rejected
    cache.crop(20)
    assert cache.get_seq_length() == 20
    torch.testing.assert_close(model(tokens[:, 20:25], cache), expected)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_half_precision_close_to_fp32(tmp_path, dtype):
    t = transformers
    model_dir = save_tiny(tmp_path, t.LlamaConfig, t.LlamaForCausalLM)
    tokens = torch.randint(0, TINY["vocab_size"], (1, 30), generator=torch.Generator().manual_seed(5))
    ref = load_model(model_dir, "fp32")
    half = load_model(model_dir, dtype)
    assert half.lm_head.weight.dtype == {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a = ref(tokens, full_cache(ref, 30))
    b = half(tokens, full_cache(half, 30))
    assert ((a - b).abs().max() / a.abs().max()).item() < 0.05


def test_unsupported_architecture_refused_by_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(UserError, match="GPT2LMHeadModel"):
        ModelConfig.from_dir(tmp_path)


def test_missing_dir_and_config_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        ModelConfig.from_dir(tmp_path / "nope")
    with pytest.raises(UserError, match="no config.json"):
        ModelConfig.from_dir(tmp_path)


def test_a_config_that_is_no_models_is_one_line_naming_the_field(tmp_path):
    """A config.json without a required field, with one of the wrong kind, or not an object: a
    UserError naming the file and the field (a KeyError traceback before round 20)."""
    for raw, match in [({"architectures": ["LlamaForCausalLM"], "hidden_size": 32}, "lacks 'num_attention_heads'"),
                       ({"architectures": ["LlamaForCausalLM"], "num_attention_heads": "many"}, "wrong kind"),
                       ([1, 2], "JSON list, not an object")]:
        (tmp_path / "config.json").write_text(json.dumps(raw))
        with pytest.raises(UserError, match=match) as e:
            ModelConfig.from_dir(tmp_path)
        assert str(tmp_path / "config.json") in str(e.value)


def test_missing_tensors_named(tmp_path):
    t = transformers
    model_dir = save_tiny(tmp_path, t.LlamaConfig, t.LlamaForCausalLM)
    raw = json.loads((model_dir / "config.json").read_text())
    raw["num_hidden_layers"] = 3
    (model_dir / "config.json").write_text(json.dumps(raw))
    with pytest.raises(UserError, match="model.layers.2"):
        load_model(model_dir)


def test_rope_scaling_flag_extends_context():
    base = ModelConfig(architecture="LlamaForCausalLM", vocab_size=10, hidden_size=8, intermediate_size=8,
                       num_layers=1, num_heads=2, num_kv_heads=1, head_dim=4, max_position_embeddings=8192,
                       rms_norm_eps=1e-5, rope_theta=1e5, rope_scaling=None, tie_word_embeddings=True,
                       qkv_bias=False, o_bias=False, mlp_bias=False, sliding_window=None)
    assert with_rope_scaling(base, "yarn:4").max_context == 32768
    for bad in ("yarn", "cubic:4", "linear:0.5"):
        with pytest.raises(UserError, match="rope-scaling"):
            with_rope_scaling(base, bad)


def test_packed_pass_equals_each_sequence_alone(tmp_path):
    """The model's own forward over several sequences (runtime/cache_packed.py): ragged cache
    lengths, ragged new tokens, two cache policies; each sequence's rows equal its pass alone,
    and its cache ends up as it would alone."""
    from triforce.runtime.cache_packed import PackedCache
    from triforce.runtime.cache_streaming import StreamingCache
    model = load_model(save_tiny(tmp_path, transformers.LlamaConfig, transformers.LlamaForCausalLM), "fp32")
    gen = torch.Generator().manual_seed(2)
    prompts = [torch.randint(0, TINY["vocab_size"], (1, n), generator=gen) for n in (20, 7, 33)]
    new = [torch.randint(0, TINY["vocab_size"], (1, n), generator=gen) for n in (1, 4, 3)]

    def caches():
        streaming = StreamingCache(model.cfg, model.rope(64), 1, 4, 12, model.device, model.dtype, scratch=8)
        made = [full_cache(model, 64), streaming, full_cache(model, 64)]
        for cache, prompt in zip(made, prompts):
            model(prompt, cache)
        return made

    alone = [model(t, c) for t, c in zip(new, caches())]                                 # each [1, T_i, V]
    packed_caches = caches()
    cache = PackedCache(packed_caches, [t.shape[1] for t in new])
    wanted = [1, 4, 2]                                                                   # rows each sequence reads
    got = model(torch.cat(new, dim=1), cache, last_only=cache.rows(wanted, model.device)).split(wanted, dim=1)
    for g, a, n in zip(got, alone, wanted):
        torch.testing.assert_close(g, a[:, -n:], rtol=1e-5, atol=1e-5)
    assert [c.get_seq_length() for c in packed_caches] == [21, 11, 36]   # each: its prompt + its new tokens
    for c_packed, c_alone, t in zip(packed_caches, caches(), new):
        model(t, c_alone)                                                # next token: the caches agree
        torch.testing.assert_close(model(t[:, :1], c_packed), model(t[:, :1], c_alone), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,weights", [("bf16", "same"), ("bf16", "int4"), ("fp32", "same"), ("fp32", "int8")])
def test_packed_pass_in_one_native_call_equals_each_sequence_alone_bitwise(tmp_path, monkeypatch, dtype, weights):
    """Batched decoding's packed pass (several sequences' new tokens, each with its own cache:
    runtime/cache_packed.py) runs the decoder plan's layers in one native call too
    (DecoderPlan.run_packed): each sequence's logits, K/V and last query are bitwise those of its
    own pass, for ragged lengths and the full, retrieval and StreamingLLM caches in one pass."""
    from triforce.runtime import model as model_mod
    from triforce.runtime.cache_packed import PackedCache
    from triforce.runtime.cache_retrieval import RetrievalCache
    from triforce.runtime.cache_streaming import StreamingCache
    from triforce.runtime.ops import pack_linears
    from triforce.runtime.quant import lower_level_copy
    path = save_tiny(tmp_path, transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
                     hidden_size=256, intermediate_size=320)   # head_dim 64; Qwen2: qkv bias
    model = lower_level_copy(pack_linears(fuse_projections(load_model(path, dtype))), weights)
    plan = model_mod.decoder_plan(model)
    if plan is None:
        pytest.skip("no decoder plan on this CPU (native kernels not built, or quantized linears without native int8/int4 here)")
    packed_calls = []

    class Spy:   # the plan, counting its packed passes
        run = staticmethod(plan.run)

        def run_packed(self, *args):
            packed_calls.append(args[-2])   # sizes
            return plan.run_packed(*args)

    monkeypatch.setattr(model_mod, "decoder_plan", lambda m: Spy())
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 320, (1, n), generator=gen) for n in (30, 12, 26)]
    new = [torch.randint(0, 320, (1, n), generator=gen) for n in (1, 5, 3)]

    def caches():
        made = [full_cache(model, 64), RetrievalCache(model.cfg, model.rope(64), 1, 32, 8, 24, model.device, model.dtype),
                StreamingCache(model.cfg, model.rope(64), 1, 4, 20, model.device, model.dtype, scratch=8, evict_block=2)]
        for cache, prompt in zip(made, prompts):
            model(prompt, cache)
            cache.commit(cache.get_seq_length())
        return made

    alone_caches = caches()
    alone = [model(t, c, last_only=t.shape[1]) for t, c in zip(new, alone_caches)]        # each [1, T_i, V]
    packed_caches = caches()
    cache = PackedCache(packed_caches, [t.shape[1] for t in new])
    sizes = [t.shape[1] for t in new]
    got = model(torch.cat(new, dim=1), cache, last_only=cache.rows(sizes, model.device)).split(sizes, dim=1)
    assert packed_calls == [sizes]
    assert all(torch.equal(g, a) for g, a in zip(got, alone))
    for c_packed, c_alone in zip(packed_caches, alone_caches):
        assert torch.equal(c_packed.k, c_alone.k) and torch.equal(c_packed.v, c_alone.v)
        assert c_packed.get_seq_length() == c_alone.get_seq_length()
        if hasattr(c_packed, "last_query"):
            assert torch.equal(c_packed.last_query, c_alone.last_query)


@pytest.mark.parametrize("dtype,weights", [("bf16", "same"), ("bf16", "int8"), ("bf16", "int4"),
                                           ("fp32", "same"), ("fp32", "int8"), ("fp32", "int4")])
def test_one_call_decoder_plan_equals_the_module_path_bitwise(tmp_path, monkeypatch, dtype, weights):
    """model.decoder_plan runs a CPU pass's layers in one native call: the same kernels in the
    same order as the modules, so logits and the cache's K/V and last query are bitwise equal,
    for the full and the retrieval cache, 1-token and 5-token passes, packed bf16 or fp32 and
    native int8/int4 linears, with a bias on the qkv projection (Qwen2)."""
    from triforce.runtime import model as model_mod
    from triforce.runtime.cache_retrieval import RetrievalCache
    from triforce.runtime.cache_streaming import StreamingCache
    from triforce.runtime.ops import pack_linears
    from triforce.runtime.quant import lower_level_copy
    path = save_tiny(tmp_path, transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
                     hidden_size=256, intermediate_size=320)   # head_dim 64; Qwen2: qkv bias
    model = lower_level_copy(pack_linears(fuse_projections(load_model(path, dtype))), weights)
    if model_mod.decoder_plan(model) is None:
        pytest.skip("no decoder plan on this CPU (native kernels not built, or quantized linears without native int8/int4 here)")
    tokens = torch.randint(0, 320, (1, 40), generator=torch.Generator().manual_seed(0))

    def run(one_call: bool, make_cache):
        monkeypatch.setattr(model_mod, "decoder_plan", model_mod.decoder_plan if one_call else lambda m: None)
        cache, logits = make_cache(), []
        for chunk in (tokens[:, :30], tokens[:, 30:31], tokens[:, 31:36], tokens[:, 36:37]):
            logits.append(model(chunk, cache))
            cache.commit(cache.get_seq_length())
        return logits, cache

    def retrieval():
        return RetrievalCache(model.cfg, model.rope(64), 1, 32, 8, 24, model.device, model.dtype)

    def streaming():   # 30 + 7 tokens through 4 sinks + 20 recent: the later passes follow evictions
        return StreamingCache(model.cfg, model.rope(32), 1, 4, 20, model.device, model.dtype, scratch=8, evict_block=2)

    for make_cache in (lambda: full_cache(model, 64), retrieval, streaming):
        (fast, c1), (slow, c2) = run(True, make_cache), run(False, make_cache)
        assert all(torch.equal(a, b) for a, b in zip(fast, slow))
        assert torch.equal(c1.k, c2.k) and torch.equal(c1.v, c2.v)
        if hasattr(c1, "last_query"):
            assert torch.equal(c1.last_query, c2.last_query)
