// Streaming + compute overlap on this CPU: each thread reads its half of a buffer (32 bytes a step)
// and does K FMAs per step on 8 independent accumulators (throughput-bound compute).
// Prints ms and GB/s for the buffer from DRAM (512 MB) and from L1 (16 KB, repeated), per K.
#include <immintrin.h>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
template <int K>
float run(const float* p, size_t n, int reps, int pf) {
  float total = 0;
#pragma omp parallel reduction(+ : total)
  {
    int t = omp_get_thread_num(), T = omp_get_num_threads();
    size_t lo = n / T * t, hi = n / T * (t + 1);
    __m256 a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm256_set1_ps(0.f);
    const __m256 m = _mm256_set1_ps(1.0001f);
    for (int r = 0; r < reps; ++r)
      for (size_t i = lo; i < hi; i += 8) {
        if (pf && (i % 16) == 0) _mm_prefetch((const char*)(p + i + pf), _MM_HINT_T0);
        __m256 x = _mm256_loadu_ps(p + i);
#pragma GCC unroll 32
        for (int k = 0; k < K; ++k) a[k % 8] = _mm256_fmadd_ps(x, m, a[k % 8]);
        if (K == 0) a[0] = _mm256_add_ps(a[0], x);
      }
    __m256 s = a[0];
    for (int i = 1; i < 8; ++i) s = _mm256_add_ps(s, a[i]);
    alignas(32) float o[8]; _mm256_store_ps(o, s);
    for (int i = 0; i < 8; ++i) total += o[i];
  }
  return total;
}
template <int K> void measure(const float* big, size_t nbig, const float* small, size_t nsmall, int pf) {
  auto t0 = std::chrono::steady_clock::now();
  volatile float s = run<K>(big, nbig, 1, pf);
  auto t1 = std::chrono::steady_clock::now();
  int reps = (int)(nbig / nsmall);
  s = run<K>(small, nsmall, reps, 0);
  auto t2 = std::chrono::steady_clock::now();
  double dm = std::chrono::duration<double>(t1 - t0).count() * 1e3, dc = std::chrono::duration<double>(t2 - t1).count() * 1e3;
  printf("K=%2d FMAs per 32 B: DRAM %7.1f ms (%5.1f GB/s)  L1 %7.1f ms  sum %7.1f  max %7.1f\n", K, dm, nbig * 4 / dm / 1e6, dc, dm > 0 ? (dc + 0) : 0, dc);
  (void)s;
}
int main(int argc, char** argv) {
  int pf = argc > 1 ? atoi(argv[1]) : 0;
  size_t nbig = (size_t)512 << 20 >> 2, nsmall = 4096 * 2;   // 512 MB; 2 x 16 KB
  float* big = (float*)aligned_alloc(64, nbig * 4);
  for (size_t i = 0; i < nbig; ++i) big[i] = 1e-6f * (i % 1000);
  std::vector<float> small(nsmall, 1e-6f);
  for (int rep = 0; rep < 2; ++rep) {
    measure<0>(big, nbig, small.data(), nsmall, pf);
    measure<2>(big, nbig, small.data(), nsmall, pf);
    measure<4>(big, nbig, small.data(), nsmall, pf);
    measure<8>(big, nbig, small.data(), nsmall, pf);
    measure<12>(big, nbig, small.data(), nsmall, pf);
    measure<16>(big, nbig, small.data(), nsmall, pf);
    measure<24>(big, nbig, small.data(), nsmall, pf);
    measure<32>(big, nbig, small.data(), nsmall, pf);
  }
}
