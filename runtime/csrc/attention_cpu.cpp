// CPU attention for decode and verify: q [B, H, T, D], k/v [B, Hkv, S, D] -> [B, T, H, D].
//
// Pure-torch twin: runtime.attention.attend_reference (tests/test_attention.py checks both agree).
//
// * GQA-aware: the G = H / Hkv query heads of one KV head and their T tokens form R = G*T query
//   rows (row r = g*T + t), and each block of NB keys is read once for all R rows.
// * Decode/verify (G*T <= 256): the sequence is split into position-aligned chunks (chunk_begin:
//   512, 512, then CHUNK keys each); work items are (b, kv head, chunk), each with its own
//   partial (max, sum, acc), merged by log-sum-exp in chunk order (with AMX and more than 32
//   rows, also by block of at most 32 rows: one or two tiles each). Prefill (more rows): items
//   are (b, kv head, block of rows), each over all the keys up to its last visible one, written
//   out directly.
//   Chunk and block boundaries depend only on positions, and which thread runs an item changes
//   nothing, so a query row gets bit-identical results whatever T and the thread count are (a
//   verify pass equals the decode passes it replaces).
// * Scheduling: each thread owns a contiguous run of items (so its reads of K and V are one
//   stream the prefetchers follow across chunks) and, when done, steals items from the back
//   of another thread's run (a descheduled thread on a shared machine delays little).
// * Causality is bottom-right aligned (row t sees keys [0, S - T + t]) and never materialized:
//   only blocks that reach past S - T get a per-row lane limit.
// * Accumulation is fp32. Both products are small GEMMs per block: scores Q[R, D] . Kp[D, NB]
//   and output P[R, NB] . V[NB, D]. Two variants:
//     fma   bf16/fp16 widened to fp32 while packing, vfmadd231ps (16 MACs per instruction), on
//           register tiles of 6 rows x 64 lanes
//     dot   bf16 only, on Q . Kp[D/2, NB, 2] and P . Vp[NB/2, D, 2], P rounded to bf16 (as
//           flash-attention does on GPUs): on AMX tiles where the CPU has them (tdpbf16ps, the
//           packed blocks are its operands as they are: qk_amx, pv_amx; held decode and verify
//           items read V in place instead, P's units split in even and odd dims: pv_amx_held_words), else on vdpbf16ps
//           (avx512_bf16, 32 MACs per instruction) register tiles as fma's. Decode items of up
//           to FUSED_ROWS rows interleave V's key pairs in registers inside the P.V product
//           instead of storing a packed block (pv_bf16_fused); K is packed (transposed) once
//           per block, which every row tile then reads, except in held AMX items (decode and
//           verify, up to 32 rows), where K's rows are the left tile operand as they lie and the
//           score tiles come out transposed (qk_amx_keys).
//   Which is faster depends on the CPU: on the 2-core Xeon this began on (no AMX), vdpbf16ps
//   retired 0.65 G/s per core against 3 G/s for vfmadd (fma faster); on the 2-core EPYC (Zen 5,
//   family 1Ah) vdpbf16ps runs 1.3-1.6x faster than fma at T >= 2 and ~1.25x at T = 1; on a
//   2-core Xeon with AMX, tiles run 1.3-1.6x faster than fma at T = 4..16 and as fast at T = 1
//   (docs/BENCHMARKS.md, round 9); on a 2-core EPYC Zen 4 (family 19h) dot runs 1.5x faster than
//   fma at T = 1 and 1.6x at T = 4..8 (round 10). dot_bf16=None picks dot on AMD CPUs and where
//   AMX is usable, fma elsewhere (TRIFORCE_DOT_BF16=0/1 and TRIFORCE_AMX=0 override).
// * Scores are raw q.k in fp32 (Q is not rounded again); softmax scales them by scale*log2(e).
//   An item takes its keys a chunk at a time in two passes: the scores of the whole chunk (K
//   read), then each row's chunk max, and exp + P.V block by block (V read). So the softmax
//   reduces and rescales once per chunk, not per block: 1.1-1.2x at T = 1..16 and ~1.1x in
//   prefill against rescaling per block (docs/BENCHMARKS.md). (Prefetching all of V during the
//   first pass cost 7-12%: the prefetch instructions, not the memory, were the price; only the
//   first PF_KEYS rows of V are prefetched there, at the chunk's last K block.)
// * Software prefetch, PF_KEYS keys ahead, so each thread keeps enough reads in flight to stream
//   at the memory roofline even for T = 1, where the products leave the core mostly idle. The dot
//   packers prefetch one line per line they load; the fma products prefetch a few lines per inner
//   iteration (Spread), so the requests spread over the compute of T > 1: 1.2-1.3x faster at
//   T = 4..8 in fp32 (docs/BENCHMARKS.md, round 22). fp32 reads full V blocks where they lie.
//   Held AMX items also pull the rows of their next tile loads from L2 into L1 (L1_K_KEYS,
//   L1_V_KEYS): 5-12% faster attention (round 30).
// * No allocation per call beyond the output: scratch and partials are thread_local and grow.
//
// Cost of a pass (per b, kv head): bytes = 2 * S * D * sizeof(dtype) (K and V read once);
// FLOPs = 4 * R * S * D (two products). T=1 is bound by bytes; T >= 2 on a 2-core CPU by FLOPs.
//
// Built with -march=native; without avx512f/avx512bw/avx512dq/avx512_bf16 (or in the portable build) a
// scalar path with the same chunking runs instead.
#include "torch_api.h"
#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "runs.h"   // Runs: work items with stealing
#include "simd.h"   // TF_AVX512 (avx512f, avx512bw, avx512dq, avx512_bf16) and vector helpers

namespace {

constexpr int NB = 64;            // keys per block (4 zmm of fp32 scores per row)
constexpr int CHUNK = 1024;       // keys per decode work item (multiple of NB); merged by LSE.
                                  // The first 1,024 keys are two chunks of 512 (chunk_begin), so a
                                  // short cache (a 1K retrieval budget) still splits evenly on 2
                                  // threads; beyond, 1,024 (512 throughout: 5-10% slower at 8K-32K)
constexpr int64_t LDS = CHUNK + 16;  // floats between score rows (a multiple of 4 KB would alias in L1)
constexpr int FUSED_ROWS = 48;   // decode items of up to this many rows never store a packed V block
                                 // (pv_bf16_fused): attention 1.06-1.20x at T = 1..8, 7K-32K, Zen 4
constexpr int ROWS_SPLIT = 256;   // more query rows than this (G*T, prefill): split rows, not keys
constexpr int HELD_ROWS = 32;     // AMX decode/verify items hold at most two row tiles of 16 (run_item's HELD)
constexpr int PREFILL_ROWS = 192; // rows per prefill work item (multiple of the 6-row tile and of 16): 12% faster
                                  // than 96 at 32K on AMX (K/V packed once for twice the rows), 288 no better
// Software prefetch, per CPU: on Zen 5 (AMD family 1Ah) the NTA hint 64 keys ahead of the block
// packed; elsewhere T2, 64 keys ahead on AMD, 128 on Intel. NTA elsewhere lands the line in L1
// only and it is gone before its use: 2.2x slower than T2 at T = 1 on a Xeon (Sapphire Rapids
// class), 1.3x on Zen 4, where T0 was no better than NTA (docs/BENCHMARKS.md, rounds 9 and 10).
const bool PF_NTA = cpu_is_amd() && cpu_family() >= 0x1A;
const int PF_KEYS = cpu_is_amd() ? 64 : 128;
// Held AMX items (below) also pull the rows their next tile loads read from L2 into L1: K rows
// L1_K_KEYS ahead in the score pass, V rows L1_V_KEYS ahead in the P.V pass: the tile products
// wait on their tile loads, which from L2 take longer than from L1. 2-core Xeon with AMX,
// round 30, in one process: attention 5-12% faster at T = 1..8, 1K-32K keys (1-token calls
// at 32K 1,062 -> 936 us), against 16 / 32 / 64 / 128 keys ahead and K or V alone.
constexpr int L1_K_KEYS = 32;
constexpr int L1_V_KEYS = 64;
// Fused decode and verify items of more than one row tile (RBMAX < R <= FUSED_ROWS: T >= 3 at
// G = 3) also pull K and V rows NEAR_KEYS ahead from L2 into L1 as they pack K and interleave V
// (Prefetch::NEAR). Zen 4, round 43, 30 layers interleaved: T = 3 7-10% faster at 8K and 32K,
// T = 5 ~1.5%; at T = 1 the same prefetches cost 4-6% (so one-tile items go without); 16 keys
// ahead about as 8, 32 slower than none.
constexpr int NEAR_KEYS = 8;
// What a packer prefetches: nothing, the rows PF_KEYS ahead, or those and the rows NEAR_KEYS ahead.
enum Prefetch : int { NO_PF = 0, FAR = 1, NEAR = 2 };
constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
constexpr double LOG2E = 1.4426950408889634;

struct Shape {
  int64_t B, H, Hkv, G, T, S, D, R;
  int64_t qsb, qsh, qst;                 // element strides of q (stride in D is 1)
  int64_t ksb, ksh, kss, vsb, vsh, vss;  // element strides of k and v (stride in D is 1)
  int64_t osb, ost, osh;                 // element strides of out [B, T, H, D]
  int64_t chunks;
  float c;                               // scale * log2(e): scores in log2 units
};

// A grow-only scratch buffer of floats, one per thread (OpenMP threads persist across calls),
// 64-byte aligned: the packed blocks, scores and outputs are tile operands of 64-byte rows, and
// vector's own 16-byte alignment made every row load or store span two cache lines in some
// processes and not in others (a prefill chunk of one build: 1.24x between the two, round 16).
float* scratch(std::vector<float>& buf, size_t n) {
  if (buf.size() < n + 16) buf.resize(n + 16);
  return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63));
}

// Order of the D accumulator lanes the products leave (undone when rows are written out).
enum class Lanes { identity, vp, evenodd };
// vdpbf16ps PV: lane j*16 + w holds d = vp_dim(j, w) (the unpack order of pack_v_bf16)
inline int64_t vp_dim(int64_t j, int64_t w) { return 32 * (j / 2) + 8 * (w / 4) + 4 * (j % 2) + (w % 4); }
// bf16 widened for fma: lane i = 32c + w holds d = 32c + 2w, lane 32c + 16 + w holds d = 32c + 2w + 1
inline int64_t evenodd_dim(int64_t i) { return 32 * (i / 32) + 2 * (i % 16) + (i % 32) / 16; }

std::vector<int32_t> lane_dims(Lanes order, int64_t D) {
  std::vector<int32_t> dim(D);
  for (int64_t i = 0; i < D; ++i)
    dim[i] = order == Lanes::vp ? vp_dim(i / 16, i % 16) : order == Lanes::evenodd ? evenodd_dim(i) : i;
  return dim;
}

// out row = acc / l (acc in lane order, `dim` maps lane -> d)
template <typename scalar_t>
inline void write_row(scalar_t* dst, const float* acc, float l, const int32_t* dim, int64_t D) {
  const float inv = 1.f / l;
  for (int64_t i = 0; i < D; ++i) dst[dim[i]] = static_cast<scalar_t>(acc[i] * inv);
}

// Chunk c holds keys [chunk_begin(c), chunk_begin(c + 1)): 512, 512, then CHUNK each (positions
// only); chunk_of(p) is the chunk holding key p. Every build has them (the portable path
// chunks as the vector paths do).
inline int64_t chunk_begin(int64_t c) { return c <= 2 ? c * (CHUNK / 2) : (c - 1) * CHUNK; }
inline int64_t chunk_of(int64_t p) { return p < CHUNK ? p / (CHUNK / 2) : p / CHUNK + 1; }

#if TF_AVX512


// In-place transpose of a 16x16 matrix of 32-bit units (r[i] = row i).
TF_INLINE void transpose16(__m512i r[16]) {
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

TF_INLINE __m512bh as_bh(__m512i x) { return (__m512bh)x; }

// K and V are read once per pass. Zen 5: NTA, 3-10% faster than T0 at T = 1 (8K-32K), 2-6% at T = 4..8.
TF_INLINE void prefetch_line(const void* p) {
  if (PF_NTA)
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_NTA);
  else
    _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T2);
}

// A line into L1; a row of 64 bf16 (two lines), for a tile load soon after (held items)
TF_INLINE void prefetch_l1(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }
TF_INLINE void prefetch_row_l1(const uint16_t* row) { prefetch_l1(row), prefetch_l1(row + 32); }

// The fma products prefetch as they go, a few lines per inner iteration, so the requests
// spread over the block's compute (the packers' bursts of one line per line loaded left the
// memory idle while the products ran: an fp32 8-token pass's attention ran 1.3x slower at 8K).
// An item reads one stream: K[c0, c1), then V[c0, c1), then the next chunk's K (usually this
// thread's next item). A block at position p of that stream prefetches its positions
// [p + PF_KEYS, p + PF_KEYS + NB): `a` is the part of the stream the block reads (len_a rows),
// `b` the part after it (len_b rows); `iterations` are the product's inner iterations per block.
struct Spread {
  const char *row, *next; int64_t stride, next_stride; int lpk, part = 0, left, rest, per;
  Spread(const void* a, int64_t len_a, int64_t stride_a, const void* b, int64_t len_b, int64_t stride_b,
         int64_t p, int lines_per_row, int iterations)
      : stride(stride_a), next_stride(stride_b), lpk(lines_per_row) {
    const int64_t lo = p + PF_KEYS, hi = lo + NB;
    const int64_t a0 = std::min(lo, len_a), a1 = std::min(hi, len_a);
    const int64_t b0 = std::clamp<int64_t>(lo - len_a, 0, len_b), b1 = std::clamp<int64_t>(hi - len_a, 0, len_b);
    row = static_cast<const char*>(a) + a0 * stride_a;
    next = static_cast<const char*>(b) + b0 * stride_b;
    left = (int)(a1 - a0) * lpk, rest = (int)(b1 - b0) * lpk;
    per = iterations > 0 ? (left + rest + iterations - 1) / iterations : 0;
  }
  TF_INLINE void step() {
    for (int i = 0; i < per; ++i) {
      if (left == 0) {
        if (rest == 0) return;
        left = rest, rest = 0, row = next, stride = next_stride, part = 0;
      }
      prefetch_line(row + 64 * part);
      --left;
      if (++part == lpk) part = 0, row += stride;
    }
  }
};

// The dot packers load rows n < nk of the block at `k` and prefetch rows n < npf of the rows
// PF_KEYS further on (npf = how many of those exist), one prefetch per cache line loaded.

// ---- dot (vdpbf16ps): packing ---------------------------------------------------------------
// Kp[u][n] (32-bit units, u < D/2, n < NB): unit u of key n = (K[n][2u], K[n][2u+1]).
// FULL: nk = npf = NB (every block but a chunk's last ones), so the loop has no branches.
template <bool FULL, Prefetch PF>
TF_INLINE void pack_k_bf16_t(const uint16_t* k, int64_t kss, int nk, int npf, int64_t D, uint32_t* Kp) {
  for (int g = 0; g < NB / 16; ++g) {
    for (int64_t h = 0; h < D / 32; ++h) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        int n = g * 16 + i;
        if (FULL || n < npf) prefetch_line(k + (n + PF_KEYS) * kss + 32 * h);
        if (PF == NEAR && (FULL || n + NEAR_KEYS < nk)) prefetch_l1(k + (n + NEAR_KEYS) * kss + 32 * h);
        r[i] = FULL || n < nk ? _mm512_loadu_si512(k + n * kss + 32 * h) : _mm512_setzero_si512();
      }
      transpose16(r);
      for (int j = 0; j < 16; ++j) _mm512_storeu_si512(Kp + (16 * h + j) * NB + 16 * g, r[j]);
    }
  }
}

// Full blocks without branches: 4-5% faster attention at T = 1, 8K, on the Zen 4 (round 11).
// near: also the rows NEAR_KEYS ahead into L1 (Prefetch::NEAR; the rows PF_KEYS ahead always)
TF_INLINE void pack_k_bf16(const uint16_t* k, int64_t kss, int nk, int npf, int64_t D, uint32_t* Kp, bool near = false) {
  const bool full = nk == NB && npf == NB;
  if (full && near)
    pack_k_bf16_t<true, NEAR>(k, kss, nk, npf, D, Kp);
  else if (full)
    pack_k_bf16_t<true, FAR>(k, kss, nk, npf, D, Kp);
  else if (near)
    pack_k_bf16_t<false, NEAR>(k, kss, nk, npf, D, Kp);
  else
    pack_k_bf16_t<false, FAR>(k, kss, nk, npf, D, Kp);
}

// Keys 2np and 2np + 1, dims [32c, 32c + 32), as vdpbf16ps P.V takes them: pairs (V[2np][d],
// V[2np+1][d]), d = vp_dim(2c, w) in lo and vp_dim(2c + 1, w) in hi. Rows n >= nk read as zero;
// PF: also prefetch the two rows PF_KEYS further on (those below npf), and with NEAR the two
// NEAR_KEYS further on into L1 (those below nk). pack_v_bf16_t stores what this returns,
// pv_bf16_fused multiplies it directly: one definition, so both give the same bits.
template <bool FULL, Prefetch PF>
TF_INLINE void key_pair(const uint16_t* v, int64_t vss, int np, int64_t c, int nk, int npf, __m512i& lo, __m512i& hi) {
  const int n0 = 2 * np, n1 = 2 * np + 1;
  if (PF != NO_PF && (FULL || n0 < npf)) prefetch_line(v + (n0 + PF_KEYS) * vss + 32 * c);
  if (PF != NO_PF && (FULL || n1 < npf)) prefetch_line(v + (n1 + PF_KEYS) * vss + 32 * c);
  if (PF == NEAR && (FULL || n1 + NEAR_KEYS < nk))
    prefetch_l1(v + (n0 + NEAR_KEYS) * vss + 32 * c), prefetch_l1(v + (n1 + NEAR_KEYS) * vss + 32 * c);
  const __m512i a = FULL || n0 < nk ? _mm512_loadu_si512(v + n0 * vss + 32 * c) : _mm512_setzero_si512();
  const __m512i b = FULL || n1 < nk ? _mm512_loadu_si512(v + n1 * vss + 32 * c) : _mm512_setzero_si512();
  lo = _mm512_unpacklo_epi16(a, b);
  hi = _mm512_unpackhi_epi16(a, b);
}

// Vp[np][j*16 + w] (32-bit units): (V[2np][d], V[2np+1][d]) with d = vp_dim(j, w) (unpack order).
template <bool FULL>
TF_INLINE void pack_v_bf16_t(const uint16_t* v, int64_t vss, int nk, int npf, int64_t D, uint32_t* Vp) {
  for (int np = 0; np < NB / 2; ++np)
    for (int64_t c = 0; c < D / 32; ++c) {
      __m512i lo, hi;
      key_pair<FULL, FAR>(v, vss, np, c, nk, npf, lo, hi);
      _mm512_storeu_si512(Vp + np * D + 32 * c, lo);
      _mm512_storeu_si512(Vp + np * D + 32 * c + 16, hi);
    }
}

TF_INLINE void pack_v_bf16(const uint16_t* v, int64_t vss, int nk, int npf, int64_t D, uint32_t* Vp) {
  if (nk == NB && npf == NB)
    pack_v_bf16_t<true>(v, vss, nk, npf, D, Vp);
  else
    pack_v_bf16_t<false>(v, vss, nk, npf, D, Vp);
}

// ---- dot: the two block products ------------------------------------------------------------
// S[r][n] = sum_u Q[r][u] . Kp[u][n]  (Q in 32-bit units of bf16 pairs, DU = D/2 units; S rows
// `lds` floats apart)
template <int RB>
TF_INLINE void qk_bf16(const uint32_t* Q, int64_t DU, const uint32_t* Kp, float* S, int64_t lds) {
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
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(S + r * lds + 16 * j, acc[r][j]);
}

// O[r][:] += sum_np P[r][np] . Vp[np][:], on NV vectors of 16 lanes from j0.
template <int RB, int NV>
TF_INLINE void pv_bf16(const uint32_t* P, const uint32_t* Vp, int64_t D, int64_t j0, float* O) {
  __m512 acc[RB][NV];
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_loadu_ps(O + r * D + 16 * (j0 + j));
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

// pv_bf16 with the packing of V fused in (decode items of up to FUSED_ROWS rows, in tiles of up
// to 12): key_pair interleaves the rows in registers exactly as pack_v_bf16 stores them, so the
// products and their order, hence the results, are the same bits; what goes is the 8 KB store and
// reload of the packed block per block of keys. PF: prefetch as the packer does (FAR: the rows
// PF_KEYS on; NEAR: also those NEAR_KEYS on, into L1), the first row tile only; FULL: nk = npf = NB.
template <int RB, int NV, bool FULL, Prefetch PF>
TF_INLINE void pv_bf16_fused(const uint32_t* P, const uint16_t* v, int64_t vss, int nk, int npf, int64_t D, int64_t j0, float* O) {
  __m512 acc[RB][NV];
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_loadu_ps(O + r * D + 16 * (j0 + j));
  for (int np = 0; np < NB / 2; ++np) {
    __m512bh vv[NV];
    for (int j = 0; j < NV; j += 2) {
      __m512i lo, hi;
      key_pair<FULL, PF>(v, vss, np, (j0 + j) / 2, nk, npf, lo, hi);
      vv[j] = as_bh(lo);
      vv[j + 1] = as_bh(hi);
    }
    for (int r = 0; r < RB; ++r) {
      __m512bh pb = as_bh(_mm512_set1_epi32((int)P[r * (NB / 2) + np]));
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], pb, vv[j]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(O + r * D + 16 * (j0 + j), acc[r][j]);
}

// ---- dot on AMX tiles: the same two products on the same packed layouts ---------------------
// Kp and Vp are already what tdpbf16ps takes as its right operand (pairs interleaved), and Q and
// P rows are its left operand, so the tiles read them in place: 16 query rows at a time (the
// item's rows are padded to a multiple of 16), tmm4 the left tile, tmm5/tmm6 the right ones.
#if TF_AMX
inline void tile_store(int t, float* S, int64_t ld) {   // tmm t (0..3) -> S (row stride ld floats)
  switch (t) {
    case 0: _tile_stored(0, S, ld * 4); break;
    case 1: _tile_stored(1, S, ld * 4); break;
    case 2: _tile_stored(2, S, ld * 4); break;
    default: _tile_stored(3, S, ld * 4); break;
  }
}

inline void tiles_store4(float* S, int64_t ld) {   // tmm0..3 -> S[rows][64]
  for (int t = 0; t < 4; ++t) tile_store(t, S + 16 * t, ld);
}

inline void tiles_load4(const float* S, int64_t ld) {   // S[rows][64] -> tmm0..3
  _tile_loadd(0, S, ld * 4); _tile_loadd(1, S + 16, ld * 4);
  _tile_loadd(2, S + 32, ld * 4); _tile_loadd(3, S + 48, ld * 4);
}

// S[16 rows][NB] = Q[16][D] . K^T over one block: tmm0..3 hold keys 0-15, 16-31, 32-47, 48-63.
inline void qk_amx(const uint32_t* Q, int64_t DU, const uint32_t* Kp, float* S, int64_t lds) {
  _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
  for (int64_t u = 0; u < DU; u += 16) {   // 16 units = 32 dims per step
    _tile_loadd(4, Q + u, DU * 4);
    _tile_loadd(5, Kp + u * NB, NB * 4);      _tile_dpbf16ps(0, 4, 5);
    _tile_loadd(6, Kp + u * NB + 16, NB * 4); _tile_dpbf16ps(1, 4, 6);
    _tile_loadd(5, Kp + u * NB + 32, NB * 4); _tile_dpbf16ps(2, 4, 5);
    _tile_loadd(6, Kp + u * NB + 48, NB * 4); _tile_dpbf16ps(3, 4, 6);
  }
  tiles_store4(S, lds);
}

// O[16 rows][D] += P[16][NB] . V[NB][D] (P bf16 rows of NB; O in Vp's lane order), 32 lanes of
// D (tmm0, tmm1) at a time.
inline void pv_amx(const uint16_t* P, int64_t ldp, const uint32_t* Vp, int64_t D, float* O) {
  for (int64_t j = 0; j < D; j += 32) {
    _tile_loadd(0, O + j, D * 4);
    _tile_loadd(1, O + j + 16, D * 4);
    for (int np = 0; np < NB / 2; np += 16) {   // 16 key pairs = 32 keys per step
      _tile_loadd(4, P + 2 * np, ldp * 2);
      _tile_loadd(5, Vp + np * D + j, D * 4);      _tile_dpbf16ps(0, 4, 5);
      _tile_loadd(6, Vp + np * D + j + 16, D * 4); _tile_dpbf16ps(1, 4, 6);
    }
    _tile_stored(0, O + j, D * 4);
    _tile_stored(1, O + j + 16, D * 4);
  }
}

// Held items (AMX, D = 64: decode and verify passes of up to 32 rows, HELD = their row tiles, 1
// or 2) keep their operands in tiles. Why (2-core Xeon, round 13): tile stores in a burst stall
// this core's memory stream far beyond their own cost. A streaming loop over 30 layers of 32K KV
// with the tile work of a block per 64 rows took 25 ms with no tile stores, 41-49 ms with four
// stores per block in a burst, 30 ms with the same four spread one per 16 rows. So the score
// tiles go out one or two per 16 keys, each while later products run, and the P.V pass holds the
// output's four column tiles in tmm0..3 through a chunk (one row tile after the other).
//
// Scores: K is the left operand as it lies in the cache, never packed: a tile of 16 keys x 32
// dims is 16 rows of 64 bytes, kss apart. The right operand is Q^T (Qt: 16 units x 16 query
// columns, zero past R; for HELD == 2 a second column group holds rows 16..31). A score tile is
// Ct[16 keys][16 rows], turned into the rows of Sc by a 16 x 16 transpose (scores_from_keys).
// Each score sums the same two products (units 0-15, then 16-31) in the same order as a product
// with Q on the left and packed K on the right (qk_amx), so the bits are those of every other
// item. Against packing K (round 15's kernel, the same run): 30 layers at T = 1..5, 1.05-1.10x.
// All tiles are 16 x 64 bytes in the score pass (amx_begin(16, 8)); the P.V pass reconfigures.
inline void qk_amx_keys(const uint16_t* K, int64_t ldk, int g) {   // HELD == 1: tmm g = K[16 keys][64] . Qt (tmm4/5)
  _tile_loadd(6, K, ldk * 2);
  _tile_loadd(7, K + 32, ldk * 2);
  switch (g) {
    case 0: _tile_zero(0); _tile_dpbf16ps(0, 6, 4); _tile_dpbf16ps(0, 7, 5); break;
    case 1: _tile_zero(1); _tile_dpbf16ps(1, 6, 4); _tile_dpbf16ps(1, 7, 5); break;
    case 2: _tile_zero(2); _tile_dpbf16ps(2, 6, 4); _tile_dpbf16ps(2, 7, 5); break;
    default: _tile_zero(3); _tile_dpbf16ps(3, 6, 4); _tile_dpbf16ps(3, 7, 5); break;
  }
}

// HELD == 2: tmm0 = K[16 keys][64] . Qt of rows 0-15 (tmm2/3), tmm1 = the same keys . rows 16-31 (tmm4/5)
inline void qk_amx_keys2(const uint16_t* K, int64_t ldk) {
  _tile_loadd(6, K, ldk * 2);
  _tile_loadd(7, K + 32, ldk * 2);
  _tile_zero(0); _tile_zero(1);
  _tile_dpbf16ps(0, 6, 2); _tile_dpbf16ps(1, 6, 4);
  _tile_dpbf16ps(0, 7, 3); _tile_dpbf16ps(1, 7, 5);
}

// Ct [16 keys][16] (a stored score tile) -> Sc rows j < R (at most 16), 16 keys each (rows LDS apart).
TF_INLINE void scores_from_keys(const float* Ct, float* Sc, int64_t R) {
  __m512i r[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_si512(Ct + 16 * i);
  transpose16(r);
  for (int64_t j = 0; j < R; ++j) _mm512_storeu_si512(Sc + j * LDS, r[j]);
}

// P.V with V as it lies in the cache (no packed block). tdpbf16ps multiplies pairs: with V's rows
// as the right operand, unit n of key k's row is (V[k][2n], V[k][2n+1]), so a left operand whose
// unit k is (P[r][k], 0) gives the even dims and (0, P[r][k]) the odd ones (exp_row<DOT, true>
// writes both: Pw rows hold NB even units, then NB odd ones). Twice the tile products of a packed
// V, and none of the packing. Output lanes: per 32 dims, 16 even then 16 odd (Lanes::evenodd).
// Keys from nk on contribute nothing; the group holding key nk - 1 reads a zero-padded copy Vz
// [16][D] (rows past the cache are not V and may not be finite). v: the block's first row.
TF_INLINE const uint16_t* v_group(const uint16_t* v, int64_t ldv, int g, int nk, int64_t D, uint16_t* Vz, int64_t& ld) {
  const uint16_t* vt = v + 16 * g * ldv;
  ld = ldv;
  if (16 * g + 16 > nk) {
    std::memset(Vz, 0, 16 * D * 2);
    for (int n = 16 * g; n < nk; ++n) std::memcpy(Vz + (n - 16 * g) * D, v + n * ldv, D * 2);
    vt = Vz, ld = D;
  }
  return vt;
}

// Held items (D = 64): tmm0..3 += P . V over one block (tmm0/1 even/odd lanes of dims 0-31,
// tmm2/3 of dims 32-63; tmm4/5 P's even/odd units, tmm6/7 V's two halves). Each group pulls the
// rows L1_V_KEYS on into L1, up to `rows` (the rows from v on that the item reads).
inline void pv_amx_held_words(const uint32_t* Pw, const uint16_t* v, int64_t ldv, int nk, int64_t rows, uint16_t* Vz) {
  for (int g = 0; g < NB / 16 && 16 * g < nk; ++g) {
    for (int64_t i = 16 * g + L1_V_KEYS; i < std::min<int64_t>(rows, 16 * g + 16 + L1_V_KEYS); ++i) prefetch_row_l1(v + i * ldv);
    int64_t ld;
    const uint16_t* vt = v_group(v, ldv, g, nk, 64, Vz, ld);
    _tile_loadd(4, Pw + 16 * g, 2 * NB * 4);
    _tile_loadd(5, Pw + NB + 16 * g, 2 * NB * 4);
    _tile_loadd(6, vt, ld * 2);
    _tile_loadd(7, vt + 32, ld * 2);
    _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 5, 6);
    _tile_dpbf16ps(2, 4, 7); _tile_dpbf16ps(3, 5, 7);
  }
}

#endif

// ---- fma: fp32 (and fp16, bf16 widened) packing and products ---------------------------------
template <typename scalar_t>
inline __m512 load16(const scalar_t* p);
template <>
inline __m512 load16<float>(const float* p) { return _mm512_loadu_ps(p); }
template <>
inline __m512 load16<at::Half>(const at::Half* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Kp[d][n] fp32 (the fma packers prefetch nothing: the products do, Spread)
template <typename scalar_t>
void pack_k_f32(const scalar_t* k, int64_t kss, int nk, int64_t D, float* Kp) {
  for (int g = 0; g < NB / 16; ++g) {
    for (int64_t h = 0; h < D / 16; ++h) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        int n = g * 16 + i;
        r[i] = n < nk ? _mm512_castps_si512(load16(k + n * kss + 16 * h)) : _mm512_setzero_si512();
      }
      transpose16(r);
      for (int j = 0; j < 16; ++j) _mm512_storeu_si512(Kp + (16 * h + j) * NB + 16 * g, r[j]);
    }
  }
}

// Vf[n][d] fp32 (fp16, and fp32's partial blocks: full fp32 blocks are read where they lie)
template <typename scalar_t>
void pack_v_f32(const scalar_t* v, int64_t vss, int nk, int64_t D, float* Vf) {
  for (int n = 0; n < NB; ++n)
    for (int64_t h = 0; h < D / 16; ++h) {
      _mm512_storeu_ps(Vf + n * D + 16 * h, n < nk ? load16(v + n * vss + 16 * h) : _mm512_setzero_ps());
    }
}

// bf16 for fma: Kp[d][n] fp32 from a transpose of 32-bit units (d pairs), each unit split by
// shift/and (no shuffle port)
void pack_k_bf16_f32(const uint16_t* k, int64_t kss, int nk, int64_t D, float* Kp) {
  const __m512i hi_mask = _mm512_set1_epi32((int)0xFFFF0000u);
  for (int g = 0; g < NB / 16; ++g) {
    for (int64_t h = 0; h < D / 32; ++h) {
      __m512i r[16];
      for (int i = 0; i < 16; ++i) {
        int n = g * 16 + i;
        r[i] = n < nk ? _mm512_loadu_si512(k + n * kss + 32 * h) : _mm512_setzero_si512();
      }
      transpose16(r);
      for (int j = 0; j < 16; ++j) {  // unit u = 16h + j holds d = 2u (low half), 2u + 1 (high half)
        _mm512_storeu_si512(Kp + (32 * h + 2 * j) * NB + 16 * g, _mm512_slli_epi32(r[j], 16));
        _mm512_storeu_si512(Kp + (32 * h + 2 * j + 1) * NB + 16 * g, _mm512_and_si512(r[j], hi_mask));
      }
    }
  }
}

// bf16 for fma: Vf[n][i] fp32 in even/odd lane order (evenodd_dim).
void pack_v_bf16_f32(const uint16_t* v, int64_t vss, int nk, int64_t D, float* Vf) {
  const __m512i hi_mask = _mm512_set1_epi32((int)0xFFFF0000u);
  for (int n = 0; n < NB; ++n)
    for (int64_t h = 0; h < D / 32; ++h) {
      __m512i x = n < nk ? _mm512_loadu_si512(v + n * vss + 32 * h) : _mm512_setzero_si512();
      _mm512_storeu_si512(Vf + n * D + 32 * h, _mm512_slli_epi32(x, 16));
      _mm512_storeu_si512(Vf + n * D + 32 * h + 16, _mm512_and_si512(x, hi_mask));
    }
}

template <int RB>
void qk_f32(const float* Q, int64_t D, const float* Kp, float* S, int64_t lds, Spread* pf) {
  __m512 acc[RB][4];
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    pf->step();
    __m512 kv[4];
    for (int j = 0; j < 4; ++j) kv[j] = _mm512_loadu_ps(Kp + d * NB + 16 * j);
    for (int r = 0; r < RB; ++r) {
      __m512 qb = _mm512_set1_ps(Q[r * D + d]);
      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_fmadd_ps(qb, kv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(S + r * lds + 16 * j, acc[r][j]);
}

template <int RB, int NV>
void pv_f32(const float* P, const float* Vf, int64_t ldv, int64_t D, int64_t j0, float* O, Spread* pf) {
  __m512 acc[RB][NV];
  for (int r = 0; r < RB; ++r)
    for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_loadu_ps(O + r * D + 16 * (j0 + j));
  for (int n = 0; n < NB; ++n) {
    pf->step();
    __m512 vv[NV];
    for (int j = 0; j < NV; ++j) vv[j] = _mm512_loadu_ps(Vf + n * ldv + 16 * (j0 + j));
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

// F<rb>::run(a...) for rb in [N, MAX] (rb > MAX runs F<MAX>): a tile of rb rows, its size a
// compile-time constant. MAX = RBMAX for the 6-row tiles, 2 * RBMAX for pv_bf16_fused's 12.
template <template <int> class F, int N = 1, int MAX = RBMAX, typename... A>
TF_INLINE void by_rows(int rb, A... a) {
  if constexpr (N == MAX)
    F<N>::run(a...);
  else if (rb == N)
    F<N>::run(a...);
  else
    by_rows<F, N + 1, MAX>(rb, a...);
}
template <int RB> struct QKbf16 {
  TF_INLINE static void run(const uint32_t* Q, int64_t DU, const uint32_t* Kp, float* S, int64_t lds) { qk_bf16<RB>(Q, DU, Kp, S, lds); }
};
template <int RB> struct QKf32 {
  static void run(const float* Q, int64_t D, const float* Kp, float* S, int64_t lds, Spread* pf) { qk_f32<RB>(Q, D, Kp, S, lds, pf); }
};
template <int RB> struct PVbf16 {
  TF_INLINE static void run(const uint32_t* P, const uint32_t* Vp, int64_t D, float* O) {
    int64_t j = 0;
    for (; j + 4 <= D / 16; j += 4) pv_bf16<RB, 4>(P, Vp, D, j, O);
    for (; j < D / 16; j += 2) pv_bf16<RB, 2>(P, Vp, D, j, O);
  }
};
template <int RB> struct PVbf16Fused {
  // up to 6 rows: 4 vectors of D a call (6 x 4 accumulators); 7..12 rows: 2 (12 x 2), so each
  // half row of V is loaded and interleaved once either way
  template <bool FULL, Prefetch PF>
  static void all(const uint32_t* P, const uint16_t* v, int64_t vss, int nk, int npf, int64_t D, float* O) {
    int64_t j = 0;
    if constexpr (RB <= RBMAX)
      for (; j + 4 <= D / 16; j += 4) pv_bf16_fused<RB, 4, FULL, PF>(P, v, vss, nk, npf, D, j, O);
    for (; j < D / 16; j += 2) pv_bf16_fused<RB, 2, FULL, PF>(P, v, vss, nk, npf, D, j, O);
  }
  // pf: what to prefetch (the first row tile of a block only; the others NO_PF)
  static void run(const uint32_t* P, const uint16_t* v, int64_t vss, int nk, int npf, int64_t D, Prefetch pf, float* O) {
    if (nk == NB && npf == NB)
      pf == NEAR ? all<true, NEAR>(P, v, vss, nk, npf, D, O) : pf == FAR ? all<true, FAR>(P, v, vss, nk, npf, D, O)
                                                              : all<true, NO_PF>(P, v, vss, nk, npf, D, O);
    else
      pf == NEAR ? all<false, NEAR>(P, v, vss, nk, npf, D, O) : pf == FAR ? all<false, FAR>(P, v, vss, nk, npf, D, O)
                                                               : all<false, NO_PF>(P, v, vss, nk, npf, D, O);
  }
};
template <int RB> struct PVf32 {
  // pv_f32 calls per run (groups of 4 vectors of D, then single ones), each NB inner iterations
  static constexpr int64_t calls(int64_t D) { return D / 64 + (D / 16) % 4; }
  static void run(const float* P, const float* Vf, int64_t ldv, int64_t D, float* O, Spread* pf) {
    int64_t j = 0;
    for (; j + 4 <= D / 16; j += 4) pv_f32<RB, 4>(P, Vf, ldv, D, j, O, pf);
    for (; j < D / 16; ++j) pv_f32<RB, 1>(P, Vf, ldv, D, j, O, pf);
  }
};

// The lanes below `lo` of 16 (lanes >= lo are after the row's last key).
TF_INLINE __mmask16 lanes_below(int lo) {
  return lo >= 16 ? (__mmask16)0xFFFF : lo <= 0 ? (__mmask16)0 : (__mmask16)((1u << lo) - 1);
}

// Lane masks of a block for a row that sees its first `vis` keys (<= 0: none; >= NB: all).
TF_INLINE void visible_lanes(int vis, __mmask16 keep[4]) {
  for (int j = 0; j < 4; ++j) keep[j] = lanes_below(vis - 16 * j);
}

// Largest raw score among the first `vis` (>= 1) scores of a row (one reduction per chunk): four
// running maxima (a max is exact in any order, so the same bits as one) and no lane masks before
// the last, partial block. One chain of dependent maxima waited ~4 cycles a vector.
TF_INLINE float row_max(const float* s, int vis) {
  __m512 mx[4];
  for (int j = 0; j < 4; ++j) mx[j] = _mm512_set1_ps(NEG_INF);
  int n0 = 0;
  for (; n0 + NB <= vis; n0 += NB)
    for (int j = 0; j < 4; ++j) mx[j] = _mm512_max_ps(mx[j], _mm512_loadu_ps(s + n0 + 16 * j));
  if (n0 < vis) {
    __mmask16 keep[4];
    visible_lanes(vis - n0, keep);
    for (int j = 0; j < 4; ++j) mx[j] = _mm512_mask_max_ps(mx[j], keep[j], mx[j], _mm512_loadu_ps(s + n0 + 16 * j));
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(mx[0], mx[1]), _mm512_max_ps(mx[2], mx[3])));
}

// 2^x on the lanes of `keep` (0 elsewhere) for x <= 0: P of the dot products, which round it to
// bf16 (8 bits). p(f) * 2^floor(x): f = x - floor(x) in [0, 1) in one vreduceps, p the degree-3
// minimax polynomial of 2^f on [0, 1) (relative error 7.5e-5, 1/26 of bf16's rounding), and
// vscalefps floors x itself; x below -150 gives 0, so no clamp. One instruction fewer than
// rounding to nearest and subtracting (2^n * p(x - n) on |x - n| <= 0.5, the same error): prefill
// attention 4-6% faster (round 32).
TF_INLINE __m512 exp2_p_ps(__m512 x, __mmask16 keep) {
  const __m512 f = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(7.802403e-2f), f, _mm512_set1_ps(2.2606707e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9583399e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.9992513e-1f));
  return _mm512_maskz_scalef_ps(keep, p, x);
}

// One block of a row: P = exp2(c*s - m) on the `vis` visible keys (0 elsewhere), summed into
// lvec (fp32) and stored as bf16 (DOT, rounded as flash-attention does on GPUs) or fp32.
// WORDS (AMX): the bf16 values as 32-bit units, NB with P in the low half, then NB with P in the
// high half (pv_amx_held_words' left operands).
template <bool DOT, bool WORDS = false>
TF_INLINE void exp_row(const float* s, float c, float m, int vis, float* lvec, void* prow) {
  if (vis <= 0) {  // the whole block lies after this row's last visible key
    std::memset(prow, 0, WORDS ? NB * 8 : DOT ? NB * 2 : NB * 4);
    return;
  }
  __mmask16 keep[4];
  visible_lanes(vis, keep);
  const __m512 cv = _mm512_set1_ps(c), mv = _mm512_set1_ps(m);
  __m512 x[4], sum = _mm512_loadu_ps(lvec);
  for (int j = 0; j < 4; ++j) {
    const __m512 e = _mm512_fmsub_ps(_mm512_loadu_ps(s + 16 * j), cv, mv);
    x[j] = DOT ? exp2_p_ps(e, keep[j]) : _mm512_maskz_mov_ps(keep[j], exp2_ps(e));  // hidden: exactly 0
    sum = _mm512_add_ps(sum, x[j]);
  }
  _mm512_storeu_ps(lvec, sum);
  if (WORDS) {
    auto* p = static_cast<uint32_t*>(prow);
    for (int j = 0; j < 4; ++j) {
      const __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(x[j]));
      _mm512_storeu_si512(p + 16 * j, lo);
      _mm512_storeu_si512(p + NB + 16 * j, _mm512_slli_epi32(lo, 16));
    }
  } else if (DOT) {
    auto* p = static_cast<uint32_t*>(prow);
    _mm512_storeu_si512(p, (__m512i)_mm512_cvtne2ps_pbh(x[1], x[0]));
    _mm512_storeu_si512(p + 16, (__m512i)_mm512_cvtne2ps_pbh(x[3], x[2]));
  } else {
    auto* p = static_cast<float*>(prow);
    for (int j = 0; j < 4; ++j) _mm512_storeu_ps(p + 16 * j, x[j]);
  }
}

// A row's P over a whole chunk (prefill items on AMX): exp2(c*s - m) on its first `vis` keys, 0
// after them up to n_end (a multiple of 32), summed into lvec in key order (as exp_row's blocks
// sum them) and stored as bf16 over the row's scores: P's 32 keys at byte 64i lie behind the
// 128 bytes of scores just read, so the row is its own P (row stride: the scores').
TF_INLINE void exp_span(float* s, float c, float m, int vis, int n_end, float* lvec) {
  auto* p = reinterpret_cast<uint32_t*>(s);
  const __m512 cv = _mm512_set1_ps(c), mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_loadu_ps(lvec);
  int n = 0;
  for (; n + 32 <= vis; n += 32) {
    const __m512 x0 = exp2_p_ps(_mm512_fmsub_ps(_mm512_loadu_ps(s + n), cv, mv), (__mmask16)0xFFFF);
    const __m512 x1 = exp2_p_ps(_mm512_fmsub_ps(_mm512_loadu_ps(s + n + 16), cv, mv), (__mmask16)0xFFFF);
    sum = _mm512_add_ps(_mm512_add_ps(sum, x0), x1);
    _mm512_storeu_si512(p + n / 2, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
  }
  for (; n < n_end; n += 32) {
    const __mmask16 k0 = lanes_below(vis - n), k1 = lanes_below(vis - n - 16);
    __m512 x0 = _mm512_setzero_ps(), x1 = _mm512_setzero_ps();
    if (k0) x0 = exp2_p_ps(_mm512_fmsub_ps(_mm512_loadu_ps(s + n), cv, mv), k0);
    if (k1) x1 = exp2_p_ps(_mm512_fmsub_ps(_mm512_loadu_ps(s + n + 16), cv, mv), k1);
    if (k0) sum = _mm512_add_ps(sum, x0);
    if (k1) sum = _mm512_add_ps(sum, x1);
    _mm512_storeu_si512(p + n / 2, (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
  }
  _mm512_storeu_ps(lvec, sum);
}

// One work item: rows r0 .. r0 + R of kv head (b, h) against keys [c0, c1) -> m, l (log2
// units) and the unnormalized acc [R, D] (lane order of the variant).
// Keys go in position-aligned chunks (chunk_begin), each in two passes: scores of the whole chunk
// (K read), then each row's chunk max, and exp + the P.V product (V read). So the softmax
// reduces and rescales once per chunk, not once per block. A decode item is one chunk.
// FUSED (DOT without AMX, R <= FUSED_ROWS): P.V interleaves V in registers (pv_bf16_fused). A
// separate instance, so the other items' code (prefill) is compiled without the fused path.
template <typename scalar_t, bool DOT, bool FUSED = false, int HELD = 0>
void run_item(const Shape& sh, const scalar_t* q, const scalar_t* k, const scalar_t* v, int64_t b, int64_t h,
              int64_t r0, int64_t R, int64_t c0, int64_t c1, float* m, float* l, float* acc, bool amx) {
  constexpr bool BF16_IN = std::is_same<scalar_t, at::BFloat16>::value;
  static_assert(BF16_IN || !DOT, "vdpbf16ps products take bf16 inputs");
  static_assert(DOT || !FUSED, "the fused P.V is a vdpbf16ps product");
  const int64_t D = sh.D;
  // AMX: the rows in as few tiles of equal height (<= 16) as hold them, the last padded with zero rows
  const int64_t tiles = (R + 15) / 16, tile_rows = (R + tiles - 1) / tiles, Rp = amx ? tiles * tile_rows : R;
  thread_local std::vector<float> buf;
  float* Kp = scratch(buf, 2 * D * NB + Rp * LDS + 2 * Rp * NB + R * 16 + 2 * Rp * D);
  float *Vb = Kp + D * NB, *Sc = Vb + D * NB, *P = Sc + Rp * LDS, *lvec = P + 2 * Rp * NB, *Qf = lvec + R * 16;
  float* O = amx ? Qf + Rp * D : acc;   // the accumulator (AMX: padded rows, copied to acc at the end)
  // Held items pack no K: Kp's room (D * NB = 4,096 floats) holds Qt [HELD][2 halves][16 units][16
  // columns], the stored score tiles Ct (up to 4 x 16 x 16) and a zero-padded copy Kz of a partial group [16][D]
  uint32_t* Qt = reinterpret_cast<uint32_t*>(Kp);
  float* Ct = Kp + 1024;
  uint16_t* Kz = reinterpret_cast<uint16_t*>(Kp + 2048);
  // Held items read V in place (pv_amx_held_words: twice the tile products, no packing: the
  // target's bf16 pass 1.02-1.07x faster at 8K-32K, round 25); the other AMX items pack V once per
  // block. In place there made prefill attention 1.27x slower (a V block serves up to 12 row tiles)
  // and decode items of D = 128 (no GQA, or G = 4) 1.08-1.17x slower. Vz: V's zero-padded partial
  // group (v_group), after Kz.
  constexpr bool WORDS = HELD > 0;
  [[maybe_unused]] uint16_t* Vz = reinterpret_cast<uint16_t*>(Kp + 3072);
  static_assert(!HELD || (DOT && !FUSED), "held tiles are the AMX dot products");
  static_assert(HELD >= 0 && HELD <= 2, "HELD: 0, or the row tiles of a held item (1 or 2)");
  // fma: the prefetches spread over the products (Spread), 6-row tiles
  constexpr int64_t esize = sizeof(scalar_t);
  [[maybe_unused]] const int lines_per_row = (int)((D * esize + 63) / 64);
  [[maybe_unused]] const int64_t row_tiles = (R + RBMAX - 1) / RBMAX;
  [[maybe_unused]] const bool near = FUSED && R > RBMAX;   // K and V rows NEAR_KEYS ahead into L1 too
  // Query rows of this item: row r = g*T + t is q[b, h*G + g, t] (bf16 pairs for dot, fp32 else).
  for (int64_t r = 0; r < R; ++r) {
    int64_t g = (r0 + r) / sh.T, t = (r0 + r) % sh.T;
    const scalar_t* src = q + b * sh.qsb + (h * sh.G + g) * sh.qsh + t * sh.qst;
    if (DOT)
      std::memcpy(reinterpret_cast<scalar_t*>(Qf) + r * D, src, D * sizeof(scalar_t));
    else
      for (int64_t d = 0; d < D; ++d) Qf[r * D + d] = static_cast<float>(src[d]);
  }
  if (amx) {   // padding rows: zero queries and probabilities, so their products stay finite
    std::memset(reinterpret_cast<uint16_t*>(Qf) + R * D, 0, (Rp - R) * D * 2);
    std::memset(P + R * (WORDS ? 2 * NB : NB / 2), 0, (Rp - R) * NB * (WORDS ? 8 : 2));
  }
  std::fill(lvec, lvec + R * 16, 0.f);
  for (int64_t r = 0; r < R; ++r) m[r] = NEG_INF;
  std::fill(O, O + Rp * D, 0.f);
  if constexpr (HELD > 0) {   // Qt[c][h][u][j] = unit 16h + u of query row 16c + j (zero past R)
    const auto* Q32 = reinterpret_cast<const uint32_t*>(Qf);
    for (int c = 0; c < HELD; ++c)
      for (int h = 0; h < 2; ++h) {
        __m512i rows[16];
        for (int j = 0; j < 16; ++j)
          rows[j] = 16 * c + j < R ? _mm512_loadu_si512(Q32 + (16 * c + j) * (D / 2) + 16 * h) : _mm512_setzero_si512();
        transpose16(rows);
        for (int u = 0; u < 16; ++u) _mm512_storeu_si512(Qt + ((2 * c + h) * 16 + u) * 16, rows[u]);
      }
  }
#if TF_AMX
  if (amx && !HELD) amx_begin((int)tile_rows, 5);   // held items configure per pass (below)
#endif
  // keys of [n0, n0 + n) row r sees (negative: none)
  auto visible = [&](int64_t r, int64_t n0, int64_t n) { return std::min<int64_t>(sh.S - sh.T + (r0 + r) % sh.T - n0 + 1, n); };
  for (int64_t cc0 = c0, cc1; cc0 < c1; cc0 = cc1) {
    cc1 = std::min<int64_t>(chunk_begin(chunk_of(cc0) + 1), c1);
    // pass 1: raw scores Sc[r][n - cc0]
#if TF_AMX
    if constexpr (HELD) {   // Qt: tmm4/5 (HELD == 1), tmm2..5 (HELD == 2)
      amx_begin(16, 8);
      if constexpr (HELD == 2) {
        _tile_loadd(2, Qt, 64);
        _tile_loadd(3, Qt + 256, 64);
      }
      _tile_loadd(4, Qt + 256 * (2 * HELD - 2), 64);
      _tile_loadd(5, Qt + 256 * (2 * HELD - 1), 64);
    }
    [[maybe_unused]] int64_t pending = -1;   // HELD == 2: where in Sc the score tiles in tmm0/1 go (-1: none)
#endif
    for (int64_t n0 = cc0; n0 < cc1; n0 += NB) {
      const int nk = (int)std::min<int64_t>(NB, cc1 - n0);
      // rows PF_KEYS ahead that exist (they may lie in the next chunk: usually this thread's next item)
      const int npf = (int)std::clamp<int64_t>(sh.S - (n0 + PF_KEYS), 0, NB);
      if constexpr (HELD) {   // the previous block's score tiles go out one per 16 keys packed; V rows prefetched
#if TF_AMX
        const auto* kb = reinterpret_cast<const uint16_t*>(k + n0 * sh.kss);
        const auto* vrow = reinterpret_cast<const uint16_t*>(v + n0 * sh.vss);
        {   // per 16 keys: the previous score tile(s) out, this group's products in
          for (int g = 0; g < NB / 16; ++g) {
            for (int i = 16 * g; i < 16 * g + 16; ++i) {
              if (i < npf) prefetch_line(kb + (i + PF_KEYS) * sh.kss), prefetch_line(kb + (i + PF_KEYS) * sh.kss + 32);
              if (i < nk) prefetch_line(vrow + i * sh.vss), prefetch_line(vrow + i * sh.vss + 32);
              if (n0 + i + L1_K_KEYS < sh.S) prefetch_row_l1(kb + (i + L1_K_KEYS) * sh.kss);
            }
            // this group's 16 keys, from the cache; a chunk's last, partial group from a zero-padded
            // copy; none past the chunk's end (their score columns are never read)
            const uint16_t* kt = kb + 16 * g * sh.kss;
            int64_t ldk = sh.kss;
            if (16 * g + 16 > nk && 16 * g < nk) {
              std::memset(Kz, 0, 16 * D * 2);
              for (int n = 16 * g; n < nk; ++n) std::memcpy(Kz + (n - 16 * g) * D, kb + n * sh.kss, D * 2);
              kt = Kz, ldk = D;
            }
            if constexpr (HELD == 1) {   // tile g holds the previous block's keys 16g..16g+15
              if (n0 > cc0) tile_store(g, Ct + 256 * g, 16);
              if (16 * g < nk) qk_amx_keys(kt, ldk, g);
              if (n0 > cc0) scores_from_keys(Ct + 256 * g, Sc + (n0 - NB - cc0) + 16 * g, R);
            } else if (16 * g < nk) {    // tmm0/1 hold the previous group's 16 keys
              if (pending >= 0) tile_store(0, Ct, 16), tile_store(1, Ct + 256, 16);
              qk_amx_keys2(kt, ldk);
              if (pending >= 0) scores_from_keys(Ct, Sc + pending, 16), scores_from_keys(Ct + 256, Sc + 16 * LDS + pending, R - 16);
              pending = n0 - cc0 + 16 * g;
            }
          }
        }
#endif
      } else if (DOT)
        pack_k_bf16(reinterpret_cast<const uint16_t*>(k + n0 * sh.kss), sh.kss, nk, npf, D, reinterpret_cast<uint32_t*>(Kp), near);
      else if constexpr (BF16_IN)
        pack_k_bf16_f32(reinterpret_cast<const uint16_t*>(k + n0 * sh.kss), sh.kss, nk, D, Kp);
      else
        pack_k_f32(k + n0 * sh.kss, sh.kss, nk, D, Kp);
      if (!HELD && DOT && n0 + NB >= cc1)   // the chunk's last K block: start V's first PF_KEYS rows (pass 2 prefetches the rest)
        for (int64_t n = cc0; n < std::min<int64_t>(cc0 + PF_KEYS, cc1); ++n)
          for (int64_t x = 0; x < D * (int64_t)sizeof(scalar_t); x += 64)
            prefetch_line(reinterpret_cast<const char*>(v + n * sh.vss) + x);
#if TF_AMX
      if constexpr (HELD == 2) {   // the chunk's last 16 keys
        if (n0 + NB >= cc1) {
          tile_store(0, Ct, 16), tile_store(1, Ct + 256, 16);
          scores_from_keys(Ct, Sc + pending, 16), scores_from_keys(Ct + 256, Sc + 16 * LDS + pending, R - 16);
        }
        continue;
      }
      if constexpr (HELD) {   // the previous block's scores went out while this block's came in
        if (n0 + NB >= cc1)
          for (int g = 0; g < NB / 16 && 16 * g < nk; ++g) {
            tile_store(g, Ct + 256 * g, 16);
            scores_from_keys(Ct + 256 * g, Sc + (n0 - cc0) + 16 * g, R);
          }
        continue;
      }
      if (amx) {
        for (int64_t r = 0; r < Rp; r += tile_rows)
          qk_amx(reinterpret_cast<const uint32_t*>(Qf) + r * (D / 2), D / 2, reinterpret_cast<const uint32_t*>(Kp),
                 Sc + r * LDS + (n0 - cc0), LDS);
        continue;
      }
#endif
      // fma: this chunk's K, then its V
      [[maybe_unused]] Spread kpf(k + cc0 * sh.kss, cc1 - cc0, sh.kss * esize, v + cc0 * sh.vss, cc1 - cc0, sh.vss * esize,
                                  n0 - cc0, lines_per_row, (int)(row_tiles * D));
      // dot: the rows in row_tiles tiles of near-equal height (R = 9: 5 + 4, not 6 + 3: a 3-row tile's
      // 12 accumulators ran vdpbf16ps at 78% of a 4-6-row tile's rate, Zen 4, round 47)
      for (int64_t r = 0, tiles = row_tiles, rb; r < R; r += rb, --tiles) {
        rb = DOT ? (R - r + tiles - 1) / tiles : std::min<int64_t>(RBMAX, R - r);
        if (DOT)
          by_rows<QKbf16>((int)rb, reinterpret_cast<const uint32_t*>(Qf) + r * (D / 2), D / 2,
                          (const uint32_t*)reinterpret_cast<uint32_t*>(Kp), Sc + r * LDS + (n0 - cc0), LDS);
        else
          by_rows<QKf32>((int)rb, (const float*)Qf + r * D, D, (const float*)Kp, Sc + r * LDS + (n0 - cc0), LDS, &kpf);
      }
    }
    // each row's new max; rescale what earlier chunks accumulated (never for a decode item)
    for (int64_t r = 0; r < R; ++r) {
      const int64_t vis = visible(r, cc0, cc1 - cc0);
      if (vis <= 0) continue;
      const float mnew = std::max(m[r], sh.c * row_max(Sc + r * LDS, (int)vis));
      if (m[r] != NEG_INF && mnew != m[r]) {
        const __m512 a = _mm512_set1_ps(std::exp2(m[r] - mnew));
        _mm512_storeu_ps(lvec + r * 16, _mm512_mul_ps(_mm512_loadu_ps(lvec + r * 16), a));
        for (int64_t d = 0; d < D; d += 16) _mm512_storeu_ps(O + r * D + d, _mm512_mul_ps(_mm512_loadu_ps(O + r * D + d), a));
      }
      m[r] = mnew;
    }
#if TF_AMX
    // AMX items but held ones (prefill; decode of D != 64): each row's P over the whole chunk in one
    // sweep (exp_span, over its scores), then P . V block by block: the same bits as P per block,
    // 4-8% faster prefill attention (a call per row and block cost more than its exp, round 32)
    if (amx && !HELD) {
      const int n_end = (int)((cc1 - cc0 + NB - 1) / NB * NB);
      for (int64_t r = 0; r < R; ++r)
        exp_span(Sc + r * LDS, sh.c, m[r], (int)std::max<int64_t>(visible(r, cc0, cc1 - cc0), 0), n_end, lvec + r * 16);
      for (int64_t n0 = cc0; n0 < cc1; n0 += NB) {
        const int nk = (int)std::min<int64_t>(NB, cc1 - n0);
        const int npf = (int)std::clamp<int64_t>(cc1 - (n0 + PF_KEYS), 0, NB);
        pack_v_bf16(reinterpret_cast<const uint16_t*>(v + n0 * sh.vss), sh.vss, nk, npf, D, reinterpret_cast<uint32_t*>(Vb));
        for (int64_t r = 0; r < Rp; r += tile_rows)
          pv_amx(reinterpret_cast<const uint16_t*>(Sc + r * LDS) + (n0 - cc0), 2 * LDS, reinterpret_cast<const uint32_t*>(Vb), D, O + r * D);
      }
      continue;
    }
#endif
    // pass 2: P = exp2(c*s - m) per block, O += P . V (HELD == 2: one row tile after the other,
    // each holding its output in tmm0..3; the second reads V from L2)
    for (int64_t rlo = 0, rhi; rlo < R; rlo = rhi) {
      rhi = HELD == 2 ? std::min(R, rlo + tile_rows) : R;
#if TF_AMX
      if constexpr (HELD) amx_begin((int)tile_rows, 6), tiles_load4(O + rlo * D, D);
#endif
      for (int64_t n0 = cc0; n0 < cc1; n0 += NB) {
        const int nk = (int)std::min<int64_t>(NB, cc1 - n0);
        const int npf = HELD ? 0 : (int)std::clamp<int64_t>(cc1 - (n0 + PF_KEYS), 0, NB);   // within the chunk (cc1 <= S; HELD: pass 1 did)
        if constexpr (FUSED) {
          // V interleaved in registers by pv_bf16_fused
        } else if (DOT) {
          if constexpr (!WORDS)   // (held items read V where it lies)
            pack_v_bf16(reinterpret_cast<const uint16_t*>(v + n0 * sh.vss), sh.vss, nk, npf, D, reinterpret_cast<uint32_t*>(Vb));
        }
        else if constexpr (BF16_IN)
          pack_v_bf16_f32(reinterpret_cast<const uint16_t*>(v + n0 * sh.vss), sh.vss, nk, D, Vb);
        else if (!std::is_same<scalar_t, float>::value || nk < NB)
          pack_v_f32(v + n0 * sh.vss, sh.vss, nk, D, Vb);
        for (int64_t r = rlo; r < rhi; ++r) {
          const float* srow = Sc + r * LDS + (n0 - cc0);
          const int vis = (int)std::max<int64_t>(visible(r, n0, nk), 0);
          void* prow = WORDS ? (void*)(reinterpret_cast<uint32_t*>(P) + r * 2 * NB)
                       : DOT ? (void*)(reinterpret_cast<uint16_t*>(P) + r * NB) : (void*)(P + r * NB);
          exp_row<DOT, WORDS>(srow, sh.c, m[r], vis, lvec + r * 16, prow);
        }
#if TF_AMX
        if constexpr (HELD) {
          pv_amx_held_words(reinterpret_cast<const uint32_t*>(P) + rlo * 2 * NB, reinterpret_cast<const uint16_t*>(v + n0 * sh.vss), sh.vss, nk,
                            cc1 - n0, Vz);
          continue;
        }
#endif
        if constexpr (FUSED) {
          for (int64_t r = 0; r < R; r += 2 * RBMAX)
            by_rows<PVbf16Fused, 1, 2 * RBMAX>((int)std::min<int64_t>(2 * RBMAX, R - r),
                                   reinterpret_cast<const uint32_t*>(reinterpret_cast<uint16_t*>(P) + r * NB),
                                   reinterpret_cast<const uint16_t*>(v + n0 * sh.vss), sh.vss, nk, npf, D, r > 0 ? NO_PF : near ? NEAR : FAR, acc + r * D);
          continue;
        }
        // fma: this chunk's V, then the next chunk's K
        [[maybe_unused]] Spread vpf(v + cc0 * sh.vss, cc1 - cc0, sh.vss * esize, k + cc1 * sh.kss, sh.S - cc1, sh.kss * esize,
                                    n0 - cc0, lines_per_row, (int)(row_tiles * NB * PVf32<1>::calls(D)));
        const bool vdirect = std::is_same<scalar_t, float>::value && nk == NB;   // fp32 V as it lies
        for (int64_t r = 0; r < R; r += RBMAX) {
          int rb = (int)std::min<int64_t>(RBMAX, R - r);
          if (DOT)
            by_rows<PVbf16>(rb, reinterpret_cast<const uint32_t*>(reinterpret_cast<uint16_t*>(P) + r * NB),
                            (const uint32_t*)reinterpret_cast<uint32_t*>(Vb), D, acc + r * D);
          else
            by_rows<PVf32>(rb, (const float*)P + r * NB, vdirect ? (const float*)(v + n0 * sh.vss) : (const float*)Vb,
                           vdirect ? sh.vss : D, D, acc + r * D, &vpf);
        }
      }
#if TF_AMX
      if constexpr (HELD) tiles_store4(O + rlo * D, D);
#endif
    }
  }
#if TF_AMX
  if (amx) {
    amx_end();
    std::memcpy(acc, O, R * D * sizeof(float));
  }
#endif
  for (int64_t r = 0; r < R; ++r) l[r] = _mm512_reduce_add_ps(_mm512_loadu_ps(lvec + r * 16));
}

#endif  // TF_AVX512

// Portable path: the same items, one key at a time, fp32, lanes in identity order.
template <typename scalar_t>
void run_item_scalar(const Shape& sh, const scalar_t* q, const scalar_t* k, const scalar_t* v, int64_t b, int64_t h,
                     int64_t r0, int64_t R, int64_t c0, int64_t c1, float* m, float* l, float* acc) {
  const int64_t D = sh.D;
  thread_local std::vector<float> buf;
  float* kf = scratch(buf, 2 * D + R * D);
  float *vf = kf + D, *Q = vf + D;
  for (int64_t r = 0; r < R; ++r) {
    int64_t g = (r0 + r) / sh.T, t = (r0 + r) % sh.T;
    const scalar_t* src = q + b * sh.qsb + (h * sh.G + g) * sh.qsh + t * sh.qst;
    for (int64_t d = 0; d < D; ++d) Q[r * D + d] = static_cast<float>(src[d]);
  }
  for (int64_t r = 0; r < R; ++r) m[r] = NEG_INF, l[r] = 0.f;
  std::fill(acc, acc + R * D, 0.f);
  for (int64_t n = c0; n < c1; ++n) {
    for (int64_t d = 0; d < D; ++d) kf[d] = static_cast<float>(k[n * sh.kss + d]), vf[d] = static_cast<float>(v[n * sh.vss + d]);
    for (int64_t r = 0; r < R; ++r) {
      if (n > sh.S - sh.T + (r0 + r) % sh.T) continue;
      float s = 0.f;
      for (int64_t d = 0; d < D; ++d) s += Q[r * D + d] * kf[d];
      s *= sh.c;
      float mnew = std::max(m[r], s);
      float alpha = std::exp2(m[r] - mnew), p = std::exp2(s - mnew);
      m[r] = mnew;
      l[r] = l[r] * alpha + p;
      for (int64_t d = 0; d < D; ++d) acc[r * D + d] = acc[r * D + d] * alpha + p * vf[d];
    }
  }
}

#if TF_AVX2
// ---- AVX2 + FMA (no AVX-512): decode and verify items -----------------------------------------
// The same items (b, kv head, chunk of keys) in three passes over the item's keys, all fp32, with
// the item's R query rows in the lanes of RV = ceil(R / 8) vectors (St [keys, LR = 8 RV]):
//   scores  St[n][r] = q_r . k_n * c, one FMA chain over the dims per (row, key), in the widened
//           order (below): 8 keys' rows widened once into Kf, then per dim the rows' vector of q
//           times the key's value broadcast (score_tile: up to 3 row vectors x 4 keys, no
//           reduction across lanes). Items of up to KEYS_ROWS rows (decode, 2-token verify), and
//           of 9-12 rows (3- and 4-token verify) in two halves, put the keys in the lanes instead
//           (score_keys: 8 keys transposed in registers, each row's q broadcast): the same chain,
//           so the same bits;
//   softmax per lane: m = the item's max, p = 2^(S - m), l = the sum of p in key order; keys a row
//           may not see (bottom-right causality) are -inf, so p is exactly 0;
//   P.V     the block's V rows widened once into Vf, then per row O[r][:] += p[r][n] V[n][:], keys
//           in order (pv_rows: 3 rows x 32 dims at a time).
// bf16 is widened by shift and mask (a 32-byte load is 8 pairs of dims: the even dims shifted up,
// the odd masked), so Q, Kf, Vf and O hold each 16 dims as [8 even, 8 odd]; acc goes out in d
// order. Each row's operations do not depend on R, r0, its lane or the thread (keys a row cannot
// see add exact zeros), so a verify pass gives bitwise the rows of the 1-token passes it replaces.
// Against round 35's kernel (dims in the lanes, a hadd tree per key), one layer, bf16, 2 threads,
// interleaved in one process: 8K T = 1 0.52 -> 0.41 ms, T = 4 1.17 -> 0.96, T = 8 2.25 -> 1.49,
// T = 16 4.98 -> 3.20; 32K T = 8 10.2 -> 6.7 (docs/bench/speed-zen3-r36/attention_variants.txt).
constexpr int NB2 = 64;   // keys per V block (Vf: 64 rows)

// 2^x for x <= 0, lanes below -126 (-inf included) exactly 0: exp2_ps8 (simd.h) with its floor masked.
inline __m256 exp2_avx2(__m256 x) {
  return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-126.f), _CMP_LT_OQ), exp2_ps8(x));
}

// GCC folds a vector used by several FMAs into each as a memory operand (one load per FMA, so the
// loads bound the tile); an empty asm keeps it in a register.
#define TF_IN_REGISTER(x) asm("" : "+x"(x))
constexpr int PR = 3;   // P.V rows per tile

// Scores with the rows in the lanes: nv row vectors (Qt [D, LR], widened order) x nk keys of Kf.
template <int nv, int nk>
TF_INLINE void score_tile(const float* Qt, int64_t LR, int64_t D, const float* Kf, float* St, __m256 c) {
  static_assert(nv >= 1 && nv <= 3, "1..3 row vectors");
  __m256 a[nv][nk];
  for (int i = 0; i < nv; ++i)
    for (int j = 0; j < nk; ++j) a[i][j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    const float* qd = Qt + d * LR;
    __m256 q0 = _mm256_loadu_ps(qd), q1, q2;
    TF_IN_REGISTER(q0);
    if constexpr (nv > 1) { q1 = _mm256_loadu_ps(qd + 8); TF_IN_REGISTER(q1); }
    if constexpr (nv > 2) { q2 = _mm256_loadu_ps(qd + 16); TF_IN_REGISTER(q2); }
    for (int j = 0; j < nk; ++j) {
      const __m256 kv = _mm256_broadcast_ss(Kf + j * D + d);
      a[0][j] = _mm256_fmadd_ps(q0, kv, a[0][j]);
      if constexpr (nv > 1) a[1][j] = _mm256_fmadd_ps(q1, kv, a[1][j]);
      if constexpr (nv > 2) a[2][j] = _mm256_fmadd_ps(q2, kv, a[2][j]);
    }
  }
  for (int j = 0; j < nk; ++j)
    for (int i = 0; i < nv; ++i) _mm256_storeu_ps(St + j * LR + 8 * i, _mm256_mul_ps(a[i][j], c));
}

// 8x8 transpose of dwords (rows r[0..7] -> r[p] = lane p of each input).
TF_INLINE void transpose8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20), r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20), r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31), r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31), r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// Scores with the keys in the lanes, for few rows (decode): 8 keys' rows transposed in registers
// (bf16: pairs of dims as dwords, then each pair's even and odd dim widened), each row's q[d]
// broadcast. The same FMA chain per (row, key) as score_tile, over the dims in the same (widened)
// order, so the same bits.
// Out: St[j * LR + r] for the 8 keys j and rows r < 8 (lanes past nr: zeros).
template <int nr, typename scalar_t>
TF_INLINE void score_keys(const float* Qr, int64_t D, const scalar_t* k, int64_t kss, int64_t nk, float* St, int64_t LR, __m256 c) {
  __m256 a[nr];
  for (int i = 0; i < nr; ++i) a[i] = _mm256_setzero_ps();
  constexpr bool bf = std::is_same<scalar_t, at::BFloat16>::value;
  constexpr int64_t step = bf ? 16 : 8;
  for (int64_t d0 = 0; d0 < D; d0 += step) {
    __m256 x[8];
    for (int j = 0; j < 8; ++j)
      x[j] = j < nk ? _mm256_loadu_ps(reinterpret_cast<const float*>(k + j * kss + d0)) : _mm256_setzero_ps();
    transpose8(x);
    if constexpr (bf) {   // the widened order: the 8 even dims, then the 8 odd ones
      for (int p = 0; p < 8; ++p) {
        const __m256 e = bf16_even(_mm256_castps_si256(x[p]));
        for (int i = 0; i < nr; ++i) a[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(Qr + i * D + d0 + p), e, a[i]);
      }
      for (int p = 0; p < 8; ++p) {
        const __m256 o = bf16_odd(_mm256_castps_si256(x[p]));
        for (int i = 0; i < nr; ++i) a[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(Qr + i * D + d0 + 8 + p), o, a[i]);
      }
    } else {
      for (int p = 0; p < 8; ++p)
        for (int i = 0; i < nr; ++i) a[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(Qr + i * D + d0 + p), x[p], a[i]);
    }
  }
  __m256 t[8];
  for (int i = 0; i < 8; ++i) t[i] = i < nr ? _mm256_mul_ps(a[i], c) : _mm256_setzero_ps();
  transpose8(t);
  for (int j = 0; j < 8; ++j) _mm256_storeu_ps(St + LR * j, t[j]);
}
// Items of up to this many rows take score_keys: at 6 (T = 2 for G = 3) one layer at 8K keys took
// 0.70 -> 0.58 ms against the rows in the lanes (docs/bench/speed-zen3-r36).
constexpr int KEYS_ROWS = 6;
// Items of 9-12 rows (T = 3, 4 for G = 3) take score_keys too, in two calls of half the rows each
// (each transposes the 8 keys again): one layer, 30 layers' K/V in turn, T = 3 10-16% faster and
// T = 4 2-16% (one build measured it 12% slower) than round 36's first 8 rows in the lanes + the
// rest with the keys in the lanes (docs/bench/speed-zen3-r38). The second call writes lanes
// R/2 .. R/2 + 7 <= 13 of each key's 16. Three calls of 5-6 rows (T = 5, 6) were no faster than
// row vectors, and their last call's lanes would overrun 16.
inline bool keys_in_lanes(int64_t R) { return R <= KEYS_ROWS || (R > 8 && R <= 2 * KEYS_ROWS); }

// score_keys for nr (1..KEYS_ROWS) rows from row ra: St lanes ra..ra + 7 of each key (zeros past nr).
template <typename scalar_t>
TF_INLINE void score_keys_rows(int64_t nr, int64_t ra, const float* Qr, int64_t D, const scalar_t* kn, int64_t kss,
                               int64_t nk, float* st, int64_t LR, __m256 c) {
  const float* qk = Qr + ra * D;
  float* sk = st + ra;
  switch (nr) {
    case 1: score_keys<1>(qk, D, kn, kss, nk, sk, LR, c); break;
    case 2: score_keys<2>(qk, D, kn, kss, nk, sk, LR, c); break;
    case 3: score_keys<3>(qk, D, kn, kss, nk, sk, LR, c); break;
    case 4: score_keys<4>(qk, D, kn, kss, nk, sk, LR, c); break;
    case 5: score_keys<5>(qk, D, kn, kss, nk, sk, LR, c); break;
    default: score_keys<6>(qk, D, kn, kss, nk, sk, LR, c); break;
  }
}

template <int nr, int nv>
TF_INLINE void pv_rows(const float* const prow[], int64_t ps, float* const orow[], const float* Vf, int64_t nk, int64_t D,
                       int64_t d0) {
  __m256 o[nr][nv];
  for (int i = 0; i < nr; ++i)
    for (int v = 0; v < nv; ++v) o[i][v] = _mm256_loadu_ps(orow[i] + d0 + 8 * v);
  for (int64_t j = 0; j < nk; ++j) {
    __m256 p[nr];
    for (int i = 0; i < nr; ++i) p[i] = _mm256_broadcast_ss(prow[i] + j * ps);
    const float* vr = Vf + j * D + d0;
    for (int v = 0; v < nv; ++v) {
      __m256 vv = _mm256_loadu_ps(vr + 8 * v);
      TF_IN_REGISTER(vv);
      for (int i = 0; i < nr; ++i) o[i][v] = _mm256_fmadd_ps(p[i], vv, o[i][v]);
    }
  }
  for (int i = 0; i < nr; ++i)
    for (int v = 0; v < nv; ++v) _mm256_storeu_ps(orow[i] + d0 + 8 * v, o[i][v]);
}

// A row of D values as fp32 (D % 16 == 0): bf16 as [8 even dims, 8 odd dims] per 16, fp32 as is.
TF_INLINE void widen(const at::BFloat16* src, float* dst, int64_t D) {
  for (int64_t d = 0; d < D; d += 16) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + d));
    _mm256_storeu_ps(dst + d, bf16_even(u));
    _mm256_storeu_ps(dst + d + 8, bf16_odd(u));
  }
}
TF_INLINE void widen(const float* src, float* dst, int64_t D) { std::memcpy(dst, src, D * sizeof(float)); }
// The dim that lane i of a widened row holds.
template <typename scalar_t>
inline int64_t widened_dim(int64_t i) {
  if constexpr (std::is_same<scalar_t, float>::value) return i;
  else return 16 * (i / 16) + 2 * (i % 8) + (i % 16) / 8;
}

template <typename scalar_t>
void run_item_avx2(const Shape& sh, const scalar_t* q, const scalar_t* k, const scalar_t* v, int64_t b, int64_t h,
                   int64_t r0, int64_t R, int64_t c0, int64_t c1, float* m, float* l, float* acc) {
  const int64_t D = sh.D, N = c1 - c0, NP = (N + 7) / 8 * 8, RV = (R + 7) / 8, LR = 8 * RV;
  thread_local std::vector<float> buf;
  float* Qt = scratch(buf, D * LR + R * D + 8 * D + NB2 * D + NP * LR + R * D);
  float *Qr = Qt + D * LR, *Kf = Qr + R * D, *Vf = Kf + 8 * D, *St = Vf + NB2 * D, *O = St + NP * LR;
  // The scores' rows: with the keys in the lanes (score_keys: RA rows, then R - RA), or RL row
  // vectors in the lanes (score_tile)
  const bool keys = keys_in_lanes(R);
  const int64_t RA = keys && R > KEYS_ROWS ? R / 2 : R, RL = keys ? 0 : RV;
  // Qr [R, D]: the widened query rows; Qt [D, LR]: the same rows in the lanes (score_tile's; zero past R)
  if (RL) std::fill(Qt, Qt + D * LR, 0.f);
  for (int64_t r = 0; r < R; ++r) {
    const int64_t g = (r0 + r) / sh.T, t = (r0 + r) % sh.T;
    widen(q + b * sh.qsb + (h * sh.G + g) * sh.qsh + t * sh.qst, Qr + r * D, D);
    if (RL)
      for (int64_t i = 0; i < D; ++i) Qt[i * LR + r] = Qr[r * D + i];
  }
  const __m256 c = _mm256_set1_ps(sh.c);
  // scores, 8 keys at a time (past c1: zero rows, masked below)
  for (int64_t n0 = c0; n0 < c1; n0 += 8) {
    const int64_t nk = std::min<int64_t>(8, c1 - n0);
    float* st = St + (n0 - c0) * LR;
    for (int64_t j = 0; j < nk; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(k + (n0 + j + 64) * sh.kss), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(k + (n0 + j + 64) * sh.kss + D) - 1, _MM_HINT_T0);
    }
    if (keys) {   // rows [0, RA), then [RA, R) (whose lanes overwrite the first call's zeros)
      const scalar_t* kn = k + n0 * sh.kss;
      score_keys_rows(RA, 0, Qr, D, kn, sh.kss, nk, st, LR, c);
      if (RA < R) score_keys_rows(R - RA, RA, Qr, D, kn, sh.kss, nk, st, LR, c);
      continue;
    }
    for (int64_t j = 0; j < 8; ++j) {
      if (j < nk) widen(k + (n0 + j) * sh.kss, Kf + j * D, D);
      else std::fill(Kf + j * D, Kf + (j + 1) * D, 0.f);
    }
    int64_t v0 = 0;
    for (; v0 + 3 <= RL; v0 += 3)
      for (int j = 0; j < 8; j += 4) score_tile<3, 4>(Qt + 8 * v0, LR, D, Kf + j * D, st + j * LR + 8 * v0, c);
    if (RL - v0 == 2)
      for (int j = 0; j < 8; j += 4) score_tile<2, 4>(Qt + 8 * v0, LR, D, Kf + j * D, st + j * LR + 8 * v0, c);
    else if (RL - v0 == 1) score_tile<1, 8>(Qt + 8 * v0, LR, D, Kf, st + 8 * v0, c);
  }
  // keys a row may not see: past c1, and past its limit S - T + t (bottom-right)
  for (int64_t n = std::max(c0, std::min(c1, sh.S - sh.T + 1)); n < c0 + NP; ++n) {
    for (int64_t r = 0; r < R; ++r)
      if (n >= c1 || n > sh.S - sh.T + (r0 + r) % sh.T) St[(n - c0) * LR + r] = NEG_INF;
  }
  // softmax per lane: the item's max, p = 2^(s - m) in place, l (rows that see no key: m = -inf, l = 0)
  for (int64_t i = 0; i < RV; ++i) {
    __m256 mx = _mm256_set1_ps(NEG_INF);
    for (int64_t n = 0; n < N; ++n) mx = _mm256_max_ps(mx, _mm256_loadu_ps(St + n * LR + 8 * i));
    const __m256 none = _mm256_cmp_ps(mx, _mm256_set1_ps(NEG_INF), _CMP_EQ_OQ);
    const __m256 mv = _mm256_andnot_ps(none, mx);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t n = 0; n < N; ++n) {
      const __m256 p = exp2_avx2(_mm256_sub_ps(_mm256_loadu_ps(St + n * LR + 8 * i), mv));
      _mm256_storeu_ps(St + n * LR + 8 * i, p);
      sum = _mm256_add_ps(sum, p);
    }
    alignas(32) float mm[8], ll[8];
    _mm256_store_ps(mm, mx), _mm256_store_ps(ll, sum);
    for (int64_t r = 8 * i; r < std::min<int64_t>(R, 8 * i + 8); ++r) m[r] = mm[r - 8 * i], l[r] = ll[r - 8 * i];
  }
  // P.V, a block of NB2 keys at a time
  std::fill(O, O + R * D, 0.f);
  thread_local std::vector<int64_t> live;
  live.clear();
  for (int64_t r = 0; r < R; ++r)
    if (m[r] != NEG_INF) live.push_back(r);
  for (int64_t n0 = c0; n0 < c1; n0 += NB2) {
    const int64_t nk = std::min<int64_t>(NB2, c1 - n0);
    for (int64_t j = 0; j < nk; ++j) {
      _mm_prefetch(reinterpret_cast<const char*>(v + (n0 + j + 64) * sh.vss), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(v + (n0 + j + 64) * sh.vss + D) - 1, _MM_HINT_T0);
      widen(v + (n0 + j) * sh.vss, Vf + j * D, D);
    }
    for (size_t i0 = 0; i0 < live.size(); i0 += PR) {   // the rows that see a key here, PR at a time
      const int nr = (int)std::min<size_t>(PR, live.size() - i0);
      const float* prow[PR];
      float* orow[PR];
      for (int i = 0; i < nr; ++i) prow[i] = St + (n0 - c0) * LR + live[i0 + i], orow[i] = O + live[i0 + i] * D;
      for (int64_t d0 = 0; d0 < D; d0 += 32) {
        const bool whole = D - d0 >= 32;   // 4 vectors, else 2 (D % 16 == 0)
        if (nr == PR) whole ? pv_rows<PR, 4>(prow, LR, orow, Vf, nk, D, d0) : pv_rows<PR, 2>(prow, LR, orow, Vf, nk, D, d0);
        else if (nr == 2) whole ? pv_rows<2, 4>(prow, LR, orow, Vf, nk, D, d0) : pv_rows<2, 2>(prow, LR, orow, Vf, nk, D, d0);
        else whole ? pv_rows<1, 4>(prow, LR, orow, Vf, nk, D, d0) : pv_rows<1, 2>(prow, LR, orow, Vf, nk, D, d0);
      }
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t i = 0; i < D; ++i) acc[r * D + widened_dim<scalar_t>(i)] = O[r * D + i];
}
#endif

bool has_avx2() { return TF_AVX2; }

bool dot_default() {
  if (const char* env = std::getenv("TRIFORCE_DOT_BF16")) return std::strcmp(env, "0") != 0;
  // Zen 4/5: vdpbf16ps at full rate; Intel with AMX: the products on tiles; Intel without: fma
  return TF_AVX512 && (cpu_is_amd() || amx_usable());
}

}  // namespace

// q [B, H, T, D], k/v [B, Hkv, S, D] (stride 1 in D) -> out [B, T, H, D], dtype of q.
// dot_bf16: bf16 products on vdpbf16ps (true) or widened to fp32 for vfmadd (false); None
// picks per CPU (dot_default).
at::Tensor attend(at::Tensor q, at::Tensor k, at::Tensor v, double scale, std::optional<bool> dot_bf16,
                  std::optional<at::Tensor> into) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attend: q, k, v must be 4-D, got ", q.sizes(), k.sizes(), v.sizes());
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && k.scalar_type() == v.scalar_type(), "attend: dtypes differ");
  TORCH_CHECK(k.sizes() == v.sizes(), "attend: k ", k.sizes(), " and v ", v.sizes(), " differ");
  if (q.stride(3) != 1) q = q.contiguous();
  if (k.stride(3) != 1) k = k.contiguous();
  if (v.stride(3) != 1) v = v.contiguous();
  Shape sh;
  sh.B = q.size(0), sh.H = q.size(1), sh.T = q.size(2), sh.D = q.size(3);
  sh.Hkv = k.size(1), sh.S = k.size(2);
  TORCH_CHECK(k.size(0) == sh.B && k.size(3) == sh.D && sh.H % sh.Hkv == 0 && sh.S >= sh.T && sh.T >= 1,
              "attend: shapes q ", q.sizes(), " k ", k.sizes(), " do not fit");
  sh.G = sh.H / sh.Hkv, sh.R = sh.G * sh.T;
  sh.qsb = q.stride(0), sh.qsh = q.stride(1), sh.qst = q.stride(2);
  sh.ksb = k.stride(0), sh.ksh = k.stride(1), sh.kss = k.stride(2);
  sh.vsb = v.stride(0), sh.vsh = v.stride(1), sh.vss = v.stride(2);
  sh.c = (float)(scale * LOG2E);
  // Decode/verify (R <= ROWS_SPLIT): one row block, keys split in chunks so that both cores
  // work even for one kv head. Prefill (more rows): row blocks of PREFILL_ROWS give the
  // parallelism; keys are one chunk, and each row block stops at its last visible key.
  const bool prefill = sh.R > ROWS_SPLIT;
  sh.chunks = prefill ? 1 : chunk_of(sh.S - 1) + 1;
#if TF_AVX512
  const bool fast = sh.D % 32 == 0 && sh.D <= 512 && q.scalar_type() != at::kDouble;
#else
  const bool fast = false;
#endif
  // AVX2 builds: decode and verify items of bf16 or fp32 (prefill takes torch's kernel: runtime/attention.py)
  const bool avx2 = TF_AVX2 && !prefill && sh.D % 16 == 0 && sh.D <= 256 &&
                    (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kFloat);
  (void)avx2;
  static const bool dot_auto = dot_default();
  const bool dot = fast && dot_bf16.value_or(dot_auto) && q.scalar_type() == at::kBFloat16;
  const bool amx = dot && amx_usable();   // the bf16 products on AMX tiles where there are some
  // AMX decode/verify: items of up to 16 rows hold one row tile (HELD = 1), of 17-32 rows two
  // (HELD = 2: one pass over K for both: 1.15-1.18x against two one-tile items in round 15); more rows (R > 32, T > 10 for G = 3) are split in
  // row blocks of equal height <= 32, a chunk's blocks consecutive items, so the later ones read K
  // and V from L2.
  const bool held = amx && sh.D == 64 && !prefill;   // (a prefill's last rows: a plain AMX item)
  const bool split_rows = !prefill && held && sh.R > HELD_ROWS;
  const int64_t held_blocks = (sh.R + HELD_ROWS - 1) / HELD_ROWS;
  const int64_t row_block = prefill ? PREFILL_ROWS : split_rows ? (sh.R + held_blocks - 1) / held_blocks : sh.R;
  const int64_t row_blocks = (sh.R + row_block - 1) / row_block;
  const auto dim = lane_dims(!fast ? Lanes::identity : held ? Lanes::evenodd : dot ? Lanes::vp
                             : q.scalar_type() == at::kBFloat16 ? Lanes::evenodd : Lanes::identity, sh.D);

  // into: the output's storage (DecoderPlan's workspace: no allocation in a pass), any strides but unit in D
  at::Tensor out;
  if (into.has_value()) {
    out = *into;
    TORCH_CHECK(out.dim() == 4 && out.size(0) == sh.B && out.size(1) == sh.T && out.size(2) == sh.H && out.size(3) == sh.D &&
                out.stride(3) == 1 && out.scalar_type() == q.scalar_type(),
                "attend: out must be [", sh.B, ", ", sh.T, ", ", sh.H, ", ", sh.D, "] of q's dtype with unit stride in D, got ",
                out.sizes(), " ", out.scalar_type());
  } else {
    out = at::empty({sh.B, sh.T, sh.H, sh.D}, q.options());
  }
  sh.osb = out.stride(0), sh.ost = out.stride(1), sh.osh = out.stride(2);
  const int64_t parts = sh.B * sh.Hkv * sh.chunks, items = parts * row_blocks;
  // Partials (m, l, acc [R, D]) of each (b, kv head, chunk) when there are chunks to merge.
  thread_local std::vector<float> partials;
  float* pm = sh.chunks > 1 ? scratch(partials, parts * sh.R * (sh.D + 2)) : nullptr;
  float *pl = pm + parts * sh.R, *pacc = pm + 2 * parts * sh.R;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "attend_cpu", [&] {
    const scalar_t* qp = q.data_ptr<scalar_t>();
    const scalar_t* kp = k.data_ptr<scalar_t>();
    const scalar_t* vp = v.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    auto out_row = [&](int64_t b, int64_t h, int64_t r) {  // row r = g*T + t of kv head h
      return op + b * sh.osb + (r % sh.T) * sh.ost + (h * sh.G + r / sh.T) * sh.osh;
    };
    const int threads = (int)std::min<int64_t>(items, at::get_num_threads());
    Runs runs(items, threads);
    _Pragma("omp parallel num_threads(threads)") {
      const int me = omp_get_thread_num();
      thread_local std::vector<float> own;  // m, l, acc of an item written out directly
      for (int64_t it; (it = runs.next(me)) >= 0;) {
        const int64_t rbi = it % row_blocks, pi = it / row_blocks;  // row block, (b, h, chunk)
        const int64_t c = pi % sh.chunks, bh = pi / sh.chunks, h = bh % sh.Hkv, b = bh / sh.Hkv;
        const int64_t r0 = rbi * row_block, nr = std::min(row_block, sh.R - r0);
        int64_t t_max = nr >= sh.T ? sh.T - 1 : 0;  // latest token among rows r0 .. r0+nr
        for (int64_t r = r0; r < r0 + nr && t_max < sh.T - 1; ++r) t_max = std::max(t_max, r % sh.T);
        const int64_t c0 = chunk_begin(c);
        const int64_t c1 = std::min({sh.S, prefill ? sh.S : chunk_begin(c + 1), sh.S - sh.T + t_max + 1});
        float *m, *l, *acc;
        if (pm) {
          m = pm + pi * sh.R + r0, l = pl + pi * sh.R + r0, acc = pacc + (pi * sh.R + r0) * sh.D;
        } else {
          m = scratch(own, nr * (sh.D + 2)), l = m + nr, acc = l + nr;
        }
        const scalar_t* kb = kp + b * sh.ksb + h * sh.ksh;
        const scalar_t* vb = vp + b * sh.vsb + h * sh.vsh;
        bool done = false;
#if TF_AVX512
        if constexpr (!std::is_same<scalar_t, double>::value) {
          if (fast) {
            if constexpr (std::is_same<scalar_t, at::BFloat16>::value) {
              if (dot && !amx && nr <= FUSED_ROWS)
                run_item<scalar_t, true, true>(sh, qp, kb, vb, b, h, r0, nr, c0, c1, m, l, acc, false);
#if TF_AMX
              else if (held && nr <= 16)
                run_item<scalar_t, true, false, 1>(sh, qp, kb, vb, b, h, r0, nr, c0, c1, m, l, acc, true);
              else if (held && nr <= HELD_ROWS)
                run_item<scalar_t, true, false, 2>(sh, qp, kb, vb, b, h, r0, nr, c0, c1, m, l, acc, true);
#endif
              else if (dot)
                run_item<scalar_t, true>(sh, qp, kb, vb, b, h, r0, nr, c0, c1, m, l, acc, amx);
              else
                run_item<scalar_t, false>(sh, qp, kb, vb, b, h, r0, nr, c0, c1, m, l, acc, false);
            } else {
              run_item<scalar_t, false>(sh, qp, kb, vb, b, h, r0, nr, c0, c1, m, l, acc, false);
            }
            done = true;
          }
        }
#endif
#if TF_AVX2
        if constexpr (std::is_same<scalar_t, at::BFloat16>::value || std::is_same<scalar_t, float>::value) {
          if (avx2) {
            run_item_avx2<scalar_t>(sh, qp, kb, vb, b, h, r0, nr, c0, c1, m, l, acc);
            done = true;
          }
        }
#endif
        if (!done) run_item_scalar<scalar_t>(sh, qp, kb, vb, b, h, r0, nr, c0, c1, m, l, acc);
        if (!pm)  // one part per row: normalize and write out
          for (int64_t r = 0; r < nr; ++r) write_row(out_row(b, h, r0 + r), acc + r * sh.D, l[r], dim.data(), sh.D);
      }
      if (pm) {
        // Merge the chunks of each row by log-sum-exp, in chunk order (bitwise reproducible).
        _Pragma("omp barrier")
        thread_local std::vector<float> row;
        float* o = scratch(row, sh.D);
        _Pragma("omp for schedule(static)")
        for (int64_t x = 0; x < sh.B * sh.Hkv * sh.R; ++x) {
          const int64_t r = x % sh.R, bh = x / sh.R;
          float M = NEG_INF;
          for (int64_t c = 0; c < sh.chunks; ++c) M = std::max(M, pm[(bh * sh.chunks + c) * sh.R + r]);
          float L = 0.f;
          std::fill(o, o + sh.D, 0.f);
          for (int64_t c = 0; c < sh.chunks; ++c) {
            const int64_t p = (bh * sh.chunks + c) * sh.R + r;
            if (pm[p] == NEG_INF) continue;  // the row sees no key of this chunk
            const float w = std::exp2(pm[p] - M);
            L += w * pl[p];
            const float* a = pacc + p * sh.D;
            for (int64_t d = 0; d < sh.D; ++d) o[d] += w * a[d];
          }
          write_row(out_row(bh / sh.Hkv, bh % sh.Hkv, r), o, L, dim.data(), sh.D);
        }
      }
    }
  });
  return out;
}

bool has_avx512_bf16() { return TF_AVX512; }

bool dot_bf16_default() { return TF_AVX512 && dot_default(); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("attend", &attend, "CPU attention for decode/verify: q [B,H,T,D], k/v [B,Hkv,S,D] -> [B,T,H,D]",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("scale"), py::arg("dot_bf16") = py::none(), py::arg("out") = py::none());
  m.attr("decode_rows") = ROWS_SPLIT;   // query rows (G*T) up to which calls are decode/verify items
  m.def("has_avx2", &has_avx2, "whether decode/verify items (bf16, fp32) have the AVX2 + FMA path");
  m.def("has_avx512_bf16", &has_avx512_bf16, "whether the fast (avx512_bf16) kernels were compiled in");
  m.attr("attend_ptr") = py::capsule(reinterpret_cast<void*>(&attend), "triforce.attend");  // layer_cpu's DecoderPlan
  m.def("amx", &amx_usable, "whether the bf16 products (dot_bf16) run on AMX tiles here");
  m.def("dot_bf16_default", &dot_bf16_default, "whether bf16 runs on vdpbf16ps when dot_bf16 is None (per CPU)");
}
