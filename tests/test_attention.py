"""The native CPU attention kernel against its pure-torch twin (attend_reference), on the shapes
decode and verify produce: ragged S, every T in 1..32, group sizes 1..8, bf16/fp16/fp32, and K/V
that are [:, :, :S] views of a larger cache buffer. Also the mask-free prefill path and the
fallback when the kernel cannot be built."""
import pytest
import torch

from triforce.runtime import attention, native, ops

TOL = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}   # max abs error, |out| <~ 1


@pytest.fixture(scope="module")
def kernel():
    module = native.attention_cpu()
    if module is None:
        pytest.skip("native attention did not build (see the line on stderr)")
    return module


def cache_views(B, Hkv, S, D, dtype, gen):
    """K/V as the caches return them: the first S positions of a [B, Hkv, capacity, D] buffer."""
    capacity = S + 5
    k = torch.randn(B, Hkv, capacity, D, generator=gen).to(dtype)
    v = torch.randn(B, Hkv, capacity, D, generator=gen).to(dtype)
    return k[:, :, :S], v[:, :, :S]


def reference(q, k, v):
    # fp32 reference from the same (rounded) inputs: the kernel accumulates in fp32 too
    return attention.attend_reference(q.float(), k.float(), v.float())


def check(kernel, B, Hkv, G, T, S, D, dtype, seed=0, **kw):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, Hkv * G, T, D, generator=gen).to(dtype)
    k, v = cache_views(B, Hkv, S, D, dtype, gen)
    out = kernel.attend(q, k, v, D ** -0.5, **kw)
    assert out.shape == (B, T, Hkv * G, D) and out.dtype == dtype
    err = (out.float() - reference(q, k, v)).abs().max().item()
    assert err < TOL[dtype], f"B={B} Hkv={Hkv} G={G} T={T} S={S} D={D} {dtype}: max error {err:.2e}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("T", range(1, 33))
def test_every_T(kernel, T, dtype):
    # S ragged around the block (64) and chunk (512, 1024) sizes; G cycles through 1..8
    for i, S in enumerate((T, T + 6, 63 + T, 1000 + T)):
        check(kernel, B=1, Hkv=2, G=1 + (T + i) % 8, T=T, S=S, D=64, dtype=dtype, seed=T * 10 + i)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("G", range(1, 9))
def test_every_group_size(kernel, G, dtype):
    check(kernel, B=2, Hkv=3, G=G, T=5, S=2113, D=64, dtype=dtype, seed=G)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("T", [1, 8])
def test_token_major_kv(kernel, T, dtype):
    # K/V rows Hkv * D apart ([B, S, Hkv, D] transposed): the kernel reads fp32 V blocks and
    # prefetches rows in place, so the row stride is not D; S crosses the chunk edges
    gen = torch.Generator().manual_seed(T)
    for S in (130, 1100, 2100):
        q = torch.randn(1, 9, T, 64, generator=gen).to(dtype)
        k, v = (torch.randn(1, S + 3, 3, 64, generator=gen).to(dtype).transpose(1, 2)[:, :, :S] for _ in range(2))
        assert k.stride(2) == 3 * 64
        err = (kernel.attend(q, k, v, 0.125).float() - reference(q, k, v)).abs().max().item()
        assert err < TOL[dtype], f"S={S} T={T} {dtype}: max error {err:.2e}"


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("T", [1, 6, 12])
def test_slots_past_the_cache_are_never_read(kernel, D, T):
    # The cache's capacity past S holds whatever was there (a cropped draft, nothing yet): NaN
    # there must not reach the output. The AMX kernel reads V's rows in place in groups of 16
    # keys, so a group that straddles S must read a zero-padded copy.
    gen = torch.Generator().manual_seed(D + T)
    for S in (T, 40 + T, 1000 + T):
        q = torch.randn(1, 6, T, D, generator=gen).bfloat16()
        k, v = (torch.full((1, 2, S + 64, D), float("nan")).bfloat16() for _ in range(2))
        for x in (k, v):
            x[:, :, :S] = torch.randn(1, 2, S, D, generator=gen).bfloat16()
        out = kernel.attend(q, k[:, :, :S], v[:, :, :S], D ** -0.5)
        err = (out.float() - reference(q, k[:, :, :S], v[:, :, :S])).abs().max().item()
        assert err < TOL[torch.bfloat16], f"D={D} T={T} S={S}: max error {err:.2e}"


@pytest.mark.parametrize("D", [32, 96, 128])
def test_other_head_dims(kernel, D):
    for dtype in (torch.float32, torch.bfloat16):
        check(kernel, B=1, Hkv=2, G=4, T=3, S=700, D=D, dtype=dtype)


def test_odd_head_dim_uses_scalar_path(kernel):
    check(kernel, B=1, Hkv=1, G=3, T=4, S=130, D=24, dtype=torch.float32)


@pytest.mark.parametrize("dot", [False, True])
@pytest.mark.parametrize("T", [1, 2, 7, 16, 32])
def test_bf16_products_both_ways(kernel, T, dot):
    # bf16 runs on vdpbf16ps (dot: P rounded to bf16 too) or widened to fp32 for vfmadd;
    # dot_bf16=None (what attention.attend passes) picks per CPU, so test both explicitly
    if not kernel.has_avx512_bf16():
        pytest.skip("built without avx512_bf16")
    check(kernel, B=1, Hkv=3, G=3, T=T, S=2000 + T, D=64, dtype=torch.bfloat16, dot_bf16=dot)


@pytest.mark.parametrize("dtype,dot", [(torch.float32, None), (torch.float16, None),
                                       (torch.bfloat16, False), (torch.bfloat16, True)])
@pytest.mark.parametrize("S", [517, 1027, 2051])  # the T tokens straddle a chunk boundary (512, 1024, 2048)
@pytest.mark.parametrize("T", [2, 3, 4, 6, 11])  # AVX2: 6 rows with the keys in the lanes, 9 and 12 the same in two halves (4 + 5, 6 + 6), 18 and 33 rows in the lanes; with AMX: 12 rows one held tile, 18 an item of two tiles of 9, 33 two items of 17 and 16 (attention_cpu.cpp)
def test_rows_independent_of_T_and_threads(kernel, dtype, dot, S, T):
    # Chunk and block boundaries are positions, and which thread runs a chunk changes nothing:
    # a verify pass over T tokens gives each token bit-for-bit what decoding it alone against
    # its prefix gives (greedy modes rely on this), with 1 thread or 2.
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(1, 9, T, 64, generator=gen).to(dtype)
    k, v = cache_views(1, 3, S, 64, dtype, gen)
    verify = kernel.attend(q, k, v, 0.125, dot)
    for t in range(T):
        stop = S - T + t + 1
        alone = kernel.attend(q[:, :, t:t + 1], k[:, :, :stop], v[:, :, :stop], 0.125, dot)
        assert torch.equal(verify[:, t], alone[:, 0]), f"row {t} differs from its decode pass"
    threads = torch.get_num_threads()
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            assert torch.equal(kernel.attend(q, k, v, 0.125, dot), verify), f"{n} threads differ"
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("T,S", [(40, 40), (33, 100), (100, 100), (100, 1100), (257, 700)])
def test_prefill(kernel, T, S, dtype):
    # G*T > 256 rows: the kernel splits rows instead of keys and stops at each block's last key
    check(kernel, B=1, Hkv=2, G=3, T=T, S=S, D=64, dtype=dtype, seed=T)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("T,S", [(40, 40), (33, 100), (100, 1100)])
def test_prefill_fallback_without_mask(T, S, dtype):
    gen = torch.Generator().manual_seed(T)
    q = torch.randn(1, 6, T, 64, generator=gen).to(dtype)
    k, v = cache_views(1, 2, S, 64, dtype, gen)
    out = attention._attend_sdpa_split(q, k, v)               # the torch path when no kernel
    err = (out.float() - reference(q, k, v)).abs().max().item()
    assert err < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("G,T,S", [(1, 1, 300), (3, 1, 257), (1, 2, 300), (3, 7, 300), (3, 40, 40), (1, 33, 1000)])
def test_lower_right_causal_bias_path(G, T, S, dtype):
    """The GPU's path for every T (no flash-attn): torch's CausalBias, bottom-right aligned. Here on the
    CPU torch materializes it, so this checks the alignment and the GQA heads, not the GPU kernel
    (tests/test_gpu.py runs that against the reference)."""
    gen = torch.Generator().manual_seed(T)
    q = torch.randn(1, 2 * G, T, 64, generator=gen).to(dtype)
    k, v = cache_views(1, 2, S, 64, dtype, gen)
    out = attention._attend_sdpa_lower_right(q, k, v)
    assert out.shape == (1, T, 2 * G, 64)
    err = (out.float() - reference(q, k, v)).abs().max().item()
    assert err < TOL[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_out_is_written_in_place_with_the_same_bits_and_checked(kernel, dtype):
    """DecoderPlan passes a view of its workspace as `out` (no allocation in a pass), for a packed
    pass a slice of it: the call writes there, bit for bit what it returns without `out`, and
    refuses a buffer of the wrong shape, dtype or stride."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 9, 4, 64, generator=gen).to(dtype)
    k, v = cache_views(1, 3, 300, 64, dtype, gen)
    alone = kernel.attend(q, k, v, 0.125)                                   # [1, T, H, D]
    rows = torch.full((10, 9 * 64), float("nan")).to(dtype)
    out = rows[3:7].view(1, 4, 9, 64)                                      # rows 3..6 of a [N, HD] workspace
    kernel.attend(q, k, v, 0.125, out=out)
    assert torch.equal(out, alone) and rows[:3].isnan().all() and rows[7:].isnan().all()
    for wrong in (torch.empty(1, 4, 9, 63).to(dtype), torch.empty(1, 4, 9, 64).half(), torch.empty(1, 4, 64, 9).to(dtype).transpose(2, 3)):
        with pytest.raises(RuntimeError, match="out must be"):
            kernel.attend(q, k, v, 0.125, out=wrong)


def test_attend_uses_kernel_for_decode(kernel, monkeypatch):
    calls = []
    monkeypatch.setattr(native, "attention_cpu", lambda: calls.append(1) or kernel)
    q, k, v = torch.randn(1, 4, 2, 64), torch.randn(1, 2, 9, 64), torch.randn(1, 2, 9, 64)
    torch.testing.assert_close(attention.attend(q, k, v), reference(q, k, v))
    assert calls


def test_fallback_when_build_fails(monkeypatch, capsys):
    # No compiler: one line on stderr, and attend runs the torch path.
    def broken(kernel, flavour, flags):
        raise RuntimeError(f"Error building extension ({kernel}, {flavour})\ng++: not found")
    monkeypatch.setattr(native, "_load", broken)
    native._module.cache_clear()
    try:
        assert native.attention_cpu() is None
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "using torch" in lines[0], lines
        q, k, v = torch.randn(1, 4, 3, 64), torch.randn(1, 2, 11, 64), torch.randn(1, 2, 11, 64)
        torch.testing.assert_close(attention.attend(q, k, v), reference(q, k, v))
        x = torch.randn(2, 3, 8).bfloat16()       # the per-layer ops fall back too (runtime/ops.py)
        assert native.layer_cpu() is None
        assert ops.rms_norm(x, torch.ones(8).bfloat16(), 1e-5).shape == x.shape
        assert ops.linear(x, torch.randn(5, 8).bfloat16()).shape == (2, 3, 5)
    finally:
        native._module.cache_clear()
