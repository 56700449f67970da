"""The native weight-only quantized linears (runtime/csrc/quant_cpu.cpp) against their torch twins
(runtime/quant.py): N = 1..16 rows and prefill-sized calls, K with a tail past the 32-column
group, O not a multiple of the 16-row block, a bias, bf16 and fp32 activations; the row
invariance a verify pass relies on; torch's layout where the kernels are unavailable or autograd
is on; and weight_bytes counting one copy of the weights.

The bounds tested (y = the kernel's output, W = dequantized() weights, x the activations):
* against the same arithmetic in fp32 (x quantized per group as quantize_rows_reference does):
  equal up to fp32 summation order (fp32 output) or one bf16 rounding (bf16 output);
* against x @ W^T with x exact: each |x - x_hat| <= max|x_g| / 254 in its group g, so
  |y - x @ W^T| <= sum_g max|x_g| / 254 * sum_{k in g} |W'_ok|, elementwise (W' = W for int8;
  for int4 W' = W - zero, the centred part: the zero term multiplies the exact sum of x). On
  random data the error is about 0.5% of |y| (norm), against 1-10% for the weights' own quantization.
"""
import pytest
import torch
import torch.nn as nn

from triforce.runtime import quant
from triforce.runtime.quant import INT4_GROUP, Int4Linear, Int8Linear, quantize_rows_reference, weight_bytes

SHAPES = [(64, 32), (37, 100), (200, 576), (960, 576), (131, 608), (576, 1536), (5, 17)]   # (O, K)


@pytest.fixture(scope="module")
def kernels():
    module = quant._native_kernels()
    if module is None:
        pytest.skip("native quant_cpu built without vector kernels here (torch's kernels run instead)")
    return module


def make(cls, O, K, dtype, bias=True, seed=0, native=None):
    torch.manual_seed(seed)
    dense = nn.Linear(K, O, bias=bias).to(dtype)
    return dense, cls(dense, native=native)


def centred_and_zero(layer):
    """(W - Z, Z) [O, K] fp32: the part the quantized activations multiply and the zero term."""
    W = layer.dequantized()
    if isinstance(layer, Int8Linear):
        return W, torch.zeros_like(W)
    O, K = W.shape
    _, _, zero = layer.native_parts()
    Z = zero[:O].repeat_interleave(INT4_GROUP, 1)[:, :K]
    return W - Z, Z


def activation_bound(x, Wc):
    """sum_g max|x_g| / 254 * sum_{k in g} |Wc_ok|  [N, O]: the most activation rounding can move y."""
    N, K = x.shape
    cols = -(-K // 32) * 32
    xs = torch.zeros(N, cols)
    xs[:, :K] = x.float().abs()
    ws = torch.zeros(Wc.shape[0], cols)
    ws[:, :K] = Wc.abs()
    return (xs.view(N, -1, 32).amax(-1) / 254) @ ws.view(len(ws), -1, 32).sum(-1).T


@pytest.mark.parametrize("cls", [Int8Linear, Int4Linear])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("O,K", SHAPES)
def test_native_matches_its_reference_for_few_rows(kernels, cls, dtype, O, K):
    dense, layer = make(cls, O, K, dtype, bias=O % 2 == 1, seed=O + K)
    assert layer.native
    Wc, Z = centred_and_zero(layer)
    b = 0 if dense.bias is None else dense.bias.float()
    g = torch.Generator().manual_seed(O * K)
    for N in range(1, 17):
        x = torch.randn(N, K, generator=g).to(dtype) * (1 + 4 * (torch.rand(N, K, generator=g) > 0.97))  # some outliers
        y = layer(x)
        assert y.shape == (N, O) and y.dtype == dtype
        y = y.float()
        same = quantize_rows_reference(x) @ Wc.T + x.float() @ Z.T + b       # the kernel's arithmetic in fp32
        scale = same.abs().amax().item()
        torch.testing.assert_close(layer.reference(x), same, rtol=1e-6, atol=1e-6 * scale)   # the class's twin
        if dtype == torch.float32:
            torch.testing.assert_close(y, same, rtol=1e-5, atol=1e-5 * scale)
        else:   # one rounding to bf16: 2^-8 relative
            torch.testing.assert_close(y, same, rtol=2 ** -8, atol=1e-5 * scale)
        exact = x.float() @ (Wc + Z).T + b                                     # activations unquantized
        slack = (2 ** -8 if dtype == torch.bfloat16 else 1e-5) * exact.abs() + 1e-4 * scale
        assert ((y - exact).abs() <= activation_bound(x, Wc) + slack).all(), (N, (y - exact).abs().max())
        assert ((y - exact).norm() / exact.norm()).item() < 0.02


@pytest.mark.parametrize("cls", [Int8Linear, Int4Linear])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_rows_do_not_depend_on_the_other_rows(kernels, cls, dtype):
    """A T-row call gives bitwise the rows of T one-row calls, and so does a prefill-sized call."""
    _, layer = make(cls, 1000, 608, dtype)
    x = torch.randn(70, 608).to(dtype)
    alone = torch.cat([layer(x[i:i + 1]) for i in range(70)])
    for n in (13, 16, 70):
        assert torch.equal(layer(x[:n]), alone[:n]), n
    assert torch.equal(layer(x.view(7, 10, 608)).view(70, 1000), alone)   # [B, T, K] in, [B, T, O] out


@pytest.mark.parametrize("cls", [Int8Linear, Int4Linear])
def test_torch_layout_where_native_is_unavailable(cls, monkeypatch):
    """No native module (portable build, no avx512_vnni, TRIFORCE_NATIVE=0): torch's layout and
    kernels, the same quantized weights (up to the scales' storage dtype), K tails padded."""
    monkeypatch.setattr(quant, "_native_kernels", lambda: None)
    dense, layer = make(cls, 37, 100, torch.bfloat16)
    assert not layer.native and not hasattr(layer, "packed")
    x = torch.randn(3, 5, 100, dtype=torch.bfloat16)
    y = layer(x).float()
    exact = x.float() @ layer.dequantized().T + dense.bias.float()
    torch.testing.assert_close(y, exact, rtol=0.02, atol=0.05)
    with pytest.raises(quant.UserError, match="native quantized kernels are not available"):
        cls(dense, native=True)


@pytest.mark.parametrize("cls", [Int8Linear, Int4Linear])
def test_both_layouts_hold_the_same_weights(kernels, cls):
    dense, native = make(cls, 200, 576, torch.bfloat16)
    _, portable = make(cls, 200, 576, torch.bfloat16, native=False)
    assert native.native and not portable.native
    torch.testing.assert_close(native.dequantized(), portable.dequantized(), rtol=2 ** -7, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_native_quantization_gives_its_torch_twins_bits(kernels, dtype):
    """quant_cpu.cpp's quantize_int4 / quantize_int8 (what a quantized linear is built with where the
    native kernels run) give int4_packed_reference's and int8_packed_reference's bytes: ragged O and
    K, constant rows and groups (scale clamped to 1e-12), zeros, large values."""
    g = torch.Generator().manual_seed(1)
    for O, K in SHAPES + [(16, 32), (3072, 576)]:
        w = torch.randn(O, K, generator=g) * 0.05
        w[0, :40] = 0.0                                              # a zero group
        w[min(2, O - 1)] = 0.01                                      # a constant row
        w[-1, -3:] = torch.tensor([3e3, -7e2, 1e-8])                 # wide range in the last group
        w = w.to(dtype)
        assert torch.equal(kernels.quantize_int4(w), quant.int4_packed_reference(w)), (O, K)
        packed, scales = kernels.quantize_int8(w)
        reference_packed, reference_scales = quant.int8_packed_reference(w)
        assert torch.equal(packed, reference_packed) and torch.equal(scales, reference_scales), (O, K)


def test_an_fp16_linear_is_quantized_as_its_fp32_values(kernels):
    """The native quantizers take bf16 or fp32; an fp16 weight goes in as fp32 (exact), which is
    what the torch twins compute with."""
    dense = nn.Linear(100, 37).half()
    assert torch.equal(Int4Linear(dense).packed, quant.int4_packed_reference(dense.weight.detach()))
    assert torch.equal(Int8Linear(dense).packed, quant.int8_packed_reference(dense.weight.detach())[0])


@pytest.mark.parametrize("cls,per_weight", [(Int8Linear, 1.0), (Int4Linear, 0.625)])
def test_weight_bytes_count_one_packed_copy(kernels, cls, per_weight):
    _, layer = make(cls, 960, 576, torch.bfloat16, bias=False)
    model = nn.Module()
    model.lm_head = layer
    expected = 960 * 576 * per_weight + (960 * 4 if cls is Int8Linear else 0)   # int8: fp32 scale per row
    assert weight_bytes(model) == expected
    assert {name for name, _ in layer.named_buffers()} == ({"weight", "packed", "scales"} if cls is Int8Linear
                                                           else {"weight", "packed"})


def test_kernels_refuse_mismatched_weights(kernels):
    _, layer = make(Int8Linear, 64, 96, torch.float32)
    with pytest.raises(RuntimeError, match="packed weights"):
        kernels.int8_linear(torch.randn(2, 128), layer.packed, layer.scales, None, 64)
    with pytest.raises(RuntimeError, match="bf16 or fp32"):
        kernels.int8_linear(torch.randn(2, 96).half(), layer.packed, layer.scales, None, 64)


@pytest.mark.parametrize("cls", [Int8Linear, Int4Linear])
def test_out_is_written_in_place_with_the_same_bits_and_checked(kernels, cls):
    """DecoderPlan passes its workspace as `out` (no allocation in a pass): the call writes there,
    bit for bit what it returns without `out`, and refuses a buffer of the wrong shape or dtype."""
    _, layer = make(cls, 200, 576, torch.bfloat16)
    call = (lambda x, **kw: kernels.int8_linear(x, layer.packed, layer.scales, layer.bias, 200, **kw)) if cls is Int8Linear \
        else (lambda x, **kw: kernels.int4_linear(x, layer.packed, layer.bias, 200, **kw))
    x = torch.randn(3, 576).bfloat16()
    out = torch.full((3, 200), float("nan")).bfloat16()
    assert call(x, out=out).data_ptr() == out.data_ptr() and torch.equal(out, call(x))
    for wrong in (torch.empty(3, 199).bfloat16(), torch.empty(3, 200), torch.empty(200, 3).bfloat16().T):
        with pytest.raises(RuntimeError, match="out must be contiguous"):
            call(x, out=wrong)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("k", [1, 7, 50])
def test_rescore_top_replaces_each_rows_k_largest_by_their_exact_logits(dtype, k):
    """rescore_top (every build has it: plain C++): in each row the k largest logits, and only they,
    become x . dense[v] summed in fp32 and rounded to x's dtype; k = V rescores the whole row."""
    from triforce.runtime import native
    kernel = native.quant_cpu()
    if kernel is None:
        pytest.skip("the native quant module did not build here")
    torch.manual_seed(1)
    V, E = 50, 40
    dense, x = torch.randn(V, E).to(dtype), torch.randn(3, E).to(dtype)
    exact = (x.float() @ dense.float().T).to(dtype).float()                    # [3, V]
    approx = exact + 0.3 * torch.randn(3, V)
    got = approx.clone()
    kernel.rescore_top(got, x, dense, k)
    top = approx.topk(k, dim=-1).indices
    torch.testing.assert_close(got.gather(-1, top), exact.gather(-1, top), rtol=1e-6, atol=1e-5)
    rest = torch.ones(3, V, dtype=torch.bool).scatter_(-1, top, False)
    assert torch.equal(got[rest], approx[rest])


def test_rescore_top_refuses_what_it_cannot_rescore():
    from triforce.runtime import native
    kernel = native.quant_cpu()
    if kernel is None:
        pytest.skip("the native quant module did not build here")
    logits, x, dense = torch.zeros(2, 10), torch.zeros(2, 4), torch.zeros(10, 4)
    with pytest.raises(RuntimeError, match=r"k = 11 must be in \[1, 10\]"):
        kernel.rescore_top(logits, x, dense, 11)
    with pytest.raises(RuntimeError, match="must both be bf16 or both fp32"):
        kernel.rescore_top(logits, x.bfloat16(), dense, 3)
    with pytest.raises(RuntimeError, match=r"dense must be \[V, E\]"):
        kernel.rescore_top(logits, x, torch.zeros(9, 4), 3)
    with pytest.raises(RuntimeError, match="contiguous fp32"):
        kernel.rescore_top(logits.bfloat16(), x, dense, 3)
