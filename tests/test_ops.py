"""The native per-layer ops (runtime/csrc/layer_cpu.cpp) against their torch twins (runtime/ops.py).

linear: the few-row shapes decode and verify passes produce (N = 1..16 rows, K with and without a
32-wide tail, O not a multiple of the 4-row block, strided weight views as tensor parallelism makes
them, a bias), the row invariance a verify pass relies on, and the dispatch. rms_norm, rope and
silu_mul: bf16 and fp32, rows of any count, rope into a strided cache slice and in place."""
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from triforce.runtime import ops as linear_mod
from triforce.runtime import native


@pytest.fixture(scope="module")
def kernel():
    module = native.layer_cpu()
    if module is None or not module.has_avx512_bf16():
        pytest.skip("native linear not built with avx512_bf16 on this CPU (torch's F.linear runs instead)")
    return module


@pytest.fixture(scope="module")
def packed_kernel():
    """The native module where linear_packed has a vector path (AVX-512 with avx512_bf16, or AVX2 + FMA)."""
    module = native.layer_cpu()
    if module is None or not module.has_packed():
        pytest.skip("native packed linear not built on this CPU (torch's F.linear runs instead)")
    return module


def ref(x, w, b=None):
    # fp32 reference from the same bf16 inputs, rounded once to bf16 as the kernel rounds
    return F.linear(x.float(), w.float(), None if b is None else b.float()).bfloat16()


@pytest.mark.parametrize("N", [1, 2, 3, 4, 5, 7, 8, 13, 16])
@pytest.mark.parametrize("O,K", [(64, 32), (7, 576), (131, 100), (960, 576), (576, 1536), (5, 17)])
def test_kernel_matches_fp32_reference(kernel, N, O, K):
    g = torch.Generator().manual_seed(N * 1000 + O + K)
    x, w = torch.randn(N, K, generator=g).bfloat16(), torch.randn(O, K, generator=g).bfloat16()
    out = kernel.linear(x, w)
    assert out.shape == (N, O) and out.dtype == torch.bfloat16
    expect = ref(x, w)
    # both sum the same bf16 products in fp32 (different orders), then round to bf16 once:
    # they differ by at most a unit or two in the last place of bf16 (2^-7 relative)
    torch.testing.assert_close(out.float(), expect.float(), rtol=2 ** -7, atol=1e-3 * K ** 0.5)


def test_bias_and_strided_weight(kernel):
    g = torch.Generator().manual_seed(1)
    full = torch.randn(50, 200, generator=g).bfloat16()
    w = full[:, 40:136]                          # a column slice: stride(0) = 200, as TP shards it
    x, b = torch.randn(3, 96, generator=g).bfloat16(), torch.randn(50, generator=g).bfloat16()
    torch.testing.assert_close(kernel.linear(x, w, b).float(), ref(x, w, b).float(), rtol=2 ** -7, atol=1e-2)


def test_rows_do_not_depend_on_the_other_rows(kernel):
    """A T-row call gives bitwise the rows of T one-row calls (the verify pass equals the decode
    passes it replaces, as far as the linears go)."""
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(13, 576, generator=g).bfloat16(), torch.randn(1000, 576, generator=g).bfloat16()
    together = kernel.linear(x, w)
    alone = torch.cat([kernel.linear(x[i:i + 1], w) for i in range(13)])
    assert torch.equal(together, alone)


@pytest.mark.parametrize("N", [1, 3, 8, 12, 13, 16, 40])
@pytest.mark.parametrize("O,K", [(64, 32), (7, 576), (131, 100), (960, 576), (576, 1536), (49, 2)])
def test_packed_kernel_matches_fp32_reference(packed_kernel, N, O, K):
    """The packed layout's kernel, at decode (1..16 rows) and prefill-chunk (40) row counts, O not
    a multiple of the 16-row block, with a bias."""
    g = torch.Generator().manual_seed(N * 1000 + O + K)
    x, w = torch.randn(N, K, generator=g).bfloat16(), torch.randn(O, K, generator=g).bfloat16()
    b = torch.randn(O, generator=g).bfloat16()
    out = packed_kernel.linear_packed(x, linear_mod.pack(w), b, O)
    assert out.shape == (N, O) and out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref(x, w, b).float(), rtol=2 ** -7, atol=1e-3 * K ** 0.5 + 1e-2)


@pytest.mark.parametrize("N", [1, 4, 6, 7, 8, 12, 13, 40])
@pytest.mark.parametrize("O,K", [(64, 32), (7, 576), (131, 101), (960, 576), (576, 1536), (49, 1)])
def test_packed_fp32_kernel_matches_fp64_reference(packed_kernel, N, O, K):
    """The fp32 packed kernel (odd K included): fp32 sums in column order, as close to an fp64
    reference as a K-term fp32 sum gets (torch's blocked GEMM is a few times closer)."""
    g = torch.Generator().manual_seed(N * 1000 + O + K)
    x, w, b = torch.randn(N, K, generator=g), torch.randn(O, K, generator=g), torch.randn(O, generator=g)
    out = packed_kernel.linear_packed(x, linear_mod.pack(w), b, O)
    assert out.shape == (N, O) and out.dtype == torch.float32
    expect = F.linear(x.double(), w.double(), b.double())
    torch.testing.assert_close(out.double(), expect, rtol=1e-5, atol=2e-6 * K)


@pytest.mark.parametrize("dtype,shape", [(torch.bfloat16, (63, 288, 16, 2)), (torch.float32, (63, 576, 16, 1))])
def test_pack_round_trip_and_packed_rows_are_row_invariant(packed_kernel, dtype, shape):
    g = torch.Generator().manual_seed(3)
    w = torch.randn(1000, 576, generator=g).to(dtype)
    packed = linear_mod.pack(w)
    assert packed.shape == shape and torch.equal(linear_mod.unpack(packed, 1000), w)
    x = torch.randn(13, 576, generator=g).to(dtype)
    together = packed_kernel.linear_packed(x, packed, None, 1000)
    alone = torch.cat([packed_kernel.linear_packed(x[i:i + 1], packed, None, 1000) for i in range(13)])
    assert torch.equal(together, alone)


def test_pack_linears_replaces_only_packable_modules(packed_kernel):
    """A bf16 or fp32 model's linears become PackedLinear with the same outputs (to rounding) and
    the same dense weight; odd-width bf16 and fp16 linears stay as they are."""
    g = torch.Generator().manual_seed(4)
    model = torch.nn.Sequential(linear_mod.Linear(64, 40, bias=True), torch.nn.Linear(40, 33),
                                torch.nn.Linear(33, 8)).bfloat16()
    model.add_module("fp32", torch.nn.Linear(8, 7))
    model.add_module("fp16", torch.nn.Linear(7, 8).half())
    dense = [m.weight.clone() for m in (model[0], model[1], model[3])]
    x = torch.randn(2, 5, 64, generator=g).bfloat16()
    with torch.inference_mode():
        before = model[2](model[1](model[0](x)))
        before32 = model[3](before.float())
        linear_mod.pack_linears(model)
        after = model[2](model[1](model[0](x)))
        after32 = model[3](before.float())
    assert [type(m).__name__ for m in model] == ["PackedLinear", "PackedLinear", "Linear", "PackedLinear", "Linear"]
    assert model[0].weight.dtype == torch.bfloat16 and model[0].weight.numel() == 0   # the marker
    assert model[3].weight.dtype == torch.float32 and model[3].weight.numel() == 0
    assert all(torch.equal(linear_mod.dense_weight(m), w) for m, w in zip((model[0], model[1], model[3]), dense))
    torch.testing.assert_close(after.float(), before.float(), rtol=2 ** -6, atol=0.05)
    torch.testing.assert_close(after32, before32, rtol=1e-5, atol=1e-5)


def test_dispatch(kernel, monkeypatch):
    """Few bf16 rows without autograd take the kernel; many rows, fp32 and autograd take F.linear."""
    calls = []
    counting = SimpleNamespace(linear=lambda *a: calls.append(1) or kernel.linear(*a), has_avx512_bf16=lambda: True)
    monkeypatch.setattr(native, "layer_cpu", lambda: counting)
    w = torch.randn(8, 64).bfloat16()
    linear_mod.linear(torch.randn(2, 3, 64).bfloat16(), w)
    assert calls == [1]
    linear_mod.linear(torch.randn(linear_mod.MAX_ROWS + 1, 64).bfloat16(), w)
    linear_mod.linear(torch.randn(2, 64), w.float())
    linear_mod.linear(torch.randn(2, 64).bfloat16().requires_grad_(), w)
    assert calls == [1]
    out = linear_mod.linear(torch.randn(2, 3, 64).bfloat16(), w)
    assert out.shape == (2, 3, 8)


def test_bf16_rows_go_through_fp32_where_torch_has_no_bf16_gemm(monkeypatch):
    """On a CPU without bf16 GEMM (AVX2; ops.cpu_bf16), more than FP32_ROWS bf16 rows of an
    unpacked linear multiply in fp32 and round once (torch's bf16 GEMM runs at ~1 GFLOP/s there);
    fewer rows keep torch's bf16 product."""
    monkeypatch.setattr(native, "layer_cpu", lambda: None)   # torch's paths only
    monkeypatch.setattr(linear_mod, "cpu_bf16", lambda: False)
    g = torch.Generator().manual_seed(5)
    w, b = torch.randn(24, 64, generator=g).bfloat16(), torch.randn(24, generator=g).bfloat16()
    many = torch.randn(2, linear_mod.FP32_ROWS, 64, generator=g).bfloat16()
    assert torch.equal(linear_mod.linear(many, w, b), F.linear(many.float(), w.float(), b.float()).bfloat16())
    few = many[:1]
    assert torch.equal(linear_mod.linear(few, w, b), F.linear(few, w, b))


def test_packed_prefill_chunks_take_the_fp32_gemm_on_avx2_builds(packed_kernel, monkeypatch):
    """A build without the AVX-512 kernels runs a PackedLinear's prefill chunk (more than MAX_ROWS
    rows) on torch's fp32 GEMM over the dense weight, and its decode rows on the packed kernel."""
    avx2 = SimpleNamespace(has_avx512_bf16=lambda: False, linear_packed=packed_kernel.linear_packed)
    monkeypatch.setattr(native, "layer_cpu", lambda: avx2)
    g = torch.Generator().manual_seed(6)
    dense = torch.nn.Linear(64, 40).bfloat16()
    packed = linear_mod.PackedLinear(dense)
    chunk = torch.randn(1, linear_mod.MAX_ROWS + 3, 64, generator=g).bfloat16()
    with torch.inference_mode():
        expect = F.linear(chunk.float(), dense.weight.float(), dense.bias.float()).bfloat16()
        assert torch.equal(packed(chunk), expect)
        row = chunk[:, :1]
        assert torch.equal(packed(row), packed_kernel.linear_packed(row[0], packed.packed, packed.bias, 40)[None])


@pytest.fixture(scope="module")
def glue():
    """The native module for the glue ops (rms_norm, rope, silu_mul): any build has them, the
    portable one (no AVX-512) included; only the linear needs avx512_bf16."""
    module = native.layer_cpu()
    if module is None:
        pytest.skip("native layer ops did not build (torch's twins run instead)")
    return module


@pytest.fixture
def torch_twin(monkeypatch):
    """Calls runtime.ops with the native module hidden: the pure-torch path."""
    def call(fn, *args, **kw):
        with monkeypatch.context() as m:
            m.setattr(native, "layer_cpu", lambda: None)
            return fn(*args, **kw)
    return call


GLUE_TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=2 ** -7, atol=2 ** -7)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 3, 64])
def test_rms_norm_matches_twin(glue, torch_twin, dtype, rows):
    g = torch.Generator().manual_seed(rows)
    x, w = (3 * torch.randn(1, rows, 576, generator=g)).to(dtype), torch.randn(576, generator=g).to(dtype)
    out = linear_mod.rms_norm(x, w, 1e-5)
    assert out.dtype == dtype and out.shape == x.shape
    torch.testing.assert_close(out, torch_twin(linear_mod.rms_norm, x, w, 1e-5), **GLUE_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("T", [1, 5])
def test_rope_matches_twin_into_a_cache_slice(glue, torch_twin, dtype, T):
    g = torch.Generator().manual_seed(T)
    qkv = torch.randn(2, T, 5, 64, generator=g).to(dtype)
    x = qkv.transpose(1, 2)[:, 1:4]                       # [B, h=3, T, D], strided as Attention.project makes it
    cos, sin = torch.randn(2, T, 64, generator=g).to(dtype), torch.randn(2, T, 64, generator=g).to(dtype)
    expect = torch_twin(linear_mod.rope, x, cos, sin)
    torch.testing.assert_close(linear_mod.rope(x, cos, sin), expect, **GLUE_TOL[dtype])
    cache = torch.zeros(2, 3, T + 7, 64, dtype=dtype)
    linear_mod.rope(x, cos, sin, out=cache[:, :, 4:4 + T])
    torch.testing.assert_close(cache[:, :, 4:4 + T], expect, **GLUE_TOL[dtype])
    assert cache[:, :, :4].abs().sum() == 0 and cache[:, :, 4 + T:].abs().sum() == 0   # nothing outside the slice
    inplace = x.clone()
    linear_mod.rope(inplace, cos, sin, out=inplace)       # out aliasing x: each row is read before it is written
    torch.testing.assert_close(inplace, expect, **GLUE_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_matches_twin(glue, torch_twin, dtype):
    gate_up = (4 * torch.randn(2, 3, 2 * 1536, generator=torch.Generator().manual_seed(0))).to(dtype)
    gate, up = gate_up.chunk(2, dim=-1)                   # strided halves, as the fused projection gives them
    out = linear_mod.silu_mul(gate, up)
    assert out.shape == (2, 3, 1536)
    torch.testing.assert_close(out, torch_twin(linear_mod.silu_mul, gate, up), **GLUE_TOL[dtype])
    assert torch.equal(out, linear_mod.silu_mul(gate.contiguous(), up.contiguous()))   # fused or not: same bits


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_silu_mul_matches_twin_at_the_ends_and_in_the_tail(glue, torch_twin, dtype):
    """The vector paths clamp exp's argument (AVX2: 2^n built in the exponent bits): gates far
    past where e^-g overflows or vanishes still give silu's limits (0 and g), and a width that is
    not a multiple of the lanes ends in the scalar tail."""
    ends = torch.tensor([-1e4, -200., -100., -88.5, -87.5, -20., -1e-3, 0., 1e-3, 20., 87.5, 88.5, 100., 200., 1e4])
    gate = torch.cat([ends, torch.linspace(-30, 30, 1539 - len(ends))]).to(dtype)[None]   # [1, 1539]
    up = torch.linspace(-2, 2, 1539).to(dtype)[None]
    out = linear_mod.silu_mul(gate, up)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch_twin(linear_mod.silu_mul, gate, up), **GLUE_TOL[dtype])


def test_glue_falls_back_under_autograd(glue):
    """Training (distillation) needs gradients: the ops take torch's path and gradients flow."""
    x = torch.randn(2, 8, requires_grad=True)
    linear_mod.rms_norm(x, torch.ones(8), 1e-5).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
