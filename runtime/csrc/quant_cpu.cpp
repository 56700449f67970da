// Weight-only quantized linears for the lower levels (decode/verify passes, and prefill chunks:
// measured faster than torch's kernels at every row count, runtime/bench/kernels.py quant):
//   int8_linear  y [N, O] = x [N, K] . (q * scale)^T        q int8 per output row (one fp32 scale)
//   int4_linear  y [N, O] = x [N, K] . ((q - 8) * s + z)^T   q 0..15, bf16 s and z per 32 columns
// x [..., K] is bf16 or fp32 and y [..., O] has x's dtype; an optional bias [O] is added in fp32
// before rounding.
//
// Why: a 1-row pass is bound by reading the weights (1 or 0.56 bytes per weight here), and torch's
// CPU kernels (_weight_int8pack_mm, _weight_int4pack_mm_for_cpu) read them at 26 and 18 GB/s on
// this 2-core EPYC (34 GB/s to memory). At N = 8 rows the work is 16 int MACs per weight byte
// (int8), so the products must run on the CPU's int8 dot-product instruction, not on widening +
// FMA: vpdpbusd (avx512_vnni) multiplies 64 u8 by 64 s8 and adds groups of 4 into 16 int32 lanes.
//
// Activations: each x row is quantized on the fly, per group of 32 columns, to int8 with its own
// scale (sx = max|x| / 127, x ~ sx * xq, round to nearest even), as llama.cpp's Q8_0 does. That
// is the only approximation beyond the weights' own quantization: |x - sx*xq| <= sx/2 per entry.
// The lower levels only propose tokens (the acceptance rule keeps the output exact), so this
// costs a little acceptance at most; tests/test_quant_kernels.py bounds it.
//
// Packed weight layout (built by runtime/quant.py; one uint8 tensor per matrix, one stream per
// thread): blocks of 16 output rows (the 16 int32 lanes of a zmm), each a run of K/32 groups:
//   int8: group = 8 quads x 16 rows x 4 columns of u8 (q + 128)                       512 bytes
//   int4: group = 4 chunks x 16 rows x 4 columns of nibbles (quad c low, quad c+4 high) 256 bytes
//         + bf16 s[16] + bf16 z[16] of the block's 16 rows                              +64 bytes
// so one aligned 64-byte load gives the 16 rows x 4 columns one vpdpbusd needs, against the x
// row's 4 int8 columns broadcast to every lane. K is padded to a multiple of 32 and O to a
// multiple of 16 (zero weights, zero activations: nothing added).
// Integer sums are exact: the weights' offset (int8 stored q + 128; int4 q - 8, centred so that
// the activation rounding meets weights of either sign) is subtracted exactly (the lane starts
// at -offset * sum(xq) of the group); int4's zero term z * sum(x) uses the fp32 sum of the group.
//
// Row-invariant: y[n, o] is computed by the same sequence of operations whatever N, the tiling
// and the thread count (each row is quantized alone; its accumulator sums the groups in order),
// so a T-token verify pass gives bitwise the rows of T 1-token passes.
// Work: units of 2 blocks of 16 output rows, each thread a contiguous run of them (it streams its
// own slab of the packed weights once), then stealing from the back of the other's run (Runs, as
// the attention's items and the AMX linears); inside a block the x rows go by in tiles of up to NR = 8, the block's
// packed groups (<= 24 KB for K <= 1536 int8) stay in L1/L2 across tiles.
//
// Cost: bytes = packed weights (O*K int8 or 0.625*O*K int4) + small x/y; int MACs = N*O*K.
// Pure-torch twin: runtime/quant.py (_QuantLinear.reference, quantize_rows_reference); the portable
// build (a CPU without AVX2, or a build without the flags) has has_kernels() false and quant.py
// keeps torch's layouts and kernels.
#include "torch_api.h"
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "runs.h"   // for_runs: work units with stealing
#include "simd.h"   // TF_AVX512 (avx512f, avx512bw, avx512dq, avx512_bf16) and cpu_is_amd
// The kernels also need avx512_vnni (vpdpbusd).
#if TF_AVX512 && defined(__AVX512VNNI__)
#define TF_VNNI 1
#else
#define TF_VNNI 0
#endif

namespace {

constexpr int GROUP = 32;          // columns per activation (and int4 weight) group
constexpr int BLOCK = 16;          // output rows per block: the int32 lanes of a zmm
constexpr int NR = 8;              // x rows per tile
constexpr int INT8_GROUP_BYTES = GROUP * BLOCK;                   // 512
constexpr int INT4_GROUP_BYTES = GROUP * BLOCK / 2 + 2 * BLOCK * 2;  // 256 nibbles + s, m bf16: 320
// The hardware prefetcher alone leaves the weight stream stalling behind the products; 16 groups
// (5 KB int4, 8 KB int8) ahead: all 121 linears of a pass, int4 layers + int8 head, 3-7% faster at
// N = 1, 9-12% at N = 4, 16% at N = 8 (8 groups: about half that; alternating builds, round 7, on
// a Zen 5, into L1). On Intel (a Xeon with AMX, round 18) the prefetches go to L2: into L1 they
// hold the core's few line-fill buffers, and a pass's int4 linears plus the int8 head, streamed
// from memory, ran 11% (N = 1) and 5-8% (N = 4) slower than with the L2 hint; one 35 MB int4
// linear read at 18-19 GB/s with L1 prefetches and 23-25 (the plain read's rate) with L2 ones.
constexpr int PREFETCH_GROUPS = 16;
#if TF_VNNI
const bool PREFETCH_L2 = !cpu_is_amd();
inline void prefetch_weights(const uint8_t* p) {
  if (PREFETCH_L2)
    _mm_prefetch((const char*)p, _MM_HINT_T1);
  else
    _mm_prefetch((const char*)p, _MM_HINT_T0);
}
#endif

bool has_avx512_vnni() { return TF_VNNI != 0; }
// Whether this build has vector kernels: avx512_vnni, or (TF_AVX2) the same arithmetic on AVX2.
bool has_kernels() { return TF_VNNI || TF_AVX2; }

#if TF_VNNI || TF_AVX2
// x rows quantized per group: xq [N, G*32] int8 (zero past K), and per row and group the scale sx,
// xqsum = sum(xq) (for the weights' offset) and xsum = sum(x) in fp32 (int4's zero term).
struct QuantRows {
  std::vector<int8_t> xq;
  std::vector<float> sx, xsum;
  std::vector<int32_t> xqsum;
  int64_t G = 0;
  int64_t reset(int64_t N, int64_t K) {   // sized for N rows of K columns, xq zeroed; returns G
    G = (K + GROUP - 1) / GROUP;
    xq.assign(N * G * GROUP, 0);
    sx.resize(N * G), xsum.resize(N * G), xqsum.resize(N * G);
    return G;
  }
};

template <typename T>
void quantize_rows(const T* x, int64_t ldx, int64_t N, int64_t K, QuantRows& q);   // one per path below

// The caller's thread quantizes x once (workers only read it); then f(q, block_bytes, begin, end)
// runs the blocks [begin, end) of 16 output rows, in units of 2 blocks, each thread a contiguous
// run of them (it streams its own slab of the packed weights), then stealing (Runs).
template <bool kInt4, typename T, typename F>
void over_quantized_blocks(const T* xp, int64_t ldx, int64_t N, int64_t K, int64_t O, F&& f) {
  thread_local QuantRows q;
  quantize_rows(xp, ldx, N, K, q);
  const int64_t blocks = (O + BLOCK - 1) / BLOCK;
  const int64_t block_bytes = q.G * (kInt4 ? INT4_GROUP_BYTES : INT8_GROUP_BYTES);
  const QuantRows& qr = q;
  for_runs((blocks + 1) / 2, 1, [&](int64_t u, int64_t) { f(qr, block_bytes, 2 * u, std::min(blocks, 2 * u + 2)); });
}
#endif

#if TF_VNNI
template <typename T> inline __m512 load16(const T* p, __mmask16 m);
template <> inline __m512 load16<float>(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
template <> inline __m512 load16<at::BFloat16>(const at::BFloat16* p, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

template <typename T>
void quantize_rows(const T* x, int64_t ldx, int64_t N, int64_t K, QuantRows& q) {
  const int64_t G = q.reset(N, K);
  const __m512 sign = _mm512_set1_ps(-0.f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k = g * GROUP, left = std::min<int64_t>(GROUP, K - k);
      const __mmask16 m0 = (__mmask16)((1u << std::min<int64_t>(16, left)) - 1);
      const __mmask16 m1 = left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
      const __m512 a = load16(x + n * ldx + k, m0), b = load16(x + n * ldx + k + 16, m1);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, a), _mm512_andnot_ps(sign, b)));
      const float d = amax / 127.f, id = amax > 0.f ? 127.f / amax : 0.f;
      const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, _mm512_set1_ps(id)));  // round to nearest even
      const __m512i qb = _mm512_cvtps_epi32(_mm512_mul_ps(b, _mm512_set1_ps(id)));
      int8_t* dst = q.xq.data() + (n * G + g) * GROUP;
      _mm_storeu_si128((__m128i*)dst, _mm512_cvtsepi32_epi8(qa));
      _mm_storeu_si128((__m128i*)(dst + 16), _mm512_cvtsepi32_epi8(qb));
      q.sx[n * G + g] = d;
      q.xsum[n * G + g] = _mm512_reduce_add_ps(_mm512_add_ps(a, b));
      q.xqsum[n * G + g] = _mm512_reduce_add_epi32(_mm512_add_epi32(qa, qb));
    }
}

inline __m512i bcast4(const int8_t* p) { int32_t v; std::memcpy(&v, p, 4); return _mm512_set1_epi32(v); }
inline __m512 bf16x16(const uint8_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
}

// acc[n] (16 output rows of the block) = sum over groups of the block's weights . x row n0 + n.
// Loop order: per group, each 64-byte weight vector is loaded (and for int4 unpacked) once and
// multiplied into the nr rows' int32 sums at once, so the live registers are nr sums, nr
// accumulators and two weight vectors (2 * NR + 4 <= 20 of 32 zmm: nothing spills).
template <int nr, bool kInt4>
inline void tile(const uint8_t* wb, const QuantRows& q, int64_t n0, __m512 acc[NR]) {
  const int64_t G = q.G;
  for (int n = 0; n < nr; ++n) acc[n] = _mm512_setzero_ps();
  const __m512i low = _mm512_set1_epi8(0x0F);
  const int8_t* xq = q.xq.data() + n0 * G * GROUP;    // row n, group g at xq + (n * G + g) * GROUP
  for (int64_t g = 0; g < G; ++g) {
    const int64_t row0 = n0 * G + g;                   // (row, group) index of row n0, + n * G for row n0 + n
    __m512i dot[nr];
    for (int n = 0; n < nr; ++n)
      dot[n] = _mm512_set1_epi32(-(kInt4 ? 8 : 128) * q.xqsum[row0 + n * G]);   // the stored offset, exactly
    const int8_t* xg = xq + g * GROUP;
    {  // software prefetch PREFETCH_GROUPS groups ahead (past the block: the next block of this
       // thread's run, or past the tensor, where a prefetch is dropped without a fault)
      constexpr int bytes = kInt4 ? INT4_GROUP_BYTES : INT8_GROUP_BYTES;
      const uint8_t* f = wb + (g + PREFETCH_GROUPS) * bytes;
      for (int i = 0; i < bytes; i += 64) prefetch_weights(f + i);
    }
    if constexpr (kInt4) {
      const uint8_t* p = wb + g * INT4_GROUP_BYTES;
      for (int c = 0; c < 4; ++c) {   // chunk c: quad c in the low nibbles, quad c + 4 in the high
        const __m512i v = _mm512_load_si512((const void*)(p + 64 * c));
        const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
        for (int n = 0; n < nr; ++n) {
          dot[n] = _mm512_dpbusd_epi32(dot[n], lo, bcast4(xg + n * G * GROUP + 4 * c));
          dot[n] = _mm512_dpbusd_epi32(dot[n], hi, bcast4(xg + n * G * GROUP + 4 * (c + 4)));
        }
      }
      const __m512 s = bf16x16(p + 256), z = bf16x16(p + 288);
      for (int n = 0; n < nr; ++n) {
        const int64_t row = row0 + n * G;
        acc[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[n]), _mm512_mul_ps(s, _mm512_set1_ps(q.sx[row])), acc[n]);
        acc[n] = _mm512_fmadd_ps(z, _mm512_set1_ps(q.xsum[row]), acc[n]);
      }
    } else {
      const uint8_t* p = wb + g * INT8_GROUP_BYTES;
      for (int t = 0; t < 8; ++t) {
        const __m512i w = _mm512_load_si512((const void*)(p + 64 * t));
        for (int n = 0; n < nr; ++n) dot[n] = _mm512_dpbusd_epi32(dot[n], w, bcast4(xg + n * G * GROUP + 4 * t));
      }
      for (int n = 0; n < nr; ++n)
        acc[n] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[n]), _mm512_set1_ps(q.sx[row0 + n * G]), acc[n]);
    }
  }
}

template <bool kInt4>
inline void tile_any(int nr, const uint8_t* wb, const QuantRows& q, int64_t n0, __m512 acc[NR]) {
  switch (nr) {
    case 8: tile<8, kInt4>(wb, q, n0, acc); break;
    case 7: tile<7, kInt4>(wb, q, n0, acc); break;
    case 6: tile<6, kInt4>(wb, q, n0, acc); break;
    case 5: tile<5, kInt4>(wb, q, n0, acc); break;
    case 4: tile<4, kInt4>(wb, q, n0, acc); break;
    case 3: tile<3, kInt4>(wb, q, n0, acc); break;
    case 2: tile<2, kInt4>(wb, q, n0, acc); break;
    default: tile<1, kInt4>(wb, q, n0, acc); break;
  }
}

template <typename T> inline void store16(T* p, __m512 v, __mmask16 m);
template <> inline void store16<float>(float* p, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(p, m, v); }
template <> inline void store16<at::BFloat16>(at::BFloat16* p, __m512 v, __mmask16 m) {
  _mm256_mask_storeu_epi16(p, m, (__m256i)_mm512_cvtneps_pbh(v));  // round to nearest even
}

template <bool kInt4, typename T>
void run(const T* xp, int64_t ldx, int64_t N, int64_t K, const uint8_t* wp, const float* scales,
         const float* bias, T* yp, int64_t O) {
  over_quantized_blocks<kInt4>(xp, ldx, N, K, O, [&](const QuantRows& qr, int64_t block_bytes, int64_t begin, int64_t end) {
    __m512 acc[NR];
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t o0 = blk * BLOCK, rows = std::min<int64_t>(BLOCK, O - o0);
      const __mmask16 mask = (__mmask16)((1u << rows) - 1);
      const uint8_t* wb = wp + blk * block_bytes;
      const __m512 scale = kInt4 ? _mm512_set1_ps(1.f) : _mm512_maskz_loadu_ps(mask, scales + o0);
      const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + o0) : _mm512_setzero_ps();
      for (int64_t n0 = 0; n0 < N; n0 += NR) {
        const int nr = (int)std::min<int64_t>(NR, N - n0);
        tile_any<kInt4>(nr, wb, qr, n0, acc);
        for (int n = 0; n < nr; ++n)
          store16(yp + (n0 + n) * O + o0, kInt4 ? _mm512_add_ps(acc[n], b) : _mm512_fmadd_ps(acc[n], scale, b), mask);
      }
    }
  });
}
#endif


#if TF_AVX2
// The AVX2 twin of the kernels above (Zen 2/3, Intel client CPUs): the same packed layout, the
// same activation quantization and the same exact integer sums, from vpmaddubsw (u8 x s8, pairs
// added into int16 with saturation) and vpmaddwd (int16 pairs into int32). A 32-byte half of a
// 64-byte weight vector holds 8 of the block's 16 rows, one ymm of int32 sums.
//   int8: stored q + 128 times x could saturate an int16 pair (2 * 255 * 127), so the pair is
//         |x| (u8) times q with x's sign (s8): at most 2 * 127 * 128, exact; no offset to take off.
//   int4: nibbles (q + 8, 0..15) times x: a pair at most 2 * 15 * 127, and the 8 products of a
//         group (its 32 columns) sum to at most 30,480 in int16, exact; one vpmaddwd a group,
//         the offset taken off as the VNNI path does.
constexpr int NR2 = 2;   // x rows per tile: 2 x 2 int32 sums + 2 x 2 fp32 accumulators + operands in 16 ymm

inline void prefetch_weights(const uint8_t* p) { _mm_prefetch((const char*)p, _MM_HINT_T0); }

template <typename T> inline void load32(const T* p, int64_t left, __m256 v[4]) {   // 32 columns as fp32, 0 past left
  if (left >= GROUP) {
    for (int i = 0; i < 4; ++i) {
      if constexpr (std::is_same_v<T, float>) v[i] = _mm256_loadu_ps(p + 8 * i);
      else v[i] = bf16x8(p + 8 * i);
    }
    return;
  }
  alignas(32) float buf[GROUP];
  for (int c = 0; c < GROUP; ++c) buf[c] = c < left ? static_cast<float>(p[c]) : 0.f;
  for (int i = 0; i < 4; ++i) v[i] = _mm256_load_ps(buf + 8 * i);
}

inline int32_t hsum8i(__m256i v) {
  __m128i m = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 0x4E));
  return _mm_cvtsi128_si32(_mm_add_epi32(m, _mm_shuffle_epi32(m, 0xB1)));
}

template <typename T>
void quantize_rows(const T* x, int64_t ldx, int64_t N, int64_t K, QuantRows& q) {
  const int64_t G = q.reset(N, K);
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);   // undo the packs' 128-bit lanes
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      const int64_t k = g * GROUP;
      __m256 v[4];
      load32(x + n * ldx + k, K - k, v);
      const __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                     _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
      const float amax = hmax8(m);
      const float d = amax / 127.f, id = amax > 0.f ? 127.f / amax : 0.f;
      __m256i qi[4];
      for (int i = 0; i < 4; ++i) qi[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], _mm256_set1_ps(id)));  // nearest even
      const __m256i w16 = _mm256_packs_epi32(qi[0], qi[1]), w16b = _mm256_packs_epi32(qi[2], qi[3]);
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w16, w16b), order);
      _mm256_storeu_si256((__m256i*)(q.xq.data() + (n * G + g) * GROUP), bytes);
      q.sx[n * G + g] = d;
      q.xsum[n * G + g] = hsum8(_mm256_add_ps(_mm256_add_ps(v[0], v[1]), _mm256_add_ps(v[2], v[3])));
      q.xqsum[n * G + g] = hsum8i(_mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3])));
    }
}

inline __m256i bcast4(const int8_t* p) { int32_t v; std::memcpy(&v, p, 4); return _mm256_set1_epi32(v); }

// acc[n][h] (rows 8h .. 8h + 7 of the block) = sum over groups of those rows' weights . x row n0 + n.
// One pass over the block's groups takes both halves of each 64-byte vector, so the weight stream
// and the products overlap (two passes, one per half, ran a 1-row head at 8 GB/s on one core).
template <int nr, bool kInt4>
inline void tile(const uint8_t* wb, const QuantRows& q, int64_t n0, __m256 acc[NR2][2]) {
  const int64_t G = q.G;
  for (int n = 0; n < nr; ++n) acc[n][0] = acc[n][1] = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0F), flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
  const int8_t* xq = q.xq.data() + n0 * G * GROUP;    // row n, group g at xq + (n * G + g) * GROUP
  for (int64_t g = 0; g < G; ++g) {
    const int64_t row0 = n0 * G + g;
    const int8_t* xg = xq + g * GROUP;
    {
      constexpr int bytes = kInt4 ? INT4_GROUP_BYTES : INT8_GROUP_BYTES;
      const uint8_t* f = wb + (g + PREFETCH_GROUPS) * bytes;
      for (int i = 0; i < bytes; i += 64) prefetch_weights(f + i);
    }
    if constexpr (kInt4) {
      const uint8_t* p = wb + g * INT4_GROUP_BYTES;
      __m256i sum16[nr][2];
      for (int n = 0; n < nr; ++n) sum16[n][0] = sum16[n][1] = _mm256_setzero_si256();
      for (int c = 0; c < 4; ++c) {   // chunk c: quad c in the low nibbles, quad c + 4 in the high
        for (int h = 0; h < 2; ++h) {
          const __m256i v = _mm256_load_si256((const __m256i*)(p + 64 * c + 32 * h));
          const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
          for (int n = 0; n < nr; ++n) {
            const int8_t* xn = xg + n * G * GROUP;
            sum16[n][h] = _mm256_add_epi16(sum16[n][h], _mm256_maddubs_epi16(lo, bcast4(xn + 4 * c)));
            sum16[n][h] = _mm256_add_epi16(sum16[n][h], _mm256_maddubs_epi16(hi, bcast4(xn + 4 * (c + 4))));
          }
        }
      }
      for (int h = 0; h < 2; ++h) {
        const __m256 s = bf16x8(p + 256 + 16 * h), z = bf16x8(p + 288 + 16 * h);
        for (int n = 0; n < nr; ++n) {
          const int64_t row = row0 + n * G;
          const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(sum16[n][h], ones), _mm256_set1_epi32(-8 * q.xqsum[row]));
          acc[n][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(s, _mm256_set1_ps(q.sx[row])), acc[n][h]);
          acc[n][h] = _mm256_fmadd_ps(z, _mm256_set1_ps(q.xsum[row]), acc[n][h]);
        }
      }
    } else {
      const uint8_t* p = wb + g * INT8_GROUP_BYTES;
      __m256i dot[nr][2];
      for (int n = 0; n < nr; ++n) dot[n][0] = dot[n][1] = _mm256_setzero_si256();
      for (int t = 0; t < 8; ++t) {
        __m256i xb[nr], xa[nr];
        for (int n = 0; n < nr; ++n) xb[n] = bcast4(xg + n * G * GROUP + 4 * t), xa[n] = _mm256_abs_epi8(xb[n]);
        for (int h = 0; h < 2; ++h) {
          const __m256i w = _mm256_xor_si256(_mm256_load_si256((const __m256i*)(p + 64 * t + 32 * h)), flip);  // q, s8
          for (int n = 0; n < nr; ++n) {
            const __m256i pairs = _mm256_maddubs_epi16(xa[n], _mm256_sign_epi8(w, xb[n]));
            dot[n][h] = _mm256_add_epi32(dot[n][h], _mm256_madd_epi16(pairs, ones));
          }
        }
      }
      for (int n = 0; n < nr; ++n)
        for (int h = 0; h < 2; ++h)
          acc[n][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[n][h]), _mm256_set1_ps(q.sx[row0 + n * G]), acc[n][h]);
    }
  }
}

template <bool kInt4>
inline void tile_any(int nr, const uint8_t* wb, const QuantRows& q, int64_t n0, __m256 acc[NR2][2]) {
  if (nr == 2) tile<2, kInt4>(wb, q, n0, acc);
  else tile<1, kInt4>(wb, q, n0, acc);
}

template <bool kInt4, typename T>
void run(const T* xp, int64_t ldx, int64_t N, int64_t K, const uint8_t* wp, const float* scales,
         const float* bias, T* yp, int64_t O) {
  over_quantized_blocks<kInt4>(xp, ldx, N, K, O, [&](const QuantRows& qr, int64_t block_bytes, int64_t begin, int64_t end) {
    __m256 acc[NR2][2];
    alignas(32) float out[BLOCK];
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t o0 = blk * BLOCK, rows = std::min<int64_t>(BLOCK, O - o0);
      const uint8_t* wb = wp + blk * block_bytes;
      float sc[BLOCK] = {}, bs[BLOCK] = {};
      for (int j = 0; j < rows; ++j) sc[j] = kInt4 ? 1.f : scales[o0 + j], bs[j] = bias ? bias[o0 + j] : 0.f;
      for (int64_t n0 = 0; n0 < N; n0 += NR2) {
        const int nr = (int)std::min<int64_t>(NR2, N - n0);
        tile_any<kInt4>(nr, wb, qr, n0, acc);
        for (int n = 0; n < nr; ++n) {
          for (int h = 0; h < 2; ++h) {
            const __m256 scale = _mm256_loadu_ps(sc + 8 * h), b = _mm256_loadu_ps(bs + 8 * h);
            _mm256_store_ps(out + 8 * h, kInt4 ? _mm256_add_ps(acc[n][h], b) : _mm256_fmadd_ps(acc[n][h], scale, b));
          }
          T* y = yp + (n0 + n) * O + o0;
          for (int j = 0; j < rows; ++j) y[j] = static_cast<T>(out[j]);   // bf16: round to nearest even
        }
      }
    }
  });
}
#endif

// x [..., K] -> y [..., O]: the module's whole forward in one call (a few us of Python per call
// add up over the ~120 linears of a pass). out: y's storage, given (DecoderPlan's workspace: no
// allocation in a pass) or allocated here.
at::Tensor quant_linear(const at::Tensor& x_in, const at::Tensor& packed, const at::Tensor* scales,
                           const c10::optional<at::Tensor>& bias, int64_t O, bool int4,
                           const c10::optional<at::Tensor>& out) {
  const char* op = int4 ? "int4_linear" : "int8_linear";
  TORCH_CHECK(has_kernels(), op, ": built without avx512_vnni or AVX2 kernels (callers check has_kernels())");
  TORCH_CHECK(x_in.dim() >= 1, op, ": x [..., K] expected, got a scalar");
  TORCH_CHECK(x_in.scalar_type() == at::kBFloat16 || x_in.scalar_type() == at::kFloat, op,
              ": x must be bf16 or fp32, got ", x_in.scalar_type());
  at::Tensor x = x_in.dim() == 2 ? x_in : x_in.reshape({-1, x_in.size(-1)});   // [N, K], a view when it can be
  if (x.stride(1) != 1) x = x.contiguous();
  const int64_t N = x.size(0), K = x.size(1), G = (K + GROUP - 1) / GROUP, blocks = (O + BLOCK - 1) / BLOCK;
  const int64_t group_bytes = int4 ? INT4_GROUP_BYTES : INT8_GROUP_BYTES;
  TORCH_CHECK(packed.scalar_type() == at::kByte && packed.is_contiguous() && packed.dim() == 3 &&
              packed.size(0) == blocks && packed.size(1) == G && packed.size(2) == group_bytes,
              op, ": packed weights [", blocks, ", ", G, ", ", group_bytes, "] uint8 expected for O = ", O, ", K = ", K,
              ", got ", packed.sizes(), " ", packed.scalar_type());
  TORCH_CHECK(reinterpret_cast<uintptr_t>(packed.data_ptr()) % 64 == 0, op, ": packed weights must be 64-byte aligned");
  if (scales) TORCH_CHECK(scales->scalar_type() == at::kFloat && scales->is_contiguous() && scales->numel() >= O,
                          op, ": scales [>= ", O, "] fp32 expected, got ", scales->sizes(), " ", scales->scalar_type());
  at::Tensor b32;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->numel() == O, op, ": bias [", O, "] expected, got ", bias->sizes());
    b32 = bias->to(at::kFloat).contiguous();
  }
  at::Tensor y;                                     // [..., O], written as [N, O]
  if (out.has_value()) {
    y = *out;
    TORCH_CHECK(y.is_contiguous() && y.numel() == N * O && y.size(-1) == O && y.scalar_type() == x.scalar_type(), op,
                ": out must be contiguous [..., ", O, "] holding ", N, " rows of x's dtype, got ", y.sizes(), " ", y.scalar_type());
  } else {
    auto out_sizes = x_in.sizes().vec();
    out_sizes.back() = O;
    y = at::empty(out_sizes, x.options());
  }
  if (N == 0 || O == 0) return y;
#if TF_VNNI || TF_AVX2
  const auto* wp = packed.data_ptr<uint8_t>();
  const float* sp = scales ? scales->data_ptr<float>() : nullptr;
  const float* bp = b32.defined() ? b32.data_ptr<float>() : nullptr;
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "quant_linear", [&] {
    if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, at::BFloat16>) {
      if (int4) run<true>(x.data_ptr<scalar_t>(), x.stride(0), N, K, wp, sp, bp, y.data_ptr<scalar_t>(), O);
      else run<false>(x.data_ptr<scalar_t>(), x.stride(0), N, K, wp, sp, bp, y.data_ptr<scalar_t>(), O);
    }
  });
#endif
  return y;
}

// y [..., O] = x [..., K] . (q * scales)^T (+ bias); packed [O/16, K/32, 512] uint8 (q + 128), scales [O] fp32
at::Tensor int8_linear(at::Tensor x, at::Tensor packed, at::Tensor scales,
                          c10::optional<at::Tensor> bias, int64_t out_features, c10::optional<at::Tensor> out) {
  return quant_linear(x, packed, &scales, bias, out_features, false, out);
}

// y [..., O] = x [..., K] . ((q - 8) * s + z)^T (+ bias); packed [O/16, K/32, 320] uint8 (nibbles, s, z)
at::Tensor int4_linear(at::Tensor x, at::Tensor packed, c10::optional<at::Tensor> bias,
                          int64_t out_features, c10::optional<at::Tensor> out) {
  return quant_linear(x, packed, nullptr, bias, out_features, true, out);
}

// The packed layouts above, from a dense weight w [O, K] (bf16 or fp32): what runtime/quant.py's
// torch twins (int8_packed_reference, int4_packed_reference) compute, bit for bit, in one pass per
// block (the torch ops took ~1 s of every start-up for the lower levels' copies of SmolLM2-135M).
// Each step is one IEEE fp32 operation as torch does it elementwise: a difference, a quotient,
// rounding half to even, and bf16 by round to nearest even.
inline uint16_t bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);   // round to nearest even (finite f)
}

template <typename T>
void fill_group(const T* w, int64_t O, int64_t K, int64_t o, int64_t c0, float* v) {   // v[32]: zero past O, K
  for (int c = 0; c < GROUP; ++c)
    v[c] = (o < O && c0 + c < K) ? static_cast<float>(w[o * K + c0 + c]) : 0.f;
}

#if TF_AVX512
// w[o, c0 .. c0 + 31] as fp32 in two zmm (zero past O, K)
template <typename T>
inline void load_group(const T* w, int64_t O, int64_t K, int64_t o, int64_t c0, __m512& v0, __m512& v1) {
  if (o < O && c0 + GROUP <= K) {   // a whole group: straight from the row
    if constexpr (std::is_same_v<T, float>) {
      v0 = _mm512_loadu_ps(w + o * K + c0), v1 = _mm512_loadu_ps(w + o * K + c0 + 16);
    } else {   // bf16 -> fp32: the 16 bits on top
      const __m512i raw = _mm512_loadu_si512(w + o * K + c0);
      v0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(raw)), 16));
      v1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(raw, 1)), 16));
    }
    return;
  }
  alignas(64) float v[GROUP];
  fill_group(w, O, K, o, c0, v);
  v0 = _mm512_load_ps(v), v1 = _mm512_load_ps(v + 16);
}
#endif

// w [O, K] as bf16 or fp32, contiguous: another floating type goes in as fp32, as the torch twins
// compute with it (fp16 exactly)
at::Tensor dense_weight(const at::Tensor& w, const char* op) {
  TORCH_CHECK(w.dim() == 2 && at::isFloatingType(w.scalar_type()),
              op, ": w [O, K] of a floating type expected, got ", w.sizes(), " ", w.scalar_type());
  const bool kept = w.scalar_type() == at::kBFloat16 || w.scalar_type() == at::kFloat;
  return (kept ? w : w.to(at::kFloat)).contiguous();
}

// f(data) with dense_weight's bf16 or fp32 data, over the blocks of 16 rows (at::parallel_for)
template <typename F>
void over_blocks(const at::Tensor& w, int64_t blocks, F&& f) {
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    if (w.scalar_type() == at::kBFloat16) f(w.data_ptr<at::BFloat16>(), b0, b1);
    else f(w.data_ptr<float>(), b0, b1);
  });
}

// packed [O/16, K/32, 320] uint8: q = round((w - low) / s) in 0..15 per row and group of 32 columns,
// s = max((high - low) / 15, 1e-12), nibbles (quad c low, quad c + 4 high), then bf16 s[16], z[16]
// with z = low + 8 s (the value q = 8 stands for)
at::Tensor quantize_int4(const at::Tensor& w_in) {
  const at::Tensor w = dense_weight(w_in, "quantize_int4");
  const int64_t O = w.size(0), K = w.size(1), G = (K + GROUP - 1) / GROUP, blocks = (O + BLOCK - 1) / BLOCK;
  auto packed = at::empty({blocks, G, INT4_GROUP_BYTES}, w.options().dtype(at::kByte));
  uint8_t* out = packed.data_ptr<uint8_t>();
  over_blocks(w, blocks, [&](const auto* wp, int64_t b0, int64_t b1) {
    [[maybe_unused]] float v[GROUP];   // (the portable path)
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t g = 0; g < G; ++g) {
        uint8_t* dst = out + (b * G + g) * INT4_GROUP_BYTES;
        auto* sz = reinterpret_cast<uint16_t*>(dst + GROUP * BLOCK / 2);
        for (int j = 0; j < BLOCK; ++j) {
          const int64_t o = b * BLOCK + j, c0 = g * GROUP;
#if TF_AVX512
          __m512 v0, v1;
          load_group(wp, O, K, o, c0, v0, v1);
          const float low = _mm512_reduce_min_ps(_mm512_min_ps(v0, v1)), high = _mm512_reduce_max_ps(_mm512_max_ps(v0, v1));
          const float scale = std::max((high - low) / 15.f, 1e-12f);
          const __m512 lo = _mm512_set1_ps(low), sc = _mm512_set1_ps(scale), zero = _mm512_setzero_ps(), top = _mm512_set1_ps(15.f);
          __m128i half[2];
          for (int h = 0; h < 2; ++h) {   // the same IEEE steps as the scalar loop below, 16 lanes at a time
            __m512 t = _mm512_div_ps(_mm512_sub_ps(h ? v1 : v0, lo), sc);
            t = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            t = _mm512_min_ps(_mm512_max_ps(t, zero), top);
            half[h] = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(t));   // q[16h .. 16h + 15]
          }
          // quad c's 4 columns low, quad c + 4's high: 4 words, one per quad (codes < 16: no carry)
          alignas(16) uint32_t words[4];
          _mm_store_si128(reinterpret_cast<__m128i*>(words), _mm_or_si128(half[0], _mm_slli_epi16(half[1], 4)));
          for (int quad = 0; quad < 4; ++quad) std::memcpy(dst + (quad * BLOCK + j) * 4, words + quad, 4);
#else
          uint8_t q[GROUP];
          fill_group(wp, O, K, o, c0, v);
          float low = v[0], high = v[0];
          for (int c = 1; c < GROUP; ++c) low = std::min(low, v[c]), high = std::max(high, v[c]);
          const float scale = std::max((high - low) / 15.f, 1e-12f);
          for (int c = 0; c < GROUP; ++c)
            q[c] = (uint8_t)std::clamp(std::nearbyint((v[c] - low) / scale), 0.f, 15.f);
          for (int quad = 0; quad < 4; ++quad)
            for (int c = 0; c < 4; ++c)
              dst[(quad * BLOCK + j) * 4 + c] = (uint8_t)(q[4 * quad + c] | (q[16 + 4 * quad + c] << 4));
#endif
          volatile float eight_scale = 8.f * scale;   // two roundings, as torch's low + 8 * scale (no fused multiply-add)
          sz[j] = bf16_bits(scale);
          sz[BLOCK + j] = bf16_bits(low + eight_scale);
        }
      }
  });
  return packed;
}

// (packed [O/16, K/32, 512] uint8 of q + 128, scales [O rounded up to 16] fp32, 0 past O):
// q = round(w / s) in -127..127 per row, s = max(max|w| / 127, 1e-12)
std::vector<at::Tensor> quantize_int8(const at::Tensor& w_in) {
  const at::Tensor w = dense_weight(w_in, "quantize_int8");
  const int64_t O = w.size(0), K = w.size(1), G = (K + GROUP - 1) / GROUP, blocks = (O + BLOCK - 1) / BLOCK;
  auto packed = at::empty({blocks, G, INT8_GROUP_BYTES}, w.options().dtype(at::kByte));
  auto scales = at::zeros({blocks * BLOCK}, w.options().dtype(at::kFloat));
  uint8_t* out = packed.data_ptr<uint8_t>();
  float* sp = scales.data_ptr<float>();
  over_blocks(w, blocks, [&](const auto* wp, int64_t b0, int64_t b1) {
    [[maybe_unused]] float v[GROUP];   // (the portable path)
    for (int64_t b = b0; b < b1; ++b)
      for (int j = 0; j < BLOCK; ++j) {
        const int64_t o = b * BLOCK + j;
#if TF_AVX512
        __m512 v0, v1, top = _mm512_setzero_ps();
        for (int64_t g = 0; g < G; ++g) {
          load_group(wp, O, K, o, g * GROUP, v0, v1);
          top = _mm512_max_ps(top, _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        }
        const float amax = _mm512_reduce_max_ps(top);
#else
        float amax = 0.f;
        for (int64_t k = 0; o < O && k < K; ++k) amax = std::max(amax, std::fabs(static_cast<float>(wp[o * K + k])));
#endif
        const float scale = std::max(amax / 127.f, 1e-12f);
        if (o < O) sp[o] = scale;
        for (int64_t g = 0; g < G; ++g) {
          uint8_t* dst = out + (b * G + g) * INT8_GROUP_BYTES;
#if TF_AVX512
          load_group(wp, O, K, o, g * GROUP, v0, v1);
          alignas(64) uint32_t words[8];   // quad c's 4 bytes: columns 4c .. 4c + 3
          const __m512 sc = _mm512_set1_ps(scale), lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f),
                       offset = _mm512_set1_ps(128.f);
          for (int h = 0; h < 2; ++h) {   // the scalar loop's IEEE steps, 16 lanes at a time
            __m512 t = _mm512_roundscale_ps(_mm512_div_ps(h ? v1 : v0, sc), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            t = _mm512_add_ps(_mm512_min_ps(_mm512_max_ps(t, lo), hi), offset);
            _mm_store_si128(reinterpret_cast<__m128i*>(words + 4 * h), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(t)));
          }
          for (int quad = 0; quad < 8; ++quad) std::memcpy(dst + (quad * BLOCK + j) * 4, words + quad, 4);
#else
          fill_group(wp, O, K, o, g * GROUP, v);
          for (int quad = 0; quad < 8; ++quad)
            for (int c = 0; c < 4; ++c)
              dst[(quad * BLOCK + j) * 4 + c] =
                  (uint8_t)(std::clamp(std::nearbyint(v[4 * quad + c] / scale), -127.f, 127.f) + 128.f);
#endif
        }
      }
  });
  return {packed, scales};
}

// rescore_top: the exact logits of an int4 head's best candidates (runtime/quant.py RescoredHead).
// In each row of logits [N, V] (fp32, the int4 head's, in place) the k largest values are replaced
// by x[n] . dense[v] (summed in fp32, rounded to x's dtype as a dense head's logits are: bf16 logits
// tie where fp32 ones would not, and the target's argmax takes the first of a tie), dense [V, E]
// being the head the int4 copy was made from (a tied head's embedding: shared, not copied).
// An int4 head reads 10.6 MB less than an int8 one for SmolLM2's
// 49,152 x 576 head, and its rounding moves the logits by enough to cost acceptance; the
// candidates it ranks first hold the argmax and nearly all of the mass, so exact values there
// bring the middle level's acceptance back to an int8 head's (docs/BENCHMARKS.md, round 47).
// Plain C++ (every build has it): the selection is one compare per logit (a min-heap of k
// takes the rare larger ones), the products k * E multiply-adds in 8 fixed partial sums.
// Row-invariant: a row's result depends on that row alone.
template <typename X>
float dot_rows(const X* x, const X* w, int64_t E) {
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t e = 0;
  for (; e + 8 <= E; e += 8)
    for (int j = 0; j < 8; ++j) part[j] += static_cast<float>(x[e + j]) * static_cast<float>(w[e + j]);
  for (; e < E; ++e) part[e % 8] += static_cast<float>(x[e]) * static_cast<float>(w[e]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

template <typename X>
void rescore_rows(float* logits, int64_t V, const X* x, int64_t ldx, const X* dense, int64_t ldw, int64_t E,
                  int64_t k, int64_t n0, int64_t n1) {
  std::vector<std::pair<float, int64_t>> heap;   // min-heap of the row's k largest (value, id)
  heap.reserve(k);
  const auto later = std::greater<std::pair<float, int64_t>>();
  for (int64_t n = n0; n < n1; ++n) {
    float* y = logits + n * V;
    heap.clear();
    for (int64_t v = 0; v < k; ++v) heap.emplace_back(y[v], v);
    std::make_heap(heap.begin(), heap.end(), later);
    for (int64_t v = k; v < V; ++v)
      if (y[v] > heap.front().first) {
        std::pop_heap(heap.begin(), heap.end(), later);
        heap.back() = {y[v], v};
        std::push_heap(heap.begin(), heap.end(), later);
      }
    for (const auto& entry : heap) {
      const int64_t v = entry.second;
      y[v] = static_cast<float>(static_cast<X>(dot_rows(x + n * ldx, dense + v * ldw, E)));
    }
  }
}

void rescore_top(at::Tensor logits, at::Tensor x, at::Tensor dense, int64_t k) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.is_contiguous(),
              "rescore_top: logits must be contiguous fp32 [N, V], got ", logits.sizes(), " ", logits.scalar_type());
  TORCH_CHECK(x.dim() == 2 && x.size(0) == logits.size(0) && x.stride(1) == 1, "rescore_top: x must be [N, E] rows, got ", x.sizes());
  TORCH_CHECK(dense.dim() == 2 && dense.size(0) == logits.size(1) && dense.size(1) == x.size(1) && dense.stride(1) == 1,
              "rescore_top: dense must be [V, E] = [", logits.size(1), ", ", x.size(1), "], got ", dense.sizes());
  TORCH_CHECK(x.scalar_type() == dense.scalar_type() && (x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kFloat),
              "rescore_top: x and dense must both be bf16 or both fp32, got ", x.scalar_type(), " and ", dense.scalar_type());
  const int64_t N = logits.size(0), V = logits.size(1), E = x.size(1);
  TORCH_CHECK(0 < k && k <= V, "rescore_top: k = ", k, " must be in [1, ", V, "]");
  float* y = logits.data_ptr<float>();
  at::parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
    if (x.scalar_type() == at::kFloat)
      rescore_rows(y, V, x.data_ptr<float>(), x.stride(0), dense.data_ptr<float>(), dense.stride(0), E, k, n0, n1);
    else
      rescore_rows(y, V, x.data_ptr<at::BFloat16>(), x.stride(0), dense.data_ptr<at::BFloat16>(), dense.stride(0), E, k, n0, n1);
  });
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("quantize_int4", &quantize_int4, "w [O, K] -> the packed int4 layout (runtime/quant.py Int4Linear)");
  m.def("quantize_int8", &quantize_int8, "w [O, K] -> (the packed int8 layout, scales) (runtime/quant.py Int8Linear)");
  m.def("int8_linear", &int8_linear, "x [...,K] . (q*scale)^T (+ bias) -> [...,O], packed int8 weights",
        py::arg("x"), py::arg("packed"), py::arg("scales"), py::arg("bias"), py::arg("out_features"), py::arg("out") = py::none());
  m.def("int4_linear", &int4_linear, "x [...,K] . ((q-8)*s+z)^T (+ bias) -> [...,O], packed int4 weights",
        py::arg("x"), py::arg("packed"), py::arg("bias"), py::arg("out_features"), py::arg("out") = py::none());
  m.attr("int8_linear_ptr") = py::capsule(reinterpret_cast<void*>(&int8_linear), "triforce.int8_linear");  // DecoderPlan
  m.attr("int4_linear_ptr") = py::capsule(reinterpret_cast<void*>(&int4_linear), "triforce.int4_linear");
  m.def("rescore_top", &rescore_top, "logits [N,V] fp32 (in place): the k largest of each row <- x[n] . dense[v] (fp32 sums, rounded to x's dtype)");
  m.def("has_kernels", &has_kernels, "whether vector kernels (avx512_vnni, or AVX2) were compiled in");
  m.def("has_avx512_vnni", &has_avx512_vnni, "whether the avx512_vnni kernels were compiled in");
  m.def("has_avx512_bf16", &has_avx512_vnni, "same as has_avx512_vnni (the kernels need both; native build's report)");
}
