// CPU attention for decode and verify: q [B, H, T, D], k/v [B, Hkv, S, D] -> [B, T, H, D].
//
// Pure-torch twin: runtime.attention.attend_reference (tests/test_attention.py checks both agree).
//
// * GQA-aware: the G = H / Hkv query heads of one KV head and their T tokens form R = G*T query
//   rows (row r = g*T + t), and each block of NB keys is read once for all R rows.
// * Decode/verify (G*T <= 256): the sequence is split into position-aligned chunks of CHUNK
//   keys; work items are (b, kv head, chunk), spread over threads (OpenMP, dynamic), and
//   merged by log-sum-exp. Prefill (more rows): items are (b, kv head, block of rows), each
//   over all the keys up to its last visible one (no split, no merge needed beyond one part).
//   Chunk and block boundaries depend only on positions, so a query row gets bit-identical
//   results whatever T and S are (a verify pass equals the decode passes it replaces).
// * Causality is bottom-right aligned (row t sees keys [0, S - T + t]) and never materialized:
//   only blocks that reach past S - T get a per-row lane limit.
// * Accumulation is fp32. Both products are small GEMMs per block: scores Q[R, D] . Kp[D, NB]
//   and output P[R, NB] . V[NB, D], with register tiles of 6 rows x 64 lanes (vfmadd, K packed
//   transposed, bf16/fp16 widened to fp32 while packing). With dot_bf16=True, bf16 runs both
//   products on vdpbf16ps (avx512_bf16) instead: Q . Kp[D/2, NB, 2] and P . Vp[NB/2, D, 2].
//   On the Xeon this was written on vdpbf16ps retires 0.65 G/s per core against 3 G/s for
//   vfmadd231ps (32 against ~100 GFLOP/s), so widening to fp32 is the default.
//
// Cost of a pass (per b, kv head): bytes = 2 * S * D * sizeof(dtype) (K and V read once);
// FLOPs = 4 * R * S * D (two products). T=1 is bound by bytes, T >= 2 on this CPU by FLOPs.
//
// Built with -march=native; without avx512f/avx512bw/avx512_bf16 (or in the portable build) a
// scalar path with the same chunking runs instead.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#define TF_AVX512 1
#include <immintrin.h>
#else
#define TF_AVX512 0
#endif

namespace {

constexpr int NB = 64;       // keys per block (4 zmm lanes-vectors of fp32 scores per row)
constexpr int CHUNK = 512;   // keys per work item (multiple of NB); merged by log-sum-exp
constexpr int ROWS_SPLIT = 256;   // more query rows than this (G*T, prefill): split rows, not keys
constexpr int PREFILL_ROWS = 96;  // rows per prefill work item (multiple of the 6-row tile)
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
constexpr double LOG2E = 1.4426950408889634;

struct Shape {
  int64_t B, H, Hkv, G, T, S, D, R;
  int64_t ksb, ksh, kss, vsb, vsh, vss;  // element strides of k and v (stride in D is 1)
  int64_t chunks;
};

// Partial results of one work item: running max m (log2 units), sum l, unnormalized acc [R, D].
struct Partials {
  float* m;
  float* l;
  float* acc;
  int64_t R, D;
  float* m_at(int64_t item) { return m + item * R; }
  float* l_at(int64_t item) { return l + item * R; }
  float* acc_at(int64_t item) { return acc + item * R * D; }
};

#if TF_AVX512

inline __m512 exp2_ps(__m512 x) {
  // 2^x for x <= 0: 2^n * p(f), n = round(x), |f| <= 0.5, Taylor degree 7 (rel. error < 1e-8).
  x = _mm512_max_ps(x, _mm512_set1_ps(-150.f));  // -inf -> 0 after scalef
  __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_mul_ps(_mm512_sub_ps(x, n), _mm512_set1_ps(0.6931471805599453f));
  __m512 p = _mm512_set1_ps(1.f / 5040);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 720));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 120));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 24));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f / 6));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

// In-place transpose of a 16x16 matrix of 32-bit units (r[i] = row i).
inline void transpose16(__m512i r[16]) {
  __m512i t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    u[4 * i + 0] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  // u[4i + c], 128-bit lane L = column 4L + c of rows 4i..4i+3
  for (int c = 0; c < 4; ++c) {
    __m512i x0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
    __m512i x1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
    __m512i y0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    __m512i y1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
    r[8 + c] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
  }
}

inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }

// ---- bf16: packing ------------------------------------------------------------------------
// Kp[u][n] (32-bit units, u < D/2, n < NB): unit u of key n = (K[n][2u], K[n][2u+1]).
inline void prefetch_line(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

void pack_k_bf16(const uint16_t* k, int64_t kss, int nk, int npf, int64_t D, uint32_t* Kp) {
  for (int g = 0; g < NB / 16; ++g) {
    for (int64_t h = 0; h < D / 32; ++h) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        int n = g * 16 + i;
        if (n < npf) prefetch_line(k + (n + NB) * kss + 32 * h);
        r[i] = n < nk ? _mm512_loadu_si512(k + n * kss + 32 * h) : _mm512_setzero_si512();
      }
      transpose16(r);
      for (int j = 0; j < 16; ++j) _mm512_storeu_si512(Kp + (16 * h + j) * NB + 16 * g, r[j]);
    }
  }
}

// Vp[np][j*16 + w] (32-bit units): (V[2np][d], V[2np+1][d]) with d = vp_dim(j, w) (unpack order).
inline int64_t vp_dim(int64_t j, int64_t w) { return 32 * (j / 2) + 8 * (w / 4) + 4 * (j % 2) + (w % 4); }

void pack_v_bf16(const uint16_t* v, int64_t vss, int nk, int npf, int64_t D, uint32_t* Vp) {
  for (int np = 0; np < NB / 2; ++np) {
    int n0 = 2 * np, n1 = 2 * np + 1;
    for (int64_t c = 0; c < D / 32; ++c) {
      if (n0 < npf) prefetch_line(v + (n0 + NB) * vss + 32 * c);
      if (n1 < npf) prefetch_line(v + (n1 + NB) * vss + 32 * c);
      __m512i a = n0 < nk ? _mm512_loadu_si512(v + n0 * vss + 32 * c) : _mm512_setzero_si512();
      __m512i b = n1 < nk ? _mm512_loadu_si512(v + n1 * vss + 32 * c) : _mm512_setzero_si512();
      _mm512_storeu_si512(Vp + np * D + 32 * c, _mm512_unpacklo_epi16(a, b));
      _mm512_storeu_si512(Vp + np * D + 32 * c + 16, _mm512_unpackhi_epi16(a, b));
    }
  }
}

// ---- bf16: the two block products ---------------------------------------------------------
// S[r][n] = sum_u Q[r][u] . Kp[u][n]  (Q in 32-bit units of bf16 pairs, DU = D/2 units)
template <int RB>
void qk_bf16(const uint32_t* Q, int64_t DU, const uint32_t* Kp, float* S) {
  __m512 acc[RB][4];
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t u = 0; u < DU; ++u) {
    __m512bh kv[4];
    for (int j = 0; j < 4; ++j) kv[j] = as_bh(_mm512_loadu_si512(Kp + u * NB + 16 * j));
    for (int r = 0; r < RB; ++r) {
      __m512bh qb = as_bh(_mm512_set1_epi32((int)Q[r * DU + u]));
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], qb, kv[j]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(S + r * NB + 16 * j, acc[r][j]);
}

// O[r][:] = O[r][:] * alpha[r] + sum_np P[r][np] . Vp[np][:], on NV vectors of 16 lanes from j0.
template <int RB, int NV>
void pv_bf16(const uint32_t* P, const uint32_t* Vp, int64_t D, int64_t j0, const float* alpha, float* O) {
  __m512 acc[RB][NV];
  for (int r = 0; r < RB; ++r) {
    __m512 a = _mm512_set1_ps(alpha[r]);
    for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_mul_ps(_mm512_loadu_ps(O + r * D + 16 * (j0 + j)), a);
  }
  for (int np = 0; np < NB / 2; ++np) {
    __m512bh vv[NV];
    for (int j = 0; j < NV; ++j) vv[j] = as_bh(_mm512_loadu_si512(Vp + np * D + 16 * (j0 + j)));
    for (int r = 0; r < RB; ++r) {
      __m512bh pb = as_bh(_mm512_set1_epi32((int)P[r * (NB / 2) + np]));
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], pb, vv[j]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(O + r * D + 16 * (j0 + j), acc[r][j]);
}

// ---- fp32 (and fp16 converted): packing and products ----------------------------------------
template <typename scalar_t>
inline __m512 load16(const scalar_t* p);
template <>
inline __m512 load16<float>(const float* p) { return _mm512_loadu_ps(p); }
template <>
inline __m512 load16<at::Half>(const at::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Kp[d][n] fp32, Vf[n][d] fp32
template <typename scalar_t>
void pack_kv_f32(const scalar_t* k, int64_t kss, const scalar_t* v, int64_t vss, int nk, int npf, int64_t D,
                 float* Kp, float* Vf) {
  constexpr int per_line = 64 / sizeof(scalar_t);
  for (int g = 0; g < NB / 16; ++g) {
    for (int64_t h = 0; h < D / 16; ++h) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        int n = g * 16 + i;
        if (n < npf && (16 * h) % per_line == 0) prefetch_line(k + (n + NB) * kss + 16 * h);
        r[i] = n < nk ? _mm512_castps_si512(load16(k + n * kss + 16 * h)) : _mm512_setzero_si512();
      }
      transpose16(r);
      for (int j = 0; j < 16; ++j) _mm512_storeu_si512(Kp + (16 * h + j) * NB + 16 * g, r[j]);
    }
  }
  for (int n = 0; n < NB; ++n)
    for (int64_t h = 0; h < D / 16; ++h) {
      if (n < npf && (16 * h) % per_line == 0) prefetch_line(v + (n + NB) * vss + 16 * h);
      _mm512_storeu_ps(Vf + n * D + 16 * h, n < nk ? load16(v + n * vss + 16 * h) : _mm512_setzero_ps());
    }
}

// bf16 for the FMA path: Kp[d][n] fp32 from a transpose of 32-bit units (d pairs), each unit
// split by shift/and (no shuffle port); Vf[n][i] fp32 in "even/odd" order within each 32-wide
// chunk c: i = 32c + w holds d = 32c + 2w, i = 32c + 16 + w holds d = 32c + 2w + 1.
inline int64_t evenodd_dim(int64_t i) { return 32 * (i / 32) + 2 * (i % 16) + (i % 32) / 16; }

void pack_kv_bf16_f32(const uint16_t* k, int64_t kss, const uint16_t* v, int64_t vss, int nk, int npf, int64_t D,
                      float* Kp, float* Vf) {
  const __m512i hi_mask = _mm512_set1_epi32((int)0xFFFF0000u);
  for (int g = 0; g < NB / 16; ++g) {
    for (int64_t h = 0; h < D / 32; ++h) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        int n = g * 16 + i;
        if (n < npf) prefetch_line(k + (n + NB) * kss + 32 * h);
        r[i] = n < nk ? _mm512_loadu_si512(k + n * kss + 32 * h) : _mm512_setzero_si512();
      }
      transpose16(r);
      for (int j = 0; j < 16; ++j) {  // unit u = 16h + j holds d = 2u (low half), 2u + 1 (high half)
        _mm512_storeu_si512(Kp + (32 * h + 2 * j) * NB + 16 * g, _mm512_slli_epi32(r[j], 16));
        _mm512_storeu_si512(Kp + (32 * h + 2 * j + 1) * NB + 16 * g, _mm512_and_si512(r[j], hi_mask));
      }
    }
  }
  for (int n = 0; n < NB; ++n)
    for (int64_t h = 0; h < D / 32; ++h) {
      if (n < npf) prefetch_line(v + (n + NB) * vss + 32 * h);
      __m512i x = n < nk ? _mm512_loadu_si512(v + n * vss + 32 * h) : _mm512_setzero_si512();
      _mm512_storeu_si512(Vf + n * D + 32 * h, _mm512_slli_epi32(x, 16));
      _mm512_storeu_si512(Vf + n * D + 32 * h + 16, _mm512_and_si512(x, hi_mask));
    }
}

template <int RB>
void qk_f32(const float* Q, int64_t D, const float* Kp, float* S) {
  __m512 acc[RB][4];
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    __m512 kv[4];
    for (int j = 0; j < 4; ++j) kv[j] = _mm512_loadu_ps(Kp + d * NB + 16 * j);
    for (int r = 0; r < RB; ++r) {
      __m512 qb = _mm512_set1_ps(Q[r * D + d]);
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_fmadd_ps(qb, kv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(S + r * NB + 16 * j, acc[r][j]);
}

template <int RB, int NV>
void pv_f32(const float* P, const float* Vf, int64_t D, int64_t j0, const float* alpha, float* O) {
  __m512 acc[RB][NV];
  for (int r = 0; r < RB; ++r) {
    __m512 a = _mm512_set1_ps(alpha[r]);
    for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_mul_ps(_mm512_loadu_ps(O + r * D + 16 * (j0 + j)), a);
  }
  for (int n = 0; n < NB; ++n) {
    __m512 vv[NV];
    for (int j = 0; j < NV; ++j) vv[j] = _mm512_loadu_ps(Vf + n * D + 16 * (j0 + j));
    for (int r = 0; r < RB; ++r) {
      __m512 pb = _mm512_set1_ps(P[r * NB + n]);
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_fmadd_ps(pb, vv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(O + r * D + 16 * (j0 + j), acc[r][j]);
}

// Row blocks of up to 6 rows (6 x 4 accumulators + 4 operands + 1 broadcast fit in 32 zmm).
constexpr int RBMAX = 6;

template <template <int> class F, typename... A>
void by_rows(int rb, A... a) {
  switch (rb) {
    case 1: F<1>::run(a...); break;
    case 2: F<2>::run(a...); break;
    case 3: F<3>::run(a...); break;
    case 4: F<4>::run(a...); break;
    case 5: F<5>::run(a...); break;
    default: F<6>::run(a...); break;
  }
}
template <int RB> struct QKbf16 { static void run(const uint32_t* Q, int64_t DU, const uint32_t* Kp, float* S) { qk_bf16<RB>(Q, DU, Kp, S); } };
template <int RB> struct QKf32 { static void run(const float* Q, int64_t D, const float* Kp, float* S) { qk_f32<RB>(Q, D, Kp, S); } };
template <int RB> struct PVbf16 {
  static void run(const uint32_t* P, const uint32_t* Vp, int64_t D, const float* alpha, float* O) {
    int64_t j = 0;
    for (; j + 4 <= D / 16; j += 4) pv_bf16<RB, 4>(P, Vp, D, j, alpha, O);
    for (; j < D / 16; j += 2) pv_bf16<RB, 2>(P, Vp, D, j, alpha, O);
  }
};
template <int RB> struct PVf32 {
  static void run(const float* P, const float* Vf, int64_t D, const float* alpha, float* O) {
    int64_t j = 0;
    for (; j + 4 <= D / 16; j += 4) pv_f32<RB, 4>(P, Vf, D, j, alpha, O);
    for (; j < D / 16; ++j) pv_f32<RB, 1>(P, Vf, D, j, alpha, O);
  }
};

// Online softmax over one block for row r: S row (log2 units) -> P row, alpha; updates m, lvec.
// `vis` = keys of the block the row may see (<= 0: none; >= NB: all).
template <bool BF16>
inline void softmax_row(float* s, int vis, float& m, float* lvec, float& alpha, void* prow) {
  if (vis <= 0) {  // the whole block lies after this row's last visible key
    alpha = 1.f;
    std::memset(prow, 0, BF16 ? NB * 2 : NB * 4);
    return;
  }
  __m512 x[4];
  for (int j = 0; j < 4; ++j) {
    x[j] = _mm512_loadu_ps(s + 16 * j);
    if (vis < NB) {
      int lo = vis - 16 * j;  // lanes >= lo are masked
      __mmask16 keep = lo >= 16 ? 0xFFFF : lo <= 0 ? 0 : (__mmask16)((1u << lo) - 1);
      x[j] = _mm512_mask_blend_ps(keep, _mm512_set1_ps(NEG_INF), x[j]);
    }
  }
  float bmax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(x[0], x[1]), _mm512_max_ps(x[2], x[3])));
  float mnew = std::max(m, bmax);  // finite: lane 0 is visible
  alpha = std::exp2(m - mnew);     // m = -inf -> 0
  m = mnew;
  __m512 mv = _mm512_set1_ps(mnew), sum = _mm512_setzero_ps();
  for (int j = 0; j < 4; ++j) {
    x[j] = exp2_ps(_mm512_sub_ps(x[j], mv));
    sum = _mm512_add_ps(sum, x[j]);
  }
  _mm512_storeu_ps(lvec, _mm512_fmadd_ps(_mm512_loadu_ps(lvec), _mm512_set1_ps(alpha), sum));
  if (BF16) {
    auto* p = static_cast<uint32_t*>(prow);
    _mm512_storeu_si512(p, (__m512i)_mm512_cvtne2ps_pbh(x[1], x[0]));
    _mm512_storeu_si512(p + 16, (__m512i)_mm512_cvtne2ps_pbh(x[3], x[2]));
  } else {
    auto* p = static_cast<float*>(prow);
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(p + 16 * j, x[j]);
  }
}

// One work item: rows of kv head (b, h) against keys [c0, c1).
// Q: prepared rows [R, D] (bf16 pairs or fp32), pre-scaled by scale * log2(e).
template <typename scalar_t, bool BF16>
void run_item(const Shape& sh, int64_t r0, int64_t nr, const void* Q, const scalar_t* k, const scalar_t* v,
              int64_t c0, int64_t c1, float* m, float* l, float* acc) {
  constexpr bool BF16_IN = std::is_same<scalar_t, at::BFloat16>::value;
  static_assert(BF16_IN || !BF16, "vdpbf16ps products take bf16 inputs");
  const int64_t R = nr, D = sh.D;  // rows r0 .. r0 + nr of the kv head (Q, m, l, acc point at r0)
  std::vector<float> Kp(D * NB), Vb(D * NB), S(R * NB), P(R * NB), lvec(R * 16, 0.f), alpha(R);
  for (int64_t r = 0; r < R; ++r) m[r] = NEG_INF;
  std::fill(acc, acc + R * D, 0.f);
  for (int64_t n0 = c0; n0 < c1; n0 += NB) {
    int nk = (int)std::min<int64_t>(NB, c1 - n0);
    // The packers prefetch the next block's rows, a cache line per line they load, so the
    // reads of block i+1 overlap the products of block i without flooding the fill buffers.
    // Few rows (decode) leave too little compute to hide them; there the hardware prefetcher
    // alone measured 15% faster.
    const int npf = R < 8 ? 0 : (int)std::max<int64_t>(0, std::min<int64_t>(NB, c1 - n0 - NB));
    if (BF16) {
      pack_k_bf16(reinterpret_cast<const uint16_t*>(k + n0 * sh.kss), sh.kss, nk, npf, D, reinterpret_cast<uint32_t*>(Kp.data()));
      pack_v_bf16(reinterpret_cast<const uint16_t*>(v + n0 * sh.vss), sh.vss, nk, npf, D, reinterpret_cast<uint32_t*>(Vb.data()));
    } else if constexpr (BF16_IN) {
      pack_kv_bf16_f32(reinterpret_cast<const uint16_t*>(k + n0 * sh.kss), sh.kss,
                       reinterpret_cast<const uint16_t*>(v + n0 * sh.vss), sh.vss, nk, npf, D, Kp.data(), Vb.data());
    } else {
      pack_kv_f32(k + n0 * sh.kss, sh.kss, v + n0 * sh.vss, sh.vss, nk, npf, D, Kp.data(), Vb.data());
    }
    for (int64_t r = 0; r < R; r += RBMAX) {
      int rb = (int)std::min<int64_t>(RBMAX, R - r);
      if (BF16)
        by_rows<QKbf16>(rb, static_cast<const uint32_t*>(Q) + r * (D / 2), D / 2,
                        (const uint32_t*)reinterpret_cast<uint32_t*>(Kp.data()), S.data() + r * NB);
      else
        by_rows<QKf32>(rb, static_cast<const float*>(Q) + r * D, D, (const float*)Kp.data(), S.data() + r * NB);
    }
    for (int64_t r = 0; r < R; ++r) {
      int64_t t = (r0 + r) % sh.T;
      int64_t last = sh.S - sh.T + t;  // last key row r sees
      int64_t vis = std::min<int64_t>(last - n0 + 1, nk);
      void* prow = BF16 ? (void*)(reinterpret_cast<uint16_t*>(P.data()) + r * NB) : (void*)(P.data() + r * NB);
      softmax_row<BF16>(S.data() + r * NB, (int)std::max<int64_t>(vis, 0), m[r], lvec.data() + r * 16, alpha[r], prow);
    }
    for (int64_t r = 0; r < R; r += RBMAX) {
      int rb = (int)std::min<int64_t>(RBMAX, R - r);
      if (BF16)
        by_rows<PVbf16>(rb, reinterpret_cast<const uint32_t*>(reinterpret_cast<uint16_t*>(P.data()) + r * NB),
                        (const uint32_t*)reinterpret_cast<uint32_t*>(Vb.data()), D, (const float*)alpha.data() + r,
                        acc + r * D);
      else
        by_rows<PVf32>(rb, (const float*)P.data() + r * NB, (const float*)Vb.data(), D, (const float*)alpha.data() + r,
                       acc + r * D);
    }
  }
  for (int64_t r = 0; r < R; ++r) l[r] = _mm512_reduce_add_ps(_mm512_loadu_ps(lvec.data() + r * 16));
  if (BF16) {  // undo the unpack order of Vp
    std::vector<float> row(D);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t j = 0; j < D / 16; ++j)
        for (int64_t w = 0; w < 16; ++w) row[vp_dim(j, w)] = acc[r * D + 16 * j + w];
      std::copy(row.begin(), row.end(), acc + r * D);
    }
  } else if (BF16_IN) {  // undo the even/odd order of Vf
    std::vector<float> row(D);
    for (int64_t r = 0; r < R; ++r) {
      for (int64_t i = 0; i < D; ++i) row[evenodd_dim(i)] = acc[r * D + i];
      std::copy(row.begin(), row.end(), acc + r * D);
    }
  }
}

#endif  // TF_AVX512

// Portable path: the same chunks, one key at a time, fp32.
template <typename scalar_t>
void run_item_scalar(const Shape& sh, int64_t r0, int64_t nr, const float* Q, const scalar_t* k, const scalar_t* v,
                     int64_t c0, int64_t c1, float* m, float* l, float* acc) {
  const int64_t R = nr, D = sh.D;
  std::vector<float> kf(D), vf(D);
  for (int64_t r = 0; r < R; ++r) m[r] = NEG_INF, l[r] = 0.f;
  std::fill(acc, acc + R * D, 0.f);
  for (int64_t n = c0; n < c1; ++n) {
    for (int64_t d = 0; d < D; ++d) kf[d] = static_cast<float>(k[n * sh.kss + d]), vf[d] = static_cast<float>(v[n * sh.vss + d]);
    for (int64_t r = 0; r < R; ++r) {
      if (n > sh.S - sh.T + (r0 + r) % sh.T) continue;
      float s = 0.f;
      for (int64_t d = 0; d < D; ++d) s += Q[r * D + d] * kf[d];
      float mnew = std::max(m[r], s);
      float alpha = std::exp2(m[r] - mnew), p = std::exp2(s - mnew);
      m[r] = mnew;
      l[r] = l[r] * alpha + p;
      for (int64_t d = 0; d < D; ++d) acc[r * D + d] = acc[r * D + d] * alpha + p * vf[d];
    }
  }
}

bool fast_path(const torch::Tensor& q, int64_t D) {
#if TF_AVX512
  return D % 32 == 0 && D <= 512;
#else
  (void)q, (void)D;
  return false;
#endif
}

}  // namespace

// q [B, H, T, D], k/v [B, Hkv, S, D] (stride 1 in D) -> out [B, T, H, D], dtype of q.
// dot_bf16: run bf16 products on vdpbf16ps instead of converting to fp32 for FMA (measured
// slower on the Xeon this was written on: 0.65 G vdpbf16ps/s against 3 G vfmadd/s per core).
torch::Tensor attend(torch::Tensor q, torch::Tensor k, torch::Tensor v, double scale, bool dot_bf16) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attend: q, k, v must be 4-D, got ", q.sizes(), k.sizes(), v.sizes());
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type(), "attend: dtypes differ");
  TORCH_CHECK(k.sizes() == v.sizes(), "attend: k ", k.sizes(), " and v ", v.sizes(), " differ");
  if (k.stride(3) != 1) k = k.contiguous();
  if (v.stride(3) != 1) v = v.contiguous();
  Shape sh;
  sh.B = q.size(0), sh.H = q.size(1), sh.T = q.size(2), sh.D = q.size(3);
  sh.Hkv = k.size(1), sh.S = k.size(2);
  TORCH_CHECK(k.size(0) == sh.B && k.size(3) == sh.D && sh.H % sh.Hkv == 0 && sh.S >= sh.T && sh.T >= 1,
              "attend: shapes q ", q.sizes(), " k ", k.sizes(), " do not fit");
  sh.G = sh.H / sh.Hkv, sh.R = sh.G * sh.T;
  sh.ksb = k.stride(0), sh.ksh = k.stride(1), sh.kss = k.stride(2);
  sh.vsb = v.stride(0), sh.vsh = v.stride(1), sh.vss = v.stride(2);
  // Decode/verify (R <= ROWS_SPLIT): one row block, keys split in chunks so that both cores
  // work even for one kv head. Prefill (more rows): row blocks of PREFILL_ROWS give the
  // parallelism; keys are one chunk, and each row block stops at its last visible key.
  const bool prefill = sh.R > ROWS_SPLIT;
  sh.chunks = prefill ? 1 : (sh.S + CHUNK - 1) / CHUNK;
  const int64_t row_block = prefill ? PREFILL_ROWS : sh.R;
  const int64_t row_blocks = (sh.R + row_block - 1) / row_block;
  const bool fast = fast_path(q, sh.D) && q.scalar_type() != at::kDouble;
  const bool bf16 = fast && dot_bf16 && q.scalar_type() == at::kBFloat16;

  // Query rows per kv head, [B, Hkv, R, D], scaled so that scores are in log2 units.
  auto qs = (q.to(at::kFloat) * (scale * LOG2E)).reshape({sh.B, sh.Hkv, sh.R, sh.D});
  qs = (bf16 ? qs.to(at::kBFloat16) : qs).contiguous();

  const int64_t parts = sh.B * sh.Hkv * sh.chunks, items = parts * row_blocks;
  auto part = torch::empty({parts * sh.R * (sh.D + 2)}, q.options().dtype(at::kFloat));
  Partials pt{part.data_ptr<float>(), part.data_ptr<float>() + parts * sh.R,
              part.data_ptr<float>() + 2 * parts * sh.R, sh.R, sh.D};

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "attend_cpu", [&] {
    const scalar_t* kp = k.data_ptr<scalar_t>();
    const scalar_t* vp = v.data_ptr<scalar_t>();
    const char* qbase = static_cast<const char*>(qs.data_ptr());
    const int64_t qrow_bytes = sh.R * sh.D * qs.element_size();
    // Dynamic schedule over items (not at::parallel_for's static halves): on a shared machine a
    // descheduled thread then delays one item, not half of the pass.
    const int nthreads = items > 1 ? at::get_num_threads() : 1;
    _Pragma("omp parallel for schedule(dynamic, 1) num_threads(nthreads)")
    for (int64_t it = 0; it < items; ++it) {
        int64_t rbi = it % row_blocks, pi = it / row_blocks;  // row block, (b, h, chunk)
        int64_t c = pi % sh.chunks, bh = pi / sh.chunks, h = bh % sh.Hkv, b = bh / sh.Hkv;
        int64_t r0 = rbi * row_block, nr = std::min(row_block, sh.R - r0);
        int64_t t_max = nr >= sh.T ? sh.T - 1 : 0;  // latest token among rows r0 .. r0+nr
        for (int64_t r = r0; r < r0 + nr && t_max < sh.T - 1; ++r) t_max = std::max(t_max, r % sh.T);
        int64_t c0 = prefill ? 0 : c * CHUNK;
        int64_t c1 = std::min({sh.S, c0 + (prefill ? sh.S : CHUNK), sh.S - sh.T + t_max + 1});
        float *pm = pt.m_at(pi) + r0, *pl = pt.l_at(pi) + r0, *pacc = pt.acc_at(pi) + r0 * sh.D;
        const scalar_t* kb = kp + b * sh.ksb + h * sh.ksh;
        const scalar_t* vb = vp + b * sh.vsb + h * sh.vsh;
        const void* Q = qbase + bh * qrow_bytes + r0 * sh.D * qs.element_size();
#if TF_AVX512
        if (fast) {
          if constexpr (std::is_same<scalar_t, double>::value) {
            TORCH_CHECK(false, "unreachable");
          } else if constexpr (std::is_same<scalar_t, at::BFloat16>::value) {
            if (bf16)
              run_item<scalar_t, true>(sh, r0, nr, Q, kb, vb, c0, c1, pm, pl, pacc);
            else
              run_item<scalar_t, false>(sh, r0, nr, Q, kb, vb, c0, c1, pm, pl, pacc);
          } else {
            run_item<scalar_t, false>(sh, r0, nr, Q, kb, vb, c0, c1, pm, pl, pacc);
          }
          continue;
        }
#endif
        run_item_scalar<scalar_t>(sh, r0, nr, static_cast<const float*>(Q), kb, vb, c0, c1, pm, pl, pacc);
    }
  });

  // Merge the chunks of each row by log-sum-exp and write [B, T, H, D].
  auto out = torch::empty({sh.B, sh.T, sh.H, sh.D}, q.options());
  auto outf = out.scalar_type() == at::kFloat ? out : torch::empty(out.sizes(), q.options().dtype(at::kFloat));
  float* o = outf.data_ptr<float>();
  at::parallel_for(0, sh.B * sh.Hkv * sh.R, 16, [&](int64_t begin, int64_t end) {
    for (int64_t x = begin; x < end; ++x) {
      int64_t r = x % sh.R, bh = x / sh.R, h = bh % sh.Hkv, b = bh / sh.Hkv;
      int64_t g = r / sh.T, t = r % sh.T;
      float* dst = o + ((b * sh.T + t) * sh.H + h * sh.G + g) * sh.D;
      float M = NEG_INF;
      for (int64_t c = 0; c < sh.chunks; ++c) M = std::max(M, pt.m_at(bh * sh.chunks + c)[r]);
      float L = 0.f;
      std::fill(dst, dst + sh.D, 0.f);
      for (int64_t c = 0; c < sh.chunks; ++c) {
        int64_t it = bh * sh.chunks + c;
        float mc = pt.m_at(it)[r];
        if (mc == NEG_INF) continue;
        float w = std::exp2(mc - M);
        L += w * pt.l_at(it)[r];
        const float* a = pt.acc_at(it) + r * sh.D;
        for (int64_t d = 0; d < sh.D; ++d) dst[d] += w * a[d];
      }
      float inv = 1.f / L;
      for (int64_t d = 0; d < sh.D; ++d) dst[d] *= inv;
    }
  });
  if (!outf.is_same(out)) out.copy_(outf);
  return out;
}

bool has_avx512_bf16() { return TF_AVX512; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("attend", &attend, "CPU attention for decode/verify: q [B,H,T,D], k/v [B,Hkv,S,D] -> [B,T,H,D]",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("scale"), py::arg("dot_bf16") = false);
  m.def("has_avx512_bf16", &has_avx512_bf16, "whether the fast (avx512_bf16) kernels were compiled in");
}
