#include <immintrin.h>
#include <stdio.h>
#include <omp.h>
#include <x86intrin.h>
int main() {
  for (int th = 1; th <= 2; ++th) {
    double t0 = omp_get_wtime(); unsigned long long c0 = __rdtsc();
    float res = 0;
    #pragma omp parallel num_threads(th) reduction(+:res)
    {
      __m256 a[10]; for (int i = 0; i < 10; ++i) a[i] = _mm256_set1_ps(i * 0.001f);
      __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(0.0001f);
      for (long it = 0; it < 200000000L; ++it) {
        for (int i = 0; i < 10; ++i) a[i] = _mm256_fmadd_ps(a[i], x, y);
      }
      __m256 s = a[0]; for (int i = 1; i < 10; ++i) s = _mm256_add_ps(s, a[i]);
      float f[8]; _mm256_storeu_ps(f, s); res += f[0];
    }
    double dt = omp_get_wtime() - t0; unsigned long long dc = __rdtsc() - c0;
    printf("%d threads: %.2f s, %.2f GFMA-vec/s per thread, %.2f FMA per tsc cycle per thread (res %f)\n", th, dt, 2e9 / dt / 1e9, 2e9 / (double)dc, res);
  }
}
