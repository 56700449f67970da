// The per-layer ops of a CPU decode/verify pass, each one call where torch takes several:
//   linear    y [N, O] = x [N, K] . w [O, K]^T (+ bias [O]), bf16; packed: bf16 or fp32 (the bytes of a pass)
//   rms_norm  out = w * (x / rms(x)), fp32 statistics             (torch: 8 ops)
//   rope      out = x * cos + rotate_half(x) * sin, into any view (torch: 6 ops and a copy)
//   silu_mul  out = silu(gate) * up (torch: 2 ops and a temporary)
// At T = 1 a layer's ~50 small torch ops cost as much as reading its weights (a few us each,
// 30 layers); these cut them to ~20. The glue ops take bf16 or fp32, compute in fp32 and
// round once; every output row depends only on its input row (row-invariant, as linear).
//
// Pure-torch twins: runtime/ops.py (tests/test_ops.py checks each pair agrees).
//
// linear:
//
// Why: a decode pass multiplies N = 1..16 rows by every weight matrix, so it is bound by reading
// the weights (2 bytes per weight, N*2 FLOPs per weight: at N = 16 and this CPU's ~5.5 FLOP/byte
// balance it becomes compute-bound). torch's bf16 GEMM reads the weights at a fraction of the
// memory bandwidth for so few rows. Here each thread streams its own slab of weight rows once:
// * work items are blocks of MR = 4 weight rows; threads take contiguous runs of blocks
//   (at::parallel_for), so each thread reads its slab of w exactly once (the packed linears
//   below, a pass's own, then steal from the back of the other thread's run: runs.h);
// * inside a block, the x rows go by in tiles of up to NR = 4; the block's 4 weight rows
//   (4 * K * 2 bytes, <= 16 KB for K <= 2048) stay in L1 across the tiles;
// * products run on vdpbf16ps (avx512_bf16): 32 bf16 products per instruction into 16 fp32
//   lanes per (row, weight row) accumulator; the K tail is a masked load; accumulation is fp32
//   and the sum is rounded once to bf16 (round to nearest even), as torch does.
// * Row-invariant: y[n, o] is computed by the same sequence of operations whatever N, the tiling
//   and the thread count, so a T-token verify pass gives bitwise the rows of T 1-token passes.
//
// Cost: bytes = O*K*2 (+ N*K*2 + N*O*2, small); FLOPs = 2*N*O*K.
//
// Built with -march=native; without avx512f/avx512bw/avx512dq/avx512_bf16 (or in the portable build)
// has_avx512_bf16() is false and callers use torch instead.
#include "torch_api.h"
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <tuple>
#include <vector>
#include <type_traits>

#include "runs.h"   // for_runs: work units with stealing
#include "simd.h"   // TF_AVX512 (avx512f, avx512bw, avx512dq, avx512_bf16) and vector helpers

namespace {

constexpr int MR = 4;   // weight rows per block (one accumulator each per x row)
constexpr int NR = 4;   // x rows per tile: MR * NR = 16 accumulators + MR weight vectors in zmm

bool has_avx512_bf16() { return TF_AVX512 != 0; }
bool has_packed() { return TF_AVX512 || TF_AVX2; }   // linear_packed has a vector path here

#if TF_AVX512
// out[n][m] = sum_k x[n, k] * w[m, k] for n < nr, m < mr (fp32 sums, before bias and rounding).
template <int nr, int mr>
inline void tile(const uint16_t* x, int64_t ldx, const uint16_t* w, int64_t ldw, int64_t K,
                 float out[NR][MR]) {
  __m512 acc[nr][mr];
  for (int n = 0; n < nr; ++n)
    for (int m = 0; m < mr; ++m) acc[n][m] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    __m512bh wv[mr];
    for (int m = 0; m < mr; ++m) wv[m] = (__m512bh)_mm512_loadu_si512(w + m * ldw + k);
    for (int n = 0; n < nr; ++n) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(x + n * ldx + k);
      for (int m = 0; m < mr; ++m) acc[n][m] = _mm512_dpbf16_ps(acc[n][m], xv, wv[m]);
    }
  }
  if (k < K) {  // tail: masked-off lanes load as zero, so they add 0 * 0
    const __mmask32 mask = (__mmask32)((1ull << (K - k)) - 1);
    __m512bh wv[mr];
    for (int m = 0; m < mr; ++m) wv[m] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + m * ldw + k);
    for (int n = 0; n < nr; ++n) {
      const __m512bh xv = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + n * ldx + k);
      for (int m = 0; m < mr; ++m) acc[n][m] = _mm512_dpbf16_ps(acc[n][m], xv, wv[m]);
    }
  }
  for (int n = 0; n < nr; ++n)
    for (int m = 0; m < mr; ++m) out[n][m] = _mm512_reduce_add_ps(acc[n][m]);
}

template <int mr>
void block_rows(const uint16_t* x, int64_t ldx, int64_t N, const uint16_t* w, int64_t ldw, int64_t K,
                float out[NR][MR], int64_t n0) {
  switch (std::min<int64_t>(NR, N - n0)) {
    case 4: tile<4, mr>(x + n0 * ldx, ldx, w, ldw, K, out); break;
    case 3: tile<3, mr>(x + n0 * ldx, ldx, w, ldw, K, out); break;
    case 2: tile<2, mr>(x + n0 * ldx, ldx, w, ldw, K, out); break;
    default: tile<1, mr>(x + n0 * ldx, ldx, w, ldw, K, out); break;
  }
}
#endif

// y [N, O] bf16 = x [N, K] bf16 . w [O, K]^T bf16 (+ bias [O], any float dtype), fp32 accumulation.
at::Tensor linear(at::Tensor x, at::Tensor w, c10::optional<at::Tensor> bias) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
              "linear: x [N, K] and w [O, K] expected, got ", x.sizes(), " and ", w.sizes());
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 && w.scalar_type() == at::kBFloat16,
              "linear: bf16 x and w expected, got ", x.scalar_type(), " and ", w.scalar_type());
  TORCH_CHECK(x.stride(1) == 1 && w.stride(1) == 1, "linear: x and w need unit stride in K");
  TORCH_CHECK(has_avx512_bf16(), "linear: built without avx512_bf16 (callers check has_avx512_bf16())");
  const int64_t N = x.size(0), K = x.size(1), O = w.size(0);
  auto y = at::empty({N, O}, x.options());
  at::Tensor b32;
  if (bias.has_value() && bias->defined()) b32 = bias->to(at::kFloat).contiguous();
#if TF_AVX512
  const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  auto* yp = y.data_ptr<at::BFloat16>();
  const float* bp = b32.defined() ? b32.data_ptr<float>() : nullptr;
  const int64_t ldx = x.stride(0), ldw = w.stride(0), blocks = (O + MR - 1) / MR;
  at::parallel_for(0, blocks, 16, [&](int64_t begin, int64_t end) {
    float out[NR][MR];
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t o0 = blk * MR, mr = std::min<int64_t>(MR, O - o0);
      const uint16_t* wb = wp + o0 * ldw;
      for (int64_t n0 = 0; n0 < N; n0 += NR) {
        switch (mr) {
          case 4: block_rows<4>(xp, ldx, N, wb, ldw, K, out, n0); break;
          case 3: block_rows<3>(xp, ldx, N, wb, ldw, K, out, n0); break;
          case 2: block_rows<2>(xp, ldx, N, wb, ldw, K, out, n0); break;
          default: block_rows<1>(xp, ldx, N, wb, ldw, K, out, n0); break;
        }
        for (int64_t n = n0; n < std::min<int64_t>(N, n0 + NR); ++n)
          for (int64_t m = 0; m < mr; ++m) {
            const float s = out[n - n0][m] + (bp ? bp[o0 + m] : 0.f);
            yp[n * O + o0 + m] = at::BFloat16(s);  // round to nearest even
          }
      }
    }
  });
#endif
  return y;
}

// linear_packed: the same product with w repacked once at load (runtime/ops.py PackedLinear):
//   packed [B, K/2, 16, 2] bf16, B = ceil(O / 16): block b holds output rows 16b..16b+15, and
//   for each pair of columns (2j, 2j+1) one 64-byte vector of those 16 rows' two weights.
// One vdpbf16ps then multiplies a broadcast pair of x columns by the 16 rows at once and adds
// into 16 fp32 lanes, one per output: no horizontal sum, and the block's weights are one
// sequential stream. Tiles of PR x rows by PB blocks (PR * PB accumulators); each thread takes
// a contiguous run of blocks, so it streams its slab of the weights once; for N > PR the tile's
// blocks (PB * K * 32 bytes) stay in L1/L2 across the row tiles. Row-invariant: y[n, o] sums
// the column pairs in order in lane o % 16 whatever N, the tiling and the thread count.
// K must be even (hidden sizes are); rows of the last block beyond O are zero and not stored.
// With two or more x rows the tile's products keep the core busy enough that the hardware
// prefetcher alone leaves the weight streams stalling: the memory time and the product time then
// add up. A software prefetch 32 lines (2 KB) ahead in each block's stream overlaps them (one
// thread, N = 8: gate_up 176 -> 136 us, qkv 50 -> 33). At N = 1 it only costs instructions.
constexpr int64_t PREFETCH_LINES = 32;  // 64-byte lines ahead in each block's stream (one per column pair; fp32: per column)
constexpr int PREFETCH_MIN_ROWS = 2;
#if TF_AVX512
template <int pr, int pb>
inline void packed_tile(const uint16_t* x, int64_t ldx, const uint16_t* wb, int64_t K, const float* bias,
                        at::BFloat16* y, int64_t ldy, int64_t o0, int64_t O) {
  __m512 acc[pr][pb];
  for (int n = 0; n < pr; ++n)
    for (int m = 0; m < pb; ++m) acc[n][m] = _mm512_setzero_ps();
  const int64_t pairs = K / 2, bstride = K * 16;  // elements per block
  for (int64_t j = 0; j < pairs; ++j) {
    __m512bh w[pb];
    if (pr >= PREFETCH_MIN_ROWS)  // (past a block's end it touches the next block: harmless)
      for (int m = 0; m < pb; ++m) _mm_prefetch((const char*)(wb + m * bstride + (j + PREFETCH_LINES) * 32), _MM_HINT_T0);
    for (int m = 0; m < pb; ++m) w[m] = (__m512bh)_mm512_load_si512(wb + m * bstride + j * 32);
    for (int n = 0; n < pr; ++n) {
      int32_t pair;
      std::memcpy(&pair, x + n * ldx + 2 * j, 4);
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(pair);
      for (int m = 0; m < pb; ++m) acc[n][m] = _mm512_dpbf16_ps(acc[n][m], xb, w[m]);
    }
  }
  for (int m = 0; m < pb; ++m) {
    const int64_t o = o0 + 16 * m;
    const int64_t live = std::min<int64_t>(16, O - o);
    const __mmask16 mask = (__mmask16)((1u << live) - 1);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + o) : _mm512_setzero_ps();
    for (int n = 0; n < pr; ++n) {
      const __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_add_ps(acc[n][m], b));  // round to nearest even
      _mm256_mask_storeu_epi16(y + n * ldy + o, mask, v);
    }
  }
}

#endif

#if TF_AMX
// The packed layout is also what AMX's tdpbf16ps takes as its right operand: 16 column pairs of
// a block are one contiguous 1 KB tile (16 rows of 64 bytes). So on AMX a tile of up to 16 x rows
// (tmm4, 32 columns) is multiplied by PB = 4 blocks' tiles (tmm5..tmm7) into 4 result tiles
// (tmm0..tmm3: 16 rows x 64 outputs), K/32 steps in order. Every row's sums take the same steps
// whatever N and the thread count (row-invariant, as above). The x rows go in tiles of equal
// height (<= 16), the last padded with zero rows (a copy of x, [tiles * rows, K]).
// The weights stream from memory through tile loads, which the hardware prefetcher alone leaves
// stalling (as packed_tile's products do): each step prefetches its blocks' 1 KB PREFETCH_AMX bytes
// ahead into L1 (the first row tile's steps: the others find them cached). The target's 120 decoder
// linears at 1 / 4 / 8 rows, in one process against no prefetch (2-core Xeon): median 13.6 / 13.5 /
// 13.9 -> 11.0 / 11.4 / 11.6 ms (1, 2 and 4 KB ahead about alike; into L2 a little slower); `ar`
// at 7K 29.1 -> 26.5 ms/token (docs/BENCHMARKS.md, round 28).
constexpr int64_t PREFETCH_AMX = 2048;
// Blocks [begin, end) (tiles configured by the caller: amx_begin(rows)).
void packed_amx(const uint16_t* x, int64_t ldx, int64_t N, const uint16_t* wp, int64_t K, const float* bias,
                at::BFloat16* y, int64_t O, int64_t begin, int64_t end) {
  const int64_t tiles = (N + 15) / 16, rows = (N + tiles - 1) / tiles, bstride = K * 16;
  alignas(64) thread_local float c[16 * 64];   // the result tiles' rows, one cache line each
  for (int64_t b = begin; b < end; b += 4) {
    const uint16_t* wb = wp + b * bstride;
    const int64_t nb = std::min<int64_t>(4, end - b);
    for (int64_t t = 0; t < tiles; ++t) {
      const uint16_t* xt = x + t * rows * ldx;
      _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
      for (int64_t k = 0; k < K; k += 32) {
        if (t == 0)   // (past a block's end it touches the next block: harmless)
          for (int64_t m = 0; m < nb; ++m)
            for (int64_t line = 0; line < 1024; line += 64)
              _mm_prefetch(reinterpret_cast<const char*>(wb + m * bstride + k * 16) + PREFETCH_AMX + line, _MM_HINT_T0);
        _tile_loadd(4, xt + k, ldx * 2);
        _tile_loadd(5, wb + k * 16, 64); _tile_dpbf16ps(0, 4, 5);
        if (nb > 1) { _tile_loadd(6, wb + bstride + k * 16, 64); _tile_dpbf16ps(1, 4, 6); }
        if (nb > 2) { _tile_loadd(7, wb + 2 * bstride + k * 16, 64); _tile_dpbf16ps(2, 4, 7); }
        if (nb > 3) { _tile_loadd(5, wb + 3 * bstride + k * 16, 64); _tile_dpbf16ps(3, 4, 5); }
      }
      _tile_stored(0, c, 256);   // the blocks there are (a unit of 2 stores 2: tile stores stall the stream)
      if (nb > 1) _tile_stored(1, c + 16, 256);
      if (nb > 2) _tile_stored(2, c + 32, 256);
      if (nb > 3) _tile_stored(3, c + 48, 256);
      for (int64_t m = 0; m < nb; ++m) {
        const int64_t o = (b + m) * 16, live = std::min<int64_t>(16, O - o);
        const __mmask16 mask = (__mmask16)((1u << live) - 1);
        const __m512 bv = bias ? _mm512_maskz_loadu_ps(mask, bias + o) : _mm512_setzero_ps();
        for (int64_t n = 0; n < std::min(rows, N - t * rows); ++n) {
          const __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_add_ps(_mm512_loadu_ps(c + n * 64 + 16 * m), bv));
          _mm256_mask_storeu_epi16(y + (t * rows + n) * O + o, mask, v);
        }
      }
    }
  }
}
#endif

#if TF_AVX512
// The fp32 twin of packed_tile: packed [B, K, 16] fp32, one 64-byte vector per column of a
// block's 16 rows; a broadcast x value times that vector adds into 16 fp32 lanes (vfmadd231ps).
// torch's fp32 GEMM read the weights at 10-14 GB/s for 4-8 rows on the 2-core Xeon (a verify pass
// of an fp32 target cost 1.5-2x a 1-token one); this streams them once for any row count.
// Row-invariant as the bf16 kernel: y[n, o] sums the columns in order in lane o % 16.
template <int pr, int pb>
inline void packed_tile_f32(const float* x, int64_t ldx, const float* wb, int64_t K, const float* bias,
                            float* y, int64_t ldy, int64_t o0, int64_t O) {
  __m512 acc[pr][pb];
  for (int n = 0; n < pr; ++n)
    for (int m = 0; m < pb; ++m) acc[n][m] = _mm512_setzero_ps();
  const int64_t bstride = K * 16;  // floats per block
  for (int64_t k = 0; k < K; ++k) {
    __m512 w[pb];
    if (pr >= PREFETCH_MIN_ROWS)
      for (int m = 0; m < pb; ++m) _mm_prefetch((const char*)(wb + m * bstride + (k + PREFETCH_LINES) * 16), _MM_HINT_T0);
    for (int m = 0; m < pb; ++m) w[m] = _mm512_load_ps(wb + m * bstride + k * 16);
    for (int n = 0; n < pr; ++n) {
      const __m512 xb = _mm512_set1_ps(x[n * ldx + k]);
      for (int m = 0; m < pb; ++m) acc[n][m] = _mm512_fmadd_ps(xb, w[m], acc[n][m]);
    }
  }
  for (int m = 0; m < pb; ++m) {
    const int64_t o = o0 + 16 * m;
    const int64_t live = std::min<int64_t>(16, O - o);
    const __mmask16 mask = (__mmask16)((1u << live) - 1);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + o) : _mm512_setzero_ps();
    for (int n = 0; n < pr; ++n) _mm512_mask_storeu_ps(y + n * ldy + o, mask, _mm512_add_ps(acc[n][m], b));
  }
}

// One tile of pr x rows by pb blocks, of the packed dtype its pointers say (bf16 pairs or fp32).
template <int pr, int pb>
TF_INLINE void tile_for(const uint16_t* x, int64_t ldx, const uint16_t* wb, int64_t K, const float* bias,
                        at::BFloat16* y, int64_t ldy, int64_t o0, int64_t O) {
  packed_tile<pr, pb>(x, ldx, wb, K, bias, y, ldy, o0, O);
}
template <int pr, int pb>
TF_INLINE void tile_for(const float* x, int64_t ldx, const float* wb, int64_t K, const float* bias,
                        float* y, int64_t ldy, int64_t o0, int64_t O) {
  packed_tile_f32<pr, pb>(x, ldx, wb, K, bias, y, ldy, o0, O);
}

// All N x rows against pb blocks: tiles of PR rows, then one of the rest.
template <int pb, typename X, typename Y>
void packed_rows(const X* x, int64_t ldx, int64_t N, const X* wb, int64_t K, const float* bias, Y* y, int64_t O, int64_t o0) {
  // pr * pb accumulators + pb weight vectors within 32 zmm (fp32 also holds a broadcast)
  constexpr int PR = pb >= 3 ? (std::is_same_v<X, float> ? 6 : 8) : 12;
  int64_t n0 = 0;
  for (; n0 + PR <= N; n0 += PR) tile_for<PR, pb>(x + n0 * ldx, ldx, wb, K, bias, y + n0 * O, O, o0, O);
  switch (N - n0) {
#define TF_ROWS(r) case r: if constexpr (r < PR) tile_for<r, pb>(x + n0 * ldx, ldx, wb, K, bias, y + n0 * O, O, o0, O); break;
    TF_ROWS(1) TF_ROWS(2) TF_ROWS(3) TF_ROWS(4) TF_ROWS(5) TF_ROWS(6) TF_ROWS(7)
    TF_ROWS(8) TF_ROWS(9) TF_ROWS(10) TF_ROWS(11)
#undef TF_ROWS
    default: break;
  }
}

// y [N, O] from the packed blocks (X: the element type of x and the weights, bf16 as uint16_t):
// each thread owns an even run of blocks and takes them PB at a time from its front, so it
// streams its slab once; then it takes single blocks from the back of the other's run (Runs).
// Up to one_stream_rows x rows, the PB blocks go one after the other (tiles of one block): a tile
// of PB blocks reads PB streams K * 32 bytes apart at once, and at these row counts one stream at
// a time reads faster (why was not isolated). The target's 120 decoder linears and head, 2
// threads, interleaved with PB-block tiles (round 44, Zen 4): bf16 N = 2..7 7-13% faster while the
// host read 37 GB/s, 10-20% at 62 GB/s (N = 1: 0-8%), N = 8 2-10% slower, N = 12-16 about even;
// fp32 (6-row tiles of 4 blocks) N = 3 / 4 / 7 3 / 6 / 18% faster, N = 8 / 10 / 16 14 / 9-15 /
// 5-8% (12: even). The same products in the same order: bitwise the same y.
template <typename X>
constexpr int64_t one_stream_rows() { return std::is_same_v<X, float> ? 16 : 7; }
template <typename X, typename Y>
void packed_blocks(const X* xp, int64_t ldx, int64_t N, const X* wp, int64_t K, const float* bp, Y* yp, int64_t O) {
  constexpr int PB = 4;  // blocks per tile (64 outputs)
  const int64_t B = (O + 15) / 16;
  for_runs(B, PB, [&](int64_t b, int64_t end) {
    if (N <= one_stream_rows<X>()) {
      for (; b < end; ++b) packed_rows<1>(xp, ldx, N, wp + b * K * 16, K, bp, yp, O, b * 16);
      return;
    }
    const X* wb = wp + b * K * 16;
    switch (end - b) {
      case 4: packed_rows<4>(xp, ldx, N, wb, K, bp, yp, O, b * 16); break;
      case 3: packed_rows<3>(xp, ldx, N, wb, K, bp, yp, O, b * 16); break;
      case 2: packed_rows<2>(xp, ldx, N, wb, K, bp, yp, O, b * 16); break;
      default: packed_rows<1>(xp, ldx, N, wb, K, bp, yp, O, b * 16); break;
    }
  });
}
#endif

#if TF_AVX2
// The packed layout on AVX2 + FMA, which has no bf16 products: a bf16 unit j of a block is 16
// 32-bit lanes, lane o = w[o][2j] | w[o][2j+1] << 16, so the low halves shifted up are column 2j
// in fp32 and the high halves masked are column 2j+1 (both exact), each multiplied into 8-lane
// fp32 FMAs by a broadcast x value. Each row keeps 2 accumulators (outputs 0-7 and 8-15), each
// taking the even then the odd column's FMA: the same operations for a row
// whatever N, the tiling and the thread count (row-invariant). fp32 weights: one FMA per column.
// x comes in fp32 (bf16 rows widened once a call). Tiles of PR_AVX2 = 4 rows: the widened weights
// serve 4 rows (two rows and four accumulators a row ran N >= 4 at ~50 GFLOP/s, this at 70-85).
// Prefetch as the AVX-512 path, at every row count. Zen 3, 2 threads: docs/BENCHMARKS.md, round 34.
constexpr int PR_AVX2 = 4;   // x rows per tile: 8 accumulators + 4 weight vectors + broadcasts in 16 ymm

template <typename Y>
TF_INLINE void store16(Y* y, const float* sums, const float* bias, int64_t o, int64_t O) {
  for (int64_t i = 0; i < std::min<int64_t>(16, O - o); ++i)
    y[o + i] = static_cast<Y>(sums[i] + (bias ? bias[o + i] : 0.f));   // bf16: round to nearest even
}

template <int pr, typename Y>
inline void avx2_tile(const float* x, int64_t ldx, const uint16_t* wb, int64_t K, const float* bias,
                      Y* y, int64_t ldy, int64_t o, int64_t O) {
  __m256 acc[pr][2];
  for (int n = 0; n < pr; ++n) acc[n][0] = acc[n][1] = _mm256_setzero_ps();
  for (int64_t j = 0; j < K / 2; ++j) {
    _mm_prefetch((const char*)(wb + (j + PREFETCH_LINES) * 32), _MM_HINT_T0);
    const __m256i lo = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + j * 32));        // outputs 0-7
    const __m256i hi = _mm256_load_si256(reinterpret_cast<const __m256i*>(wb + j * 32 + 16));   // outputs 8-15
    const __m256 e0 = bf16_even(lo), d0 = bf16_odd(lo), e1 = bf16_even(hi), d1 = bf16_odd(hi);
    for (int n = 0; n < pr; ++n) {
      const __m256 xe = _mm256_broadcast_ss(x + n * ldx + 2 * j), xd = _mm256_broadcast_ss(x + n * ldx + 2 * j + 1);
      acc[n][0] = _mm256_fmadd_ps(xd, d0, _mm256_fmadd_ps(xe, e0, acc[n][0]));
      acc[n][1] = _mm256_fmadd_ps(xd, d1, _mm256_fmadd_ps(xe, e1, acc[n][1]));
    }
  }
  alignas(32) float sums[16];
  for (int n = 0; n < pr; ++n) {
    _mm256_store_ps(sums, acc[n][0]);
    _mm256_store_ps(sums + 8, acc[n][1]);
    store16(y + n * ldy, sums, bias, o, O);
  }
}

template <int pr>
inline void avx2_tile(const float* x, int64_t ldx, const float* wb, int64_t K, const float* bias,
                      float* y, int64_t ldy, int64_t o, int64_t O) {
  __m256 acc[pr][2];
  for (int n = 0; n < pr; ++n) acc[n][0] = acc[n][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    _mm_prefetch((const char*)(wb + (k + PREFETCH_LINES) * 16), _MM_HINT_T0);
    const __m256 w0 = _mm256_load_ps(wb + k * 16), w1 = _mm256_load_ps(wb + k * 16 + 8);
    for (int n = 0; n < pr; ++n) {
      const __m256 xb = _mm256_broadcast_ss(x + n * ldx + k);
      acc[n][0] = _mm256_fmadd_ps(xb, w0, acc[n][0]);
      acc[n][1] = _mm256_fmadd_ps(xb, w1, acc[n][1]);
    }
  }
  alignas(32) float sums[16];
  for (int n = 0; n < pr; ++n) {
    _mm256_store_ps(sums, acc[n][0]);
    _mm256_store_ps(sums + 8, acc[n][1]);
    store16(y + n * ldy, sums, bias, o, O);
  }
}

// y [N, O] from the packed blocks, x [N, K] in fp32; W the packed element (bf16 as uint16_t or
// fp32), Y the output's. Threads take runs of blocks as packed_blocks does (runs.h).
template <typename W, typename Y>
void avx2_blocks(const float* x, int64_t N, const W* wp, int64_t K, const float* bias, Y* y, int64_t O) {
  const int64_t B = (O + 15) / 16;
  for_runs(B, 4, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const W* wb = wp + b * K * 16;
      int64_t n = 0;
      for (; n + PR_AVX2 <= N; n += PR_AVX2) avx2_tile<PR_AVX2>(x + n * K, K, wb, K, bias, y + n * O, O, b * 16, O);
      switch (N - n) {
        case 3: avx2_tile<3>(x + n * K, K, wb, K, bias, y + n * O, O, b * 16, O); break;
        case 2: avx2_tile<2>(x + n * K, K, wb, K, bias, y + n * O, O, b * 16, O); break;
        case 1: avx2_tile<1>(x + n * K, K, wb, K, bias, y + n * O, O, b * 16, O); break;
        default: break;
      }
    }
  });
}

// x [N, K] (bf16 or fp32, unit stride) as contiguous fp32, in a buffer kept per calling thread.
const float* widened(const at::Tensor& x) {
  const int64_t N = x.size(0), K = x.size(1);
  thread_local std::vector<float> buffer;
  buffer.resize(static_cast<size_t>(N * K));
  if (x.scalar_type() == at::kFloat) {
    for (int64_t n = 0; n < N; ++n) std::memcpy(buffer.data() + n * K, x.data_ptr<float>() + n * x.stride(0), K * 4);
  } else {
    const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const uint32_t bits = static_cast<uint32_t>(xp[n * x.stride(0) + k]) << 16;
        std::memcpy(buffer.data() + n * K + k, &bits, 4);
      }
  }
  return buffer.data();
}
#endif

// y [N, O] = x [N, K] . w^T (+ bias [O]) with w in the packed layout above: bf16 [B, K/2, 16, 2]
// or fp32 [B, K, 16, 1] (one 64-byte vector of a block's 16 rows per 4-byte unit of columns).
// y [N, O] (contiguous, x's dtype): written, not allocated (DecoderPlan's workspace).
void linear_packed_into(const at::Tensor& x, const at::Tensor& packed, const c10::optional<at::Tensor>& bias,
                        int64_t O, const at::Tensor& y) {
  const bool f32 = x.scalar_type() == at::kFloat;
  TORCH_CHECK(x.dim() == 2 && (f32 || x.scalar_type() == at::kBFloat16) && x.stride(1) == 1,
              "linear_packed: x [N, K] bf16 or fp32 with unit stride in K expected, got ", x.sizes(), " ", x.scalar_type());
  const int64_t N = x.size(0), K = x.size(1), B = (O + 15) / 16, unit = f32 ? 1 : 2;
  TORCH_CHECK(K % unit == 0 && packed.scalar_type() == x.scalar_type() && packed.is_contiguous() &&
              packed.numel() == B * K * 16 && reinterpret_cast<uintptr_t>(packed.data_ptr()) % 64 == 0,
              "linear_packed: packed must be a 64-byte aligned contiguous ", x.scalar_type(), " [", B, ", ", K / unit,
              ", 16, ", unit, "] for O = ", O, " and K = ", K, ", got ", packed.sizes(), " ", packed.scalar_type());
  TORCH_CHECK(has_packed(), "linear_packed: built without AVX-512 or AVX2 (callers check has_packed())");
  TORCH_CHECK(y.is_contiguous() && y.dim() == 2 && y.size(0) == N && y.size(1) == O && y.scalar_type() == x.scalar_type(),
              "linear_packed: out must be a contiguous ", x.scalar_type(), " [", N, ", ", O, "], got ", y.sizes());
  at::Tensor b32;
  if (bias.has_value() && bias->defined()) b32 = bias->to(at::kFloat).contiguous();
#if TF_AVX2
  const float* xf = widened(x);
  const float* b2 = b32.defined() ? b32.data_ptr<float>() : nullptr;
  if (f32)
    avx2_blocks(xf, N, packed.data_ptr<float>(), K, b2, y.data_ptr<float>(), O);
  else
    avx2_blocks(xf, N, reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>()), K, b2, y.data_ptr<at::BFloat16>(), O);
#endif
#if TF_AVX512
  if (f32) {
    packed_blocks(x.data_ptr<float>(), x.stride(0), N, packed.data_ptr<float>(), K,
                  b32.defined() ? b32.data_ptr<float>() : nullptr, y.data_ptr<float>(), O);
    return;
  }
  const auto* xp = reinterpret_cast<const uint16_t*>(x.data_ptr<at::BFloat16>());
  const auto* wp = reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>());
  auto* yp = y.data_ptr<at::BFloat16>();
  const float* bp = b32.defined() ? b32.data_ptr<float>() : nullptr;
  const int64_t ldx = x.stride(0);
#if TF_AMX
  if (amx_usable() && K % 32 == 0) {
    const int64_t tiles = (N + 15) / 16, rows = (N + tiles - 1) / tiles;
    at::Tensor xpad;   // x in whole tiles of `rows` rows (zero rows after the last)
    if (tiles * rows != N) {
      xpad = at::zeros({tiles * rows, K}, x.options());
      xpad.narrow(0, 0, N).copy_(x);
    }
    const auto* xa = xpad.defined() ? reinterpret_cast<const uint16_t*>(xpad.data_ptr<at::BFloat16>()) : xp;
    const int64_t lda = xpad.defined() ? K : ldx;
    // Units of 2 blocks, each thread a contiguous run of them (one stream), then stealing from the
    // back of the other's run (Runs): a thread that the shared host slows, or that gets less of the
    // memory, no longer holds the other at the region's end. (Whole runs of 4 blocks gave one of two
    // threads 5 of the 9 runs of o_proj and down_proj; an even static split, round 24, balanced
    // the blocks but not the threads' speeds.)
    for_runs((B + 1) / 2, 1, [&](int64_t u, int64_t) { packed_amx(xa, lda, N, wp, K, bp, yp, O, 2 * u, std::min(B, 2 * u + 2)); },
             [&] { amx_begin((int)rows); }, [] { amx_end(); });
    return;
  }
#endif
  packed_blocks(xp, ldx, N, wp, K, bp, yp, O);
#endif
}

at::Tensor linear_packed(at::Tensor x, at::Tensor packed, c10::optional<at::Tensor> bias, int64_t O) {
  auto y = at::empty({x.dim() == 2 ? x.size(0) : 0, O}, x.options());
  linear_packed_into(x, packed, bias, O, y);
  return y;
}

template <typename T> inline float load(const T* p, int64_t i) { return static_cast<float>(p[i]); }
template <typename T> inline T store(float v) { return static_cast<T>(v); }  // bf16: round to nearest even

// Rows are independent: split them over threads only when there are enough to pay for it.
template <typename F> void rows_parallel(int64_t rows, int64_t row_cost, F&& f) {
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(row_cost, 1));
  if (rows <= grain) { f(0, rows); return; }
  at::parallel_for(0, rows, grain, f);
}

void check_glue(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kFloat, op, ": ", name,
              " must be bf16 or fp32, got ", t.scalar_type());
  TORCH_CHECK(t.size(-1) == 0 || t.stride(-1) == 1, op, ": ", name, " needs unit stride in its last dim");
}

#if TF_AVX512
inline __m512 bf16x16(const at::BFloat16* p) {   // 16 bf16 -> fp32 (exact: bf16 is fp32's top half)
  return _mm512_castsi512_ps(_mm512_slli_epi32(
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}

// 16 fp32 -> bf16, round to nearest even exactly as c10::BFloat16 (and torch's bf16 add) round,
// with no flush of denormals (NaN -> 0x7FC0).
inline __m256i bf16_round(__m512 f) {
  const __m512i u = _mm512_castps_si512(f);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
  r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), _mm512_set1_epi32(0x7FC0));
  return _mm512_cvtepi32_epi16(r);
}

// 16 lanes of T as fp32, and back (bf16: rounded as c10::BFloat16 rounds)
TF_INLINE __m512 lanes(const float* p) { return _mm512_loadu_ps(p); }
TF_INLINE __m512 lanes(const at::BFloat16* p) { return bf16x16(p); }
TF_INLINE void store_lanes(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
TF_INLINE void store_lanes(at::BFloat16* p, __m512 v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bf16_round(v)); }
TF_INLINE __m512 rounded(__m512 v, const float*) { return v; }
TF_INLINE __m512 rounded(__m512 v, const at::BFloat16*) {   // v rounded to bf16 and widened back
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16_round(v)), 16));
}
#endif

#if TF_AVX2
// 8 fp32 -> bf16, rounded as bf16_round (AVX-512) rounds: to nearest even, NaN -> 0x7FC0.
inline __m128i bf16_round8(__m256 f) {
  const __m256i u = _mm256_castps_si256(f);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));   // each lane <= 0xFFFF
}

// 8 lanes of T as fp32, and back: the AVX-512 helpers' twins (lanes, store_lanes, rounded)
TF_INLINE __m256 lanes8(const float* p) { return _mm256_loadu_ps(p); }
TF_INLINE __m256 lanes8(const at::BFloat16* p) { return bf16x8(p); }
TF_INLINE void store_lanes8(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
TF_INLINE void store_lanes8(at::BFloat16* p, __m256 v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), bf16_round8(v)); }
TF_INLINE __m256 rounded8(__m256 v, const float*) { return v; }
TF_INLINE __m256 rounded8(__m256 v, const at::BFloat16*) {   // v rounded to bf16 and widened back
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16_round8(v)), 16));
}
#endif

// One row of rms_norm: out = w * round(x * rsqrt(mean(x^2) + eps)), the sum of squares in fp32 on
// 16 lanes (8 on AVX2 builds; then their sum), the normalized row rounded to T before the weight
// multiplies it, as transformers' LlamaRMSNorm does.
template <typename T>
inline void rms_row(const T* xr, const T* w, T* orow, int64_t E, float eps) {
  [[maybe_unused]] constexpr bool VEC = std::is_same_v<T, float> || std::is_same_v<T, at::BFloat16>;
  int64_t e = 0;
  float ss = 0.f;
#if TF_AVX512
  if constexpr (VEC) {
    __m512 acc = _mm512_setzero_ps();
    for (; e + 16 <= E; e += 16) {
      const __m512 v = lanes(xr + e);
      acc = _mm512_fmadd_ps(v, v, acc);
    }
    ss = _mm512_reduce_add_ps(acc);
  }
#elif TF_AVX2
  if constexpr (VEC) {
    __m256 acc = _mm256_setzero_ps();
    for (; e + 8 <= E; e += 8) {
      const __m256 v = lanes8(xr + e);
      acc = _mm256_fmadd_ps(v, v, acc);
    }
    ss = hsum8(acc);
  }
#endif
  for (int64_t i = e; i < E; ++i) { const float v = load(xr, i); ss += v * v; }
  const float inv = 1.f / std::sqrt(ss / E + eps);
  e = 0;
#if TF_AVX512
  if constexpr (VEC) {
    const __m512 iv = _mm512_set1_ps(inv);
    for (; e + 16 <= E; e += 16)
      store_lanes(orow + e, _mm512_mul_ps(lanes(w + e), rounded(_mm512_mul_ps(lanes(xr + e), iv), xr)));
  }
#elif TF_AVX2
  if constexpr (VEC) {
    const __m256 iv = _mm256_set1_ps(inv);
    for (; e + 8 <= E; e += 8)
      store_lanes8(orow + e, _mm256_mul_ps(lanes8(w + e), rounded8(_mm256_mul_ps(lanes8(xr + e), iv), xr)));
  }
#endif
  for (; e < E; ++e) orow[e] = store<T>(load(w, e) * static_cast<float>(store<T>(load(xr, e) * inv)));
}

void add_rms_norm(const at::Tensor& x, const at::Tensor& y, const at::Tensor& w, double eps, const at::Tensor& out);

// x [..., E] -> w * round(x * rsqrt(mean(x^2) + eps)) (rms_row); w has x's dtype.
at::Tensor rms_norm(at::Tensor x, at::Tensor w, double eps) {
  check_glue(x, "rms_norm", "x");
  x = x.contiguous();
  const int64_t E = x.size(-1);
  TORCH_CHECK(w.dim() == 1 && w.size(0) == E && w.scalar_type() == x.scalar_type() && w.stride(0) == 1,
              "rms_norm: w must be [", E, "] of x's dtype, got ", w.sizes(), " ", w.scalar_type());
  auto out = at::empty_like(x);
  add_rms_norm(x, at::Tensor(), w, eps, out);   // no y: x is only read
  return out;
}

// One row of rope: out[d] = x[d] * cos[d] + rotate_half(x)[d] * sin[d] in fp32, rounded once;
// rotate_half(x) = cat(-x[D/2:], x[:D/2]). out may alias x (all of x is read first). D <= 512.
template <typename T>
inline void rope_row(const T* xr, const T* cr, const T* sr, T* orow, int64_t D) {
  float tmp[512];
  const int64_t half = D / 2;
#if TF_AVX2
  if constexpr (std::is_same_v<T, at::BFloat16> || std::is_same_v<T, float>)
    if (half % 8 == 0) {   // 8 dims of each half at a time: x * cos + rot * sin, one rounding
      for (int64_t d = 0; d < half; d += 8) {
        const __m256 a = lanes8(xr + d), b = lanes8(xr + d + half);
        const __m256 lo = _mm256_fmadd_ps(_mm256_sub_ps(_mm256_setzero_ps(), b), lanes8(sr + d), _mm256_mul_ps(a, lanes8(cr + d)));
        const __m256 hi = _mm256_fmadd_ps(a, lanes8(sr + d + half), _mm256_mul_ps(b, lanes8(cr + d + half)));
        _mm256_storeu_ps(tmp + d, lo), _mm256_storeu_ps(tmp + d + half, hi);
      }
      for (int64_t d = 0; d < D; d += 8) store_lanes8(orow + d, _mm256_loadu_ps(tmp + d));
      return;
    }
#endif
  for (int64_t d = 0; d < D; ++d) {
    const float rot = d < half ? -load(xr, d + half) : load(xr, d - half);
    tmp[d] = load(xr, d) * load(cr, d) + rot * load(sr, d);
  }
  for (int64_t d = 0; d < D; ++d) orow[d] = store<T>(tmp[d]);
}

// out [B, h, T, D] = x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x[D/2:], x[:D/2]);
// x and out any strides with unit stride in D (out may be a slice of a cache), cos/sin [B, T, D].
void rope(at::Tensor x, at::Tensor cos, at::Tensor sin, at::Tensor out) {
  for (auto* t : {&x, &cos, &sin, &out}) check_glue(*t, "rope", "x/cos/sin/out");
  TORCH_CHECK(x.dim() == 4 && out.sizes() == x.sizes() && cos.dim() == 3 && cos.sizes() == sin.sizes() &&
              cos.size(0) == x.size(0) && cos.size(1) == x.size(2) && cos.size(2) == x.size(3) && x.size(3) <= 512,
              "rope: x/out [B, h, T, D <= 512] and cos/sin [B, T, D] expected, got ", x.sizes(), out.sizes(), cos.sizes());
  TORCH_CHECK(x.scalar_type() == out.scalar_type() && cos.scalar_type() == x.scalar_type() &&
              sin.scalar_type() == x.scalar_type(), "rope: x, cos, sin and out must share a dtype");
  const int64_t B = x.size(0), h = x.size(1), T = x.size(2), D = x.size(3);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "rope", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>(); const scalar_t* cp = cos.data_ptr<scalar_t>();
    const scalar_t* sp = sin.data_ptr<scalar_t>(); scalar_t* op = out.data_ptr<scalar_t>();
    rows_parallel(B * h * T, D, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t b = r / (h * T), i = (r / T) % h, t = r % T;
        rope_row(xp + b * x.stride(0) + i * x.stride(1) + t * x.stride(2), cp + b * cos.stride(0) + t * cos.stride(1),
                 sp + b * sin.stride(0) + t * sin.stride(1), op + b * out.stride(0) + i * out.stride(1) + t * out.stride(2), D);
      }
    });
  });
}


// silu(gate) * up [..., F]: gate and up [..., F] with unit stride in F and one stride between rows
// (the two halves of the fused gate_up output are such views; so are two separate outputs).
void silu_mul_into(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& out);

at::Tensor silu_mul(at::Tensor gate, at::Tensor up) {
  check_glue(gate, "silu_mul", "gate");
  check_glue(up, "silu_mul", "up");
  TORCH_CHECK(gate.sizes() == up.sizes() && gate.scalar_type() == up.scalar_type(),
              "silu_mul: gate ", gate.sizes(), " and up ", up.sizes(), " must match in shape and dtype");
  auto out = at::empty(gate.sizes(), gate.options());
  silu_mul_into(gate, up, out);
  return out;
}

// silu_mul into out (contiguous, gate's shape and dtype): DecoderPlan's workspace.
void silu_mul_into(const at::Tensor& gate, const at::Tensor& up, const at::Tensor& out) {
  const int64_t F = gate.size(-1);
  auto g2 = gate.reshape({-1, F}), u2 = up.reshape({-1, F});  // views where the rows are evenly spaced
  const int64_t rows = g2.size(0), gs = g2.stride(0), us = u2.stride(0);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, gate.scalar_type(), "silu_mul", [&] {
    const scalar_t* gp = g2.data_ptr<scalar_t>(); const scalar_t* up_ = u2.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    rows_parallel(rows, F, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        int64_t f = 0;
#if TF_AVX512
        if constexpr (std::is_same_v<scalar_t, at::BFloat16>)   // 16 lanes: silu(g) = g / (1 + 2^(-g log2 e))
          for (; f + 16 <= F; f += 16) {
            const __m512 g = bf16x16(reinterpret_cast<const at::BFloat16*>(gp + r * gs + f));
            const __m512 u = bf16x16(reinterpret_cast<const at::BFloat16*>(up_ + r * us + f));
            const __m512 e = exp2_ps(_mm512_mul_ps(g, _mm512_set1_ps(-EXP_LOG2E)));
            const __m512 s = _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.f), e)), u);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(op + r * F + f), (__m256i)_mm512_cvtneps_pbh(s));
          }
        else if constexpr (std::is_same_v<scalar_t, float>)   // e^-g to an ulp, as the scalar tail's std::exp
          for (; f + 16 <= F; f += 16) {
            const __m512 g = _mm512_loadu_ps(gp + r * gs + f), u = _mm512_loadu_ps(up_ + r * us + f);
            const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));
            _mm512_storeu_ps(op + r * F + f, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.f), e)), u));
          }
#elif TF_AVX2
        if constexpr (std::is_same_v<scalar_t, at::BFloat16>)   // 8 lanes, as the AVX-512 path's 16
          for (; f + 8 <= F; f += 8) {
            const __m256 g = bf16x8(gp + r * gs + f), u = bf16x8(up_ + r * us + f);
            const __m256 e = exp2_ps8(_mm256_mul_ps(g, _mm256_set1_ps(-EXP_LOG2E)));
            const __m256 s = _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.f), e)), u);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(op + r * F + f), bf16_round8(s));
          }
        else if constexpr (std::is_same_v<scalar_t, float>)
          for (; f + 8 <= F; f += 8) {
            const __m256 g = _mm256_loadu_ps(reinterpret_cast<const float*>(gp + r * gs + f));
            const __m256 u = _mm256_loadu_ps(reinterpret_cast<const float*>(up_ + r * us + f));
            const __m256 e = exp_ps8(_mm256_sub_ps(_mm256_setzero_ps(), g));
            const __m256 s = _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.f), e)), u);
            _mm256_storeu_ps(reinterpret_cast<float*>(op + r * F + f), s);
          }
#endif
        for (; f < F; ++f) {
          const float g = load(gp + r * gs, f), u = load(up_ + r * us, f);
          op[r * F + f] = store<scalar_t>(g / (1.f + std::exp(-g)) * u);
        }
      }
    });
  });
}


// ---- DecoderPlan's glue: what the module path does with torch ops, in one loop each -------------

// xr[e] += yr[e] for e < E, each sum in fp32 rounded once to T (residual_add's bits)
template <typename T>
inline void add_row(T* xr, const T* yr, int64_t E) {
  int64_t e = 0;
#if TF_AVX512
  if constexpr (std::is_same_v<T, at::BFloat16> || std::is_same_v<T, float>)
    for (; e + 16 <= E; e += 16) store_lanes(xr + e, _mm512_add_ps(lanes(xr + e), lanes(yr + e)));
#elif TF_AVX2
  if constexpr (std::is_same_v<T, at::BFloat16> || std::is_same_v<T, float>)
    for (; e + 8 <= E; e += 8) store_lanes8(xr + e, _mm256_add_ps(lanes8(xr + e), lanes8(yr + e)));
#endif
  for (; e < E; ++e) xr[e] = store<T>(load(xr, e) + load(yr, e));
}

// x [N, E] += y [N, E] in place, both contiguous bf16 or both fp32 (the residual stream): each sum
// in fp32, rounded once to bf16, the bits of torch's x + y without its dispatch and allocation.
void residual_add(at::Tensor& x, const at::Tensor& y) {
  if (x.scalar_type() == at::kFloat)
    add_row(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  else
    add_row(x.data_ptr<at::BFloat16>(), y.data_ptr<at::BFloat16>(), x.numel());
}


// x [..., E] += y (as residual_add; y undefined: x is left as it is), then out = rms_norm(x, w)
// (rms_row), all contiguous in w's dtype: the residual stream's update and the next norm in one
// pass over x, as DecoderPlan runs them between layers (out: its workspace).
void add_rms_norm(const at::Tensor& x, const at::Tensor& y, const at::Tensor& w, double eps, const at::Tensor& out) {
  const int64_t E = x.size(-1), rows = x.numel() / std::max<int64_t>(E, 1);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "rms_norm", [&] {
    scalar_t* xp = x.data_ptr<scalar_t>(); const scalar_t* yp = y.defined() ? y.data_ptr<scalar_t>() : nullptr;
    const scalar_t* wp = w.data_ptr<scalar_t>(); scalar_t* op = out.data_ptr<scalar_t>();
    rows_parallel(rows, E, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        if (yp) add_row(xp + r * E, yp + r * E, E);
        rms_row(xp + r * E, wp, op + r * E, E, static_cast<float>(eps));
      }
    });
  });
}

// The fused projection's output qkv [B * T, (H + 2 Hkv) * D] (contiguous, bf16 or fp32) into
// attention's inputs: q rotated into qr [B, H, T, D] (contiguous), k rotated into keys and v copied
// into values at slots [start, start + T) (keys, values [B, Hkv, capacity, D] with unit stride in
// D). The bits of rope() and copy_ on the module path's views, in one pass over qkv. lq [B, H, D]
// (unit stride in D; undefined: none) gets the rotated query of each sequence's last token.
template <typename T_>
void qkv_into_cache_t(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& qr,
                      const at::Tensor& keys, const at::Tensor& values, int64_t start, const at::Tensor& lq) {
  const int64_t B = qr.size(0), H = qr.size(1), T = qr.size(2), D = qr.size(3), Hkv = keys.size(1);
  const int64_t W = qkv.size(1);
  const T_* src = qkv.data_ptr<T_>();
  const T_* cp = cos.data_ptr<T_>();
  const T_* sp = sin.data_ptr<T_>();
  T_* qp = qr.data_ptr<T_>();
  T_* kp = keys.data_ptr<T_>();
  T_* vp = values.data_ptr<T_>();
  T_* lp = lq.defined() ? lq.data_ptr<T_>() : nullptr;
  rows_parallel(B * T, W, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / T, t = r % T, slot = start + t;
      const T_* row = src + r * W;
      const T_* c = cp + b * cos.stride(0) + t * cos.stride(1);
      const T_* s = sp + b * sin.stride(0) + t * sin.stride(1);
      for (int64_t h = 0; h < H; ++h) {
        T_* q = qp + ((b * H + h) * T + t) * D;
        rope_row(row + h * D, c, s, q, D);
        if (lp && t == T - 1) std::memcpy(lp + b * lq.stride(0) + h * lq.stride(1), q, D * sizeof(T_));
      }
      for (int64_t h = 0; h < Hkv; ++h) {
        rope_row(row + (H + h) * D, c, s, kp + b * keys.stride(0) + h * keys.stride(1) + slot * keys.stride(2), D);
        std::memcpy(vp + b * values.stride(0) + h * values.stride(1) + slot * values.stride(2), row + (H + Hkv + h) * D,
                    D * sizeof(T_));
      }
    }
  });
}

void qkv_into_cache(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& qr,
                    const at::Tensor& keys, const at::Tensor& values, int64_t start, const at::Tensor& lq) {
  if (qkv.scalar_type() == at::kFloat) qkv_into_cache_t<float>(qkv, cos, sin, qr, keys, values, start, lq);
  else qkv_into_cache_t<at::BFloat16>(qkv, cos, sin, qr, keys, values, start, lq);
}

// ---- a pass's decoder layers in one call ---------------------------------------------------------
// At T = 1 a layer is ~45 torch ops and 8 module calls around its 7 kernels, 2-3 us each: ~3 ms
// a 30-layer pass, as much as a 1,024-token middle level's weights take to read. DecoderPlan
// runs the same kernels in the same order from C++ (the module path in runtime/model.py is
// its twin: tests/test_model_tiny.py checks both give the same bits), for the common case: fused qkv and
// gate_up projections, each linear packed (here, bf16 or fp32) or native int8/int4 (quant_cpu, through a
// function pointer its module exports), a cache that writes the T new tokens at slots
// [start, start + T) of per-layer buffers [L, B, Hkv, capacity, D] with keys rotated by the
// pass's tables, and attends to slots [0, start + T) (the full and retrieval caches).
using AttendFn = at::Tensor (*)(at::Tensor, at::Tensor, at::Tensor, double, std::optional<bool>, std::optional<at::Tensor>);
using Int8Fn = at::Tensor (*)(at::Tensor, at::Tensor, at::Tensor, c10::optional<at::Tensor>, int64_t, c10::optional<at::Tensor>);
using Int4Fn = at::Tensor (*)(at::Tensor, at::Tensor, c10::optional<at::Tensor>, int64_t, c10::optional<at::Tensor>);

enum LinearKind : int64_t { PACKED = 0, INT8 = 1, INT4 = 2 };
using LinearSpec = std::tuple<int64_t, at::Tensor, c10::optional<at::Tensor>, c10::optional<at::Tensor>, int64_t>;

template <typename F> F from_capsule(const c10::optional<py::capsule>& c) {
  return c.has_value() ? reinterpret_cast<F>(c->get_pointer()) : nullptr;
}

// DecoderPlan's buffers for a pass, per thread: one flat tensor per buffer that only grows, viewed
// at each pass's shape (a thread alternating the target's and the middle level's passes reuses them).
struct Workspace {
  struct Views { at::Tensor xn, qkv, qr, att, o, gate_up, act, down; };
  at::Tensor flat[8];
  Views views(int64_t N, int64_t E, int64_t W, int64_t F, int64_t B, int64_t H, int64_t T, int64_t D,
              const at::TensorOptions& opt) {
    const std::vector<int64_t> shapes[8] = {{N, E}, {N, W}, {B, H, T, D}, {N, H * D}, {N, E}, {N, 2 * F}, {N, F}, {N, E}};
    at::Tensor v[8];
    for (int i = 0; i < 8; ++i) {
      int64_t n = 1;
      for (int64_t d : shapes[i]) n *= d;
      if (!flat[i].defined() || flat[i].numel() < n || flat[i].scalar_type() != opt.dtype().toScalarType())
        flat[i] = at::empty({std::max<int64_t>(n, flat[i].defined() ? flat[i].numel() : 0)}, opt);
      v[i] = flat[i].narrow(0, 0, n).view(shapes[i]);
    }
    return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
  }
};

class DecoderPlan {
 public:
  // linears: 4 per layer (qkv, o, gate_up, down), each (kind, packed, scales or None, bias or None, O)
  DecoderPlan(std::vector<at::Tensor> norm1, std::vector<at::Tensor> norm2, double eps,
              std::vector<LinearSpec> linears, int64_t H, int64_t Hkv, int64_t D, double scale,
              py::capsule attend, c10::optional<py::capsule> int8, c10::optional<py::capsule> int4)
      : norm1_(std::move(norm1)), norm2_(std::move(norm2)), eps_(eps), linears_(std::move(linears)),
        H_(H), Hkv_(Hkv), D_(D), scale_(scale), attend_(from_capsule<AttendFn>(attend)),
        int8_(from_capsule<Int8Fn>(int8)), int4_(from_capsule<Int4Fn>(int4)) {
    TORCH_CHECK(linears_.size() == 4 * norm1_.size() && norm2_.size() == norm1_.size(),
                "DecoderPlan: 4 linears and 2 norms per layer expected");
    for (const auto& l : linears_) {
      const int64_t kind = std::get<0>(l);
      TORCH_CHECK((kind == PACKED && has_packed()) || (kind == INT8 && int8_) || (kind == INT4 && int4_),
                  "DecoderPlan: linear kind ", kind, " has no kernel here");
    }
  }

  // Where a pass's time goes (`triforce bench --suite passes`): while on, run() and run_packed()
  // add each stage's wall time, all layers together, to its total (a clock read between stages,
  // about 10 us a 30-layer pass); stage_seconds() gives them per pass since set_timing(true).
  static constexpr const char* STAGE_NAMES[] = {"norms", "qkv", "attention", "o", "gate_up", "silu_mul", "down"};
  enum Stage { NORMS, QKV, ATTENTION, O, GATE_UP, SILU_MUL, DOWN, STAGES };
  void set_timing(bool on) {
    timing_ = on;
    stage_ns_.fill(0);
    timed_passes_ = 0;
  }
  std::vector<std::pair<std::string, double>> stage_seconds() const {
    std::vector<std::pair<std::string, double>> out;
    for (int i = 0; i < STAGES; ++i) out.emplace_back(STAGE_NAMES[i], timed_passes_ ? 1e-9 * stage_ns_[i] / timed_passes_ : 0.0);
    return out;
  }

  // x [B, T, E] bf16 or fp32 (as every tensor), cos/sin [B, T, D]; k/v [L, B, Hkv, capacity, D]; writes slots [start, start + T)
  // of every layer; last_query [L, B, H, D] gets each layer's last rotated query when given.
  at::Tensor run(at::Tensor x, at::Tensor cos, at::Tensor sin, at::Tensor k, at::Tensor v,
                    int64_t start, c10::optional<at::Tensor> last_query) const {
    const int64_t B = x.size(0), T = x.size(1), E = x.size(2), N = B * T, stop = start + T;
    check_pass(x, cos, sin, k, v, stop);
    x = x.reshape({N, E}).clone();                                                            // the residual stream, updated in place
    // The layers' buffers, reused pass after pass (no allocation in the loop); K/V and last_query
    // views made once per pass.
    thread_local Workspace buffers;
    const Workspace::Views ws = buffers.views(N, E, H_ * D_ + 2 * Hkv_ * D_, ffn(), B, H_, T, D_, x.options());
    const auto keys = k.narrow(3, 0, stop).unbind(0), values = v.narrow(3, 0, stop).unbind(0);   // [B, Hkv, stop, D] each
    const std::vector<at::Tensor> lqs = last_query.has_value() ? last_query->unbind(0) : std::vector<at::Tensor>();
    const at::Tensor att = ws.att.view({B, T, H_, D_});
    if (timing_) ++timed_passes_;
    layers(x, ws, [&](size_t l, const at::Tensor& qkv) {
      qkv_into_cache(qkv, cos, sin, ws.qr, keys[l], values[l], start, lqs.empty() ? at::Tensor() : lqs[l]);
      attend_(ws.qr, keys[l], values[l], scale_, std::nullopt, att);   // [B, T, H, D] into [N, HD]
      return ws.att;
    });
    return x.view({B, T, E});
  }

  // A packed pass (runtime/cache_packed.py): x [1, N, E], cos/sin [1, N, D] hold the new tokens of
  // several sequences, sizes[i] of sequence i after those of the sequences before it; each
  // sequence has its own cache k[i]/v[i] [L, 1, Hkv, capacity_i, D] whose slots [starts[i],
  // starts[i] + sizes[i]) the pass writes (last_query[i] [L, 1, H, D] as run's). The linears run
  // once over all N rows; each sequence's queries attend to its own cache only, so its rows are
  // the bits `run` gives it alone.
  at::Tensor run_packed(at::Tensor x, at::Tensor cos, at::Tensor sin, std::vector<at::Tensor> k,
                           std::vector<at::Tensor> v, std::vector<int64_t> starts, std::vector<int64_t> sizes,
                           std::vector<c10::optional<at::Tensor>> last_query) const {
    const int64_t N = x.size(1), E = x.size(2), HD = H_ * D_, n = (int64_t)sizes.size();
    TORCH_CHECK(x.size(0) == 1 && n >= 1 && (int64_t)k.size() == n && (int64_t)v.size() == n && (int64_t)starts.size() == n &&
                (int64_t)last_query.size() == n && std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) == N,
                "DecoderPlan.run_packed: x [1, N, E] and, per sequence, k, v, start, size (summing to N) and last_query expected");
    std::vector<std::vector<at::Tensor>> keys(n), values(n), lqs(n);
    std::vector<int64_t> offset(n + 1, 0);
    for (int64_t i = 0; i < n; ++i) {
      TORCH_CHECK(k[i].dim() == 5 && k[i].size(1) == 1, "DecoderPlan.run_packed: k [L, 1, Hkv, capacity, D] per sequence, got ", k[i].sizes());
      offset[i + 1] = offset[i] + sizes[i];
      check_pass(x.narrow(1, offset[i], sizes[i]), cos, sin, k[i], v[i], starts[i] + sizes[i]);
      keys[i] = k[i].narrow(3, 0, starts[i] + sizes[i]).unbind(0);
      values[i] = v[i].narrow(3, 0, starts[i] + sizes[i]).unbind(0);
      if (last_query[i].has_value()) lqs[i] = last_query[i]->unbind(0);
    }
    x = x.reshape({N, E}).clone();
    thread_local Workspace buffers;
    const Workspace::Views ws = buffers.views(N, E, HD + 2 * Hkv_ * D_, ffn(), 1, H_, N, D_, x.options());
    // each sequence's rows of the workspace's queries and of cos/sin, viewed once per pass (not per layer)
    std::vector<at::Tensor> qrs(n), coss(n), sins(n), atts(n);
    const at::Tensor qflat = ws.qr.view({-1});
    for (int64_t i = 0; i < n; ++i) {
      qrs[i] = qflat.narrow(0, offset[i] * HD, sizes[i] * HD).view({1, H_, sizes[i], D_});   // [1, H, T_i, D]
      atts[i] = ws.att.narrow(0, offset[i], sizes[i]).view({1, sizes[i], H_, D_});          // [1, T_i, H, D]
      coss[i] = cos.narrow(1, offset[i], sizes[i]), sins[i] = sin.narrow(1, offset[i], sizes[i]);
    }
    if (timing_) ++timed_passes_;
    layers(x, ws, [&](size_t l, const at::Tensor& qkv) {
      for (int64_t i = 0; i < n; ++i) {
        qkv_into_cache(qkv.narrow(0, offset[i], sizes[i]), coss[i], sins[i], qrs[i],
                       keys[i][l], values[i][l], starts[i], lqs[i].empty() ? at::Tensor() : lqs[i][l]);
        attend_(qrs[i], keys[i][l], values[i][l], scale_, std::nullopt, atts[i]);   // [1, T_i, H, D] into its rows of [N, HD]
      }
      return ws.att;
    });
    return x.view({1, N, E});
  }

 private:
  int64_t ffn() const { return std::get<4>(linears_[2]) / 2; }

  void check_pass(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& k,
                  const at::Tensor& v, int64_t stop) const {
    TORCH_CHECK(k.dim() == 5 && k.size(0) == (int64_t)norm1_.size() && stop <= k.size(3) && v.sizes() == k.sizes(),
                "DecoderPlan: k, v [L, B, Hkv, capacity, D] with room for slots up to ", stop, ", got ", k.sizes());
    const auto dtype = x.scalar_type();
    TORCH_CHECK((dtype == at::kBFloat16 || dtype == at::kFloat) && cos.scalar_type() == dtype && sin.scalar_type() == dtype &&
                k.scalar_type() == dtype && v.scalar_type() == dtype && norm1_[0].scalar_type() == dtype &&
                cos.size(2) == D_ && cos.stride(2) == 1 && sin.sizes() == cos.sizes() && sin.stride(2) == 1 &&
                k.stride(4) == 1 && v.stride(4) == 1,
                "DecoderPlan: x, cos/sin [B, T, D], k/v (unit stride in D) and the norms all bf16 or all fp32 expected");
  }

  // The decoder layers over the residual stream x [N, E] (updated in place); attention(l, qkv
  // [N, (H + 2 Hkv) D]) writes layer l's new K/V into the cache(s) and returns its output [N, H D].
  template <typename Attention>
  void layers(at::Tensor& x, const Workspace::Views& ws, Attention&& attention) const {
    at::Tensor down;                                                                       // the last layer's MLP output
    const int64_t F = ffn();
    Laps lap(timing_ ? &stage_ns_ : nullptr);
    for (size_t l = 0; l < norm1_.size(); ++l) {
      const LinearSpec* lin = &linears_[4 * l];
      add_rms_norm(x, down, norm1_[l], eps_, ws.xn);            // x += the last layer's down (none at l = 0); xn = norm(x)
      lap(NORMS);
      const at::Tensor qkv = linear(ws.xn, lin[0], ws.qkv);                                // [N, HD + 2 KD]
      lap(QKV);
      const at::Tensor att = attention(l, qkv);                                            // [N, HD]
      lap(ATTENTION);
      const at::Tensor o = linear(att, lin[1], ws.o);                                      // [N, E]
      lap(O);
      add_rms_norm(x, o, norm2_[l], eps_, ws.xn);                                             // x += o; xn = norm(x)
      lap(NORMS);
      const at::Tensor gate_up = linear(ws.xn, lin[2], ws.gate_up);                        // [N, 2F]
      lap(GATE_UP);
      silu_mul_into(gate_up.narrow(1, 0, F), gate_up.narrow(1, F, F), ws.act);
      lap(SILU_MUL);
      down = linear(ws.act, lin[3], ws.down);
      lap(DOWN);
    }
    if (down.defined()) residual_add(x, down);
    lap(NORMS);
  }

  // y [N, O] into `out` (the workspace's buffer)
  at::Tensor linear(const at::Tensor& x, const LinearSpec& l, const at::Tensor& out) const {
    const auto& [kind, packed, scales, bias, O] = l;
    if (kind == PACKED) linear_packed_into(x, packed, bias, O, out);
    else if (kind == INT8) int8_(x, packed, *scales, bias, O, out);
    else int4_(x, packed, bias, O, out);
    return out;
  }

  // Adds the wall time since the last lap to a stage's total; nothing when given no totals.
  struct Laps {
    std::array<int64_t, STAGES>* ns;
    std::chrono::steady_clock::time_point t;
    explicit Laps(std::array<int64_t, STAGES>* totals) : ns(totals) { if (ns) t = std::chrono::steady_clock::now(); }
    void operator()(Stage stage) {
      if (!ns) return;
      const auto now = std::chrono::steady_clock::now();
      (*ns)[stage] += std::chrono::duration_cast<std::chrono::nanoseconds>(now - t).count();
      t = now;
    }
  };
  bool timing_ = false;
  mutable std::array<int64_t, STAGES> stage_ns_{};
  mutable int64_t timed_passes_ = 0;

  std::vector<at::Tensor> norm1_, norm2_;
  double eps_;
  std::vector<LinearSpec> linears_;
  int64_t H_, Hkv_, D_;
  double scale_;
  AttendFn attend_;
  Int8Fn int8_;
  Int4Fn int4_;
};
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("linear", &linear, "CPU linear for few rows: x [N,K] . w [O,K]^T (+ bias) -> [N,O], bf16",
        py::arg("x"), py::arg("w"), py::arg("bias") = py::none());
  m.def("linear_packed", &linear_packed, "x [N,K] . w^T (+ bias) -> [N,O], w packed [ceil(O/16), K/2, 16, 2] bf16 or [ceil(O/16), K, 16, 1] fp32",
        py::arg("x"), py::arg("packed"), py::arg("bias"), py::arg("out_features"));
  m.def("rms_norm", &rms_norm, "x [..., E], w [E] -> w * x / rms(x)", py::arg("x"), py::arg("w"), py::arg("eps"));
  m.def("rope", &rope, "out [B,h,T,D] = x * cos + rotate_half(x) * sin", py::arg("x"), py::arg("cos"),
        py::arg("sin"), py::arg("out"));
  m.def("silu_mul", &silu_mul, "silu(gate) * up, both [..., F]", py::arg("gate"), py::arg("up"));
  m.def("has_avx512_bf16", &has_avx512_bf16, "whether the avx512_bf16 kernel was compiled in");
  m.def("has_packed", &has_packed, "whether linear_packed was compiled in (AVX-512 or AVX2 + FMA)");
  py::class_<DecoderPlan>(m, "DecoderPlan")
      .def(py::init<std::vector<at::Tensor>, std::vector<at::Tensor>, double, std::vector<LinearSpec>,
                    int64_t, int64_t, int64_t, double, py::capsule, c10::optional<py::capsule>, c10::optional<py::capsule>>())
      .def("run", &DecoderPlan::run, py::arg("x"), py::arg("cos"), py::arg("sin"), py::arg("k"), py::arg("v"),
           py::arg("start"), py::arg("last_query") = py::none())
      .def("run_packed", &DecoderPlan::run_packed, py::arg("x"), py::arg("cos"), py::arg("sin"), py::arg("k"), py::arg("v"),
           py::arg("starts"), py::arg("sizes"), py::arg("last_query"))
      .def("set_timing", &DecoderPlan::set_timing, py::arg("on"),
           "on: run() adds each stage's wall time (norms, qkv, attention, o, gate_up, silu_mul, down); resets the totals")
      .def("stage_seconds", &DecoderPlan::stage_seconds, "[(stage, seconds per pass)] since set_timing(True)");
}
