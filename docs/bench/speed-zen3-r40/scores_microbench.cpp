// scores microbench: R query rows (widened, fp32) x N bf16 keys (D=64), cycles per key
#include <immintrin.h>
#include <x86intrin.h>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#define TF_INLINE inline __attribute__((always_inline))
constexpr int D = 64;
TF_INLINE __m256 bf16_even(__m256i x) { return _mm256_castsi256_ps(_mm256_slli_epi32(x, 16)); }
TF_INLINE __m256 bf16_odd(__m256i x) { return _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32((int)0xFFFF0000))); }
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
// A: current score_keys (transposes in registers), 8 keys
template <int nr>
TF_INLINE void score_keys(const float* Qr, const uint16_t* k, int64_t kss, float* St, int64_t LR, __m256 c) {
  __m256 a[nr];
  for (int i = 0; i < nr; ++i) a[i] = _mm256_setzero_ps();
  for (int64_t d0 = 0; d0 < D; d0 += 16) {
    __m256 x[8];
    for (int j = 0; j < 8; ++j) x[j] = _mm256_loadu_ps(reinterpret_cast<const float*>(k + j * kss + d0));
    transpose8(x);
    for (int p = 0; p < 8; ++p) {
      const __m256 e = bf16_even(_mm256_castps_si256(x[p]));
      for (int i = 0; i < nr; ++i) a[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(Qr + i * D + d0 + p), e, a[i]);
    }
    for (int p = 0; p < 8; ++p) {
      const __m256 o = bf16_odd(_mm256_castps_si256(x[p]));
      for (int i = 0; i < nr; ++i) a[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(Qr + i * D + d0 + 8 + p), o, a[i]);
    }
  }
  __m256 t[8];
  for (int i = 0; i < 8; ++i) t[i] = i < nr ? _mm256_mul_ps(a[i], c) : _mm256_setzero_ps();
  transpose8(t);
  for (int j = 0; j < 8; ++j) _mm256_storeu_ps(St + LR * j, t[j]);
}
// Kt for 8 keys: Kt[i][8], i the widened dim
TF_INLINE void keys_t8(const uint16_t* k, int64_t kss, float* Kt) {
  for (int64_t d0 = 0; d0 < D; d0 += 16) {
    __m256 x[8];
    for (int j = 0; j < 8; ++j) x[j] = _mm256_loadu_ps(reinterpret_cast<const float*>(k + j * kss + d0));
    transpose8(x);
    for (int p = 0; p < 8; ++p) {
      _mm256_store_ps(Kt + (d0 + p) * 8, bf16_even(_mm256_castps_si256(x[p])));
      _mm256_store_ps(Kt + (d0 + 8 + p) * 8, bf16_odd(_mm256_castps_si256(x[p])));
    }
  }
}
#define TF_IN_REGISTER(x) asm("" : "+x"(x))
// C: nr rows x 8 keys of Kt, nr chains; q rows widened [nr][D]
template <int nr>
TF_INLINE void score_kt8(const float* Qr, const float* Kt, float* St, int64_t LR, __m256 c) {
  __m256 a[nr];
  for (int i = 0; i < nr; ++i) a[i] = _mm256_setzero_ps();
#pragma GCC unroll 2
  for (int64_t d = 0; d < D; ++d) {
    __m256 kv = _mm256_load_ps(Kt + d * 8);
    TF_IN_REGISTER(kv);
    for (int i = 0; i < nr; ++i) a[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(Qr + i * D + d), kv, a[i]);
  }
  // out: rows in lanes: St[j*LR + r]: transpose 8 rows at a time
  for (int i0 = 0; i0 < nr; i0 += 8) {
    __m256 t[8];
    for (int i = 0; i < 8; ++i) t[i] = i0 + i < nr ? _mm256_mul_ps(a[i0 + i], c) : _mm256_setzero_ps();
    transpose8(t);
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(St + LR * j + i0, t[j]);
  }
}
// E: Qt in rows-dim layout with q pre-broadcast? no: nr rows x 16 keys (two Kt8 blocks), 2*nr chains
template <int nr>
TF_INLINE void score_kt16(const float* Qr, const float* Kt0, const float* Kt1, float* St, int64_t LR, __m256 c) {
  __m256 a0[nr], a1[nr];
  for (int i = 0; i < nr; ++i) a0[i] = _mm256_setzero_ps(), a1[i] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    __m256 k0 = _mm256_load_ps(Kt0 + d * 8), k1 = _mm256_load_ps(Kt1 + d * 8);
    TF_IN_REGISTER(k0); TF_IN_REGISTER(k1);
    for (int i = 0; i < nr; ++i) {
      const __m256 b = _mm256_broadcast_ss(Qr + i * D + d);
      a0[i] = _mm256_fmadd_ps(b, k0, a0[i]);
      a1[i] = _mm256_fmadd_ps(b, k1, a1[i]);
    }
  }
  for (int g = 0; g < 2; ++g) {
    __m256 t[8];
    for (int i = 0; i < 8; ++i) t[i] = i < nr ? _mm256_mul_ps(g ? a1[i] : a0[i], c) : _mm256_setzero_ps();
    transpose8(t);
    for (int j = 0; j < 8; ++j) _mm256_storeu_ps(St + LR * (8 * g + j), t[j]);
  }
}

// F: Kt for KB = 8*NKV keys (NKV groups of 8 stored one after another, each [D][8]); row tiles of
// NR rows x NKV key vectors (NR*NKV chains); raw sums into Sr[r][KB]; then St[n][LR] = Sr^T * c.
template <int nr, int nkv>
__attribute__((noinline)) void tile_kt(const float* Qr, const float* Kt, float* Sr) {   // Sr rows of 8*nkv floats
  __m256 a[nr][nkv];
  for (int i = 0; i < nr; ++i) for (int j = 0; j < nkv; ++j) a[i][j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < D; ++d) {
    __m256 b[nr];
    for (int i = 0; i < nr; ++i) { b[i] = _mm256_broadcast_ss(Qr + i * D + d); TF_IN_REGISTER(b[i]); }
    for (int j = 0; j < nkv; ++j) {
      const __m256 kv = _mm256_load_ps(Kt + j * 8 * D + d * 8);
      for (int i = 0; i < nr; ++i) a[i][j] = _mm256_fmadd_ps(b[i], kv, a[i][j]);
    }
  }
  for (int i = 0; i < nr; ++i) for (int j = 0; j < nkv; ++j) _mm256_store_ps(Sr + i * 8 * nkv + 8 * j, a[i][j]);
}
template <int nkv>
TF_INLINE void scores_F(int R, const float* Qr, const uint16_t* k, float* Kt, float* Sr, float* St, int64_t LR, __m256 c) {
  for (int j = 0; j < nkv; ++j) keys_t8(k + 8 * j * D, D, Kt + j * 8 * D);
  int r = 0;
  constexpr int NR = nkv >= 4 ? 2 : 3;
  for (; r + NR <= R; r += NR) tile_kt<NR, nkv>(Qr + r * D, Kt, Sr + r * 8 * nkv);
  if (R - r == 2) tile_kt<2, nkv>(Qr + r * D, Kt, Sr + r * 8 * nkv);
  else if (R - r == 1) tile_kt<1, nkv>(Qr + r * D, Kt, Sr + r * 8 * nkv);
  for (int r0 = 0; r0 < R; r0 += 8)
    for (int j = 0; j < nkv; ++j) {
      __m256 t[8];
      for (int i = 0; i < 8; ++i) t[i] = r0 + i < R ? _mm256_mul_ps(_mm256_load_ps(Sr + (r0 + i) * 8 * nkv + 8 * j), c) : _mm256_setzero_ps();
      transpose8(t);
      for (int n = 0; n < 8; ++n) _mm256_storeu_ps(St + LR * (8 * j + n) + r0, t[n]);
    }
}
int main2(int R, int N) {
  const int reps = 200; const int64_t LR = 16;
  std::vector<uint16_t> K(N * D);
  for (auto& x : K) x = 0x3f80 + (rand() & 0x7f) - 64;
  float* Qr = (float*)aligned_alloc(64, 16 * D * 4);
  for (int i = 0; i < 16 * D; ++i) Qr[i] = (rand() % 100) / 100.f;
  float* St = (float*)aligned_alloc(64, (N + 64) * LR * 4);
  float* Kt = (float*)aligned_alloc(64, 32 * D * 4);
  float* Sr = (float*)aligned_alloc(64, 16 * 32 * 4);
  const __m256 c = _mm256_set1_ps(0.125f);
  auto timeit = [&](const char* name, auto f) {
    uint64_t best = ~0ull;
    for (int t = 0; t < 5; ++t) { uint64_t t0 = __rdtsc(); for (int r = 0; r < reps; ++r) f(); best = std::min<uint64_t>(best, __rdtsc() - t0); }
    double s = 0; for (int i = 0; i < N * LR; ++i) s += St[i];
    printf("R=%d %-28s %6.1f cycles/key  (chk %.3f)\n", R, name, (double)best / reps / N, s);
  };
  for (int rep = 0; rep < 3; ++rep) {
  timeit("A keys in regs", [&] { const int RA = R > 6 ? R / 2 : R;
    for (int n0 = 0; n0 < N; n0 += 8) {
      switch (RA) { case 3: score_keys<3>(Qr, K.data() + n0 * D, D, St + n0 * LR, LR, c); break; case 4: score_keys<4>(Qr, K.data() + n0 * D, D, St + n0 * LR, LR, c); break; case 6: score_keys<6>(Qr, K.data() + n0 * D, D, St + n0 * LR, LR, c); break; }
      if (RA < R) switch (R - RA) { case 5: score_keys<5>(Qr + RA * D, K.data() + n0 * D, D, St + n0 * LR + RA, LR, c); break; case 6: score_keys<6>(Qr + RA * D, K.data() + n0 * D, D, St + n0 * LR + RA, LR, c); break; }
    } });
  timeit("G24 tiles only (no transp)", [&] { for (int n0 = 0; n0 + 24 <= N; n0 += 24) for (int r = 0; r < R; r += 3) { tile_kt<3, 3>(Qr + r * D, Kt, Sr + r * 24); St[n0*LR] = Sr[3]; } });
  timeit("F16 (2 kv, 3-row tiles)", [&] { for (int n0 = 0; n0 < N; n0 += 16) scores_F<2>(R, Qr, K.data() + n0 * D, Kt, Sr, St + n0 * LR, LR, c); });
  timeit("F24 (3 kv, 3-row tiles)", [&] { for (int n0 = 0; n0 + 24 <= N; n0 += 24) scores_F<3>(R, Qr, K.data() + n0 * D, Kt, Sr, St + n0 * LR, LR, c); });
  timeit("F32 (4 kv, 2-row tiles)", [&] { for (int n0 = 0; n0 < N; n0 += 32) scores_F<4>(R, Qr, K.data() + n0 * D, Kt, Sr, St + n0 * LR, LR, c); });
  }
  return 0;
}
int main(int argc, char** argv) {
  if (getenv("F")) return main2(atoi(argv[1]), atoi(argv[2]));
  const int R = argc > 1 ? atoi(argv[1]) : 9, N = argc > 2 ? atoi(argv[2]) : 2048, reps = 200;
  const int64_t LR = 16;
  std::vector<uint16_t> K(N * D);
  for (auto& x : K) x = 0x3f80 + (rand() & 0x7f) - 64;
  float* Qr = (float*)aligned_alloc(64, 16 * D * 4);
  for (int i = 0; i < 16 * D; ++i) Qr[i] = (rand() % 100) / 100.f;
  float* St = (float*)aligned_alloc(64, N * LR * 4);
  float* Kt = (float*)aligned_alloc(64, 16 * D * 4);
  const __m256 c = _mm256_set1_ps(0.125f);
  auto timeit = [&](const char* name, auto f) {
    uint64_t best = ~0ull;
    for (int t = 0; t < 5; ++t) {
      uint64_t t0 = __rdtsc();
      for (int r = 0; r < reps; ++r) f();
      best = std::min<uint64_t>(best, __rdtsc() - t0);
    }
    double s = 0; for (int i = 0; i < N * LR; ++i) s += St[i];
    printf("R=%d %-28s %6.1f cycles/key  (chk %.3f)\n", R, name, (double)best / reps / N, s);
  };
  const int RA = R > 6 ? R / 2 : R;
  auto sk = [&](int nr, const float* q, const uint16_t* k, float* st) {
    switch (nr) { case 1: score_keys<1>(q, k, D, st, LR, c); break; case 2: score_keys<2>(q, k, D, st, LR, c); break;
      case 3: score_keys<3>(q, k, D, st, LR, c); break; case 4: score_keys<4>(q, k, D, st, LR, c); break;
      case 5: score_keys<5>(q, k, D, st, LR, c); break; default: score_keys<6>(q, k, D, st, LR, c); }
  };
  timeit("A keys in regs (split)", [&] {
    for (int n0 = 0; n0 < N; n0 += 8) {
      sk(RA, Qr, K.data() + n0 * D, St + n0 * LR);
      if (RA < R) sk(R - RA, Qr + RA * D, K.data() + n0 * D, St + n0 * LR + RA);
    }
  });
  auto k8 = [&](const float* kt, float* st) {
    switch (R) { case 3: score_kt8<3>(Qr, kt, st, LR, c); break; case 6: score_kt8<6>(Qr, kt, st, LR, c); break;
      case 9: score_kt8<9>(Qr, kt, st, LR, c); break; case 12: score_kt8<12>(Qr, kt, st, LR, c); break; default: abort(); }
  };
  timeit("C Kt8 stored, R chains", [&] {
    for (int n0 = 0; n0 < N; n0 += 8) { keys_t8(K.data() + n0 * D, D, Kt); k8(Kt, St + n0 * LR); }
  });
  timeit("D Kt8 FMA only (no transp)", [&] {
    for (int n0 = 0; n0 < N; n0 += 8) k8(Kt, St + n0 * LR);
  });
  timeit("T transposes only", [&] {
    for (int n0 = 0; n0 < N; n0 += 8) { keys_t8(K.data() + n0 * D, D, Kt); St[n0 * LR] = Kt[5]; }
  });
  auto k16 = [&](int nr, const float* q, float* st) {
    switch (nr) { case 2: score_kt16<2>(q, Kt, Kt + 8 * D, st, LR, c); break; case 3: score_kt16<3>(q, Kt, Kt + 8 * D, st, LR, c); break;
      case 4: score_kt16<4>(q, Kt, Kt + 8 * D, st, LR, c); break; case 5: score_kt16<5>(q, Kt, Kt + 8 * D, st, LR, c); break;
      case 6: score_kt16<6>(q, Kt, Kt + 8 * D, st, LR, c); break; default: abort(); }
  };
  timeit("E Kt16 stored, 2x split", [&] {
    for (int n0 = 0; n0 < N; n0 += 16) {
      keys_t8(K.data() + n0 * D, D, Kt); keys_t8(K.data() + (n0 + 8) * D, D, Kt + 8 * D);
      k16(RA, Qr, St + n0 * LR);
      if (RA < R) k16(R - RA, Qr + RA * D, St + n0 * LR + RA);
    }
  });
}
