// The AVX-512 feature guard and vector helpers shared by the attention and layer kernels.
// TF_AVX512 is 1 where the build targets avx512f, avx512bw, avx512dq and avx512_bf16 (-march=native
// on such a CPU: every one with avx512_bf16 so far has dq), else 0 (the portable build): the kernels then compile their scalar paths only.
// (quant_cpu.cpp's TF_VNNI adds avx512_vnni to it.)
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512BF16__)
#define TF_AVX512 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define TF_AVX512 0
#endif

// TF_AVX2 is 1 where the build targets AVX2 and FMA but not the AVX-512 kernels (Zen 2/3, Intel
// client CPUs): the packed linear (layer_cpu.cpp), the decode/verify attention items
// (attention_cpu.cpp) and the int8/int4 linears (quant_cpu.cpp) then have vector paths; the rest
// (prefill attention, the glue ops, sampling) stays scalar.
#if !TF_AVX512 && defined(__AVX2__) && defined(__FMA__)
#define TF_AVX2 1
#include <immintrin.h>
#else
#define TF_AVX2 0
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>

// Small helpers of the hot loops: GCC's inliner gives up on some of them once a kernel file grows
// (adding pv_bf16_fused left transpose16 and row_max out of line: K's 16 registers went through
// memory, attention 3-8% slower at T = 1 and in prefill), so they say so.
#define TF_INLINE inline __attribute__((always_inline))

#if TF_AVX2
// 8 pairs of bf16, one per 32-bit lane -> each pair's first (low half shifted up) or second (high
// half masked) as fp32, both exact: how the AVX2 paths widen bf16 (no bf16 instructions there).
TF_INLINE __m256 bf16_even(__m256i pairs) { return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)); }
TF_INLINE __m256 bf16_odd(__m256i pairs) {
  return _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
// The max and the sum of 8 lanes, by a fixed tree (halves, then pairs, then the last two).
TF_INLINE float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
TF_INLINE float hsum8(__m256 v) {
  __m128 m = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_add_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_add_ss(m, _mm_movehdup_ps(m)));
}
#endif

// AMX (Intel Sapphire Rapids and later): tiles of 16 rows x 64 bytes, tdpbf16ps multiplies a
// 16 x 32 bf16 tile by a 32 x 16 one (pairs interleaved, "VNNI" layout) into 16 x 16 fp32.
// TF_AMX is 1 where the build targets amx-tile and amx-bf16; amx_usable() is whether this
// process may use them (Linux hands out the tile state on request; TRIFORCE_AMX=0 says no).
#if TF_AVX512 && defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__linux__)
#define TF_AMX 1
#include <sys/syscall.h>
#include <unistd.h>
#else
#define TF_AMX 0
#endif

inline bool amx_usable() {
#if TF_AMX
  static const bool ok = [] {
    const char* env = std::getenv("TRIFORCE_AMX");
    if (env && std::strcmp(env, "0") == 0) return false;
    constexpr long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
  }();
  return ok;
#else
  return false;
#endif
}

#if TF_AMX
// Tiles of 64 bytes a row: tmm0 .. tmm(left - 1) (results and left operands) of `rows` rows
// (1..16), the others (right operands) of 16. Loaded before each piece of tile work (a thread
// may have run oneDNN's tiles, with their own shapes, in between) and released after.
inline void amx_begin(int rows, int left = 5) {
  struct alignas(64) Config { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; };
  Config c{};
  c.palette = 1;
  for (int i = 0; i < 8; ++i) c.colsb[i] = 64, c.rows[i] = i < left ? rows : 16;
  _tile_loadconfig(&c);
}
inline void amx_end() { _tile_release(); }
#endif

// Whether this is an AMD CPU, and its family (0x19 Zen 3/4, 0x1A Zen 5): the kernels' tuning
// differs by CPU (see the callers).
inline bool cpu_is_amd() {
#if TF_AVX512 && (defined(__GNUC__) || defined(__clang__))
  static const bool amd = (__builtin_cpu_init(), __builtin_cpu_is("amd"));
  return amd;
#else
  return false;
#endif
}
inline unsigned cpu_family() {
#if TF_AVX512
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  const unsigned base = (a >> 8) & 0xF;
  return base == 0xF ? base + ((a >> 20) & 0xFF) : base;
#else
  return 0;
#endif
}

// 2^f for |f| <= 0.5: the degree-5 minimax polynomial (highest power first), shared by exp2_ps
// and exp2_ps8.
constexpr float EXP2_POLY[6] = {1.3276379e-3f, 9.6755102e-3f, 5.5507131e-2f, 2.4022120e-1f, 6.9314694e-1f, 1.0000001f};
// e^r for |r| <= 0.35: its degree-7 Taylor polynomial (highest power first), and ln 2 in two parts
// (Cody-Waite), shared by exp_ps and exp_ps8.
constexpr float EXP_TAYLOR[8] = {1.f / 5040, 1.f / 720, 1.f / 120, 1.f / 24, 1.f / 6, 0.5f, 1.f, 1.f};
constexpr float LN2_HI = 0.693359375f, LN2_LO = -2.12194440e-4f, EXP_LOG2E = 1.44269504088896341f;

#if TF_AVX2
// 8 bf16 -> fp32 (exact: bf16 is fp32's top half).
TF_INLINE __m256 bf16x8(const void* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(static_cast<const __m128i*>(p))), 16));
}

// exp2_ps and exp_ps (below) on 8 lanes, for AVX2. With no scalef, 2^n is built in the exponent
// bits, so x is clamped to where 2^n stays a normal float: 2^x to [2^-126, 2^127], e^x to [e^-87, e^88].
// p * 2^n for integral n in [-126, 127]:
TF_INLINE __m256 times_pow2(__m256 p, __m256 n) {
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
inline __m256 exp2_ps8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-126.f)), _mm256_set1_ps(127.f));
  const __m256 n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), f = _mm256_sub_ps(x, n);
  __m256 p = _mm256_set1_ps(EXP2_POLY[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(EXP2_POLY[i]));
  return times_pow2(p, n);
}
inline __m256 exp_ps8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.f)), _mm256_set1_ps(88.f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x));
  __m256 p = _mm256_set1_ps(EXP_TAYLOR[0]);
  for (int i = 1; i < 8; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_TAYLOR[i]));
  return times_pow2(p, n);
}
#endif

#if TF_AVX512
// 2^x, 16 lanes: 2^n * p(f), n = round(x), |f| <= 0.5, p the degree-5 minimax polynomial of 2^f
// (relative error 2.4e-7 in fp32, a few ulps). Lanes below -150 give 0 (so -inf gives 0); lanes
// above 128 overflow to +inf.
inline __m512 exp2_ps(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-150.f));  // -inf -> 0 after scalef
  __m512 n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 f = _mm512_sub_ps(x, n);
  __m512 p = _mm512_set1_ps(EXP2_POLY[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(EXP2_POLY[i]));
  return _mm512_scalef_ps(p, n);
}

// e^x, 16 lanes, to about an ulp (as std::exp, for fp32 outputs): n = round(x log2 e), r = x - n ln 2
// with ln 2 in two parts (Cody-Waite: |r| <= 0.35, nearly exact), e^r by its degree-7 Taylor
// polynomial (truncation 6e-9), times 2^n. x is clamped to [-104, 89]: 0 and +inf at the ends.
inline __m512 exp_ps(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.f)), _mm512_set1_ps(89.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x));
  __m512 p = _mm512_set1_ps(EXP_TAYLOR[0]);
  for (int i = 1; i < 8; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_TAYLOR[i]));
  return _mm512_scalef_ps(p, n);
}
#endif
