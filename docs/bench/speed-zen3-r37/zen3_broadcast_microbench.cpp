// Round 37: Zen 3 issue cost of broadcasts and 256-bit loads against FMAs (g++ -O3 -march=native; output in zen3_broadcast_microbench.txt).
#include <immintrin.h>
#include <chrono>
#include <cstdio>
#define REG(x) asm("" : "+x"(x))
template <int NB, int NL>
__attribute__((noinline)) float loop(const float* mem, long iters) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_setzero_ps();
  for (long it = 0; it < iters; ++it) {
    const float* m = mem + (it & 255) * 16;
    __m256 l[NL > 0 ? NL : 1];
    for (int j = 0; j < NL; ++j) { l[j] = _mm256_loadu_ps(m + 8 * j); REG(l[j]); }
    for (int b = 0; b < NB; ++b) {
      __m256 x = _mm256_broadcast_ss(m + 3 + b);
      for (int f = b * 12 / NB; f < (b + 1) * 12 / NB; ++f) a[f] = _mm256_fmadd_ps(x, NL ? l[f % (NL ? NL : 1)] : x, a[f]);
    }
  }
  __m256 sv = a[0]; for (int i = 1; i < 12; ++i) sv = _mm256_add_ps(sv, a[i]);
  return _mm256_cvtss_f32(sv);
}
template <int NB, int NL> void run(const char* name, const float* mem) {
  long n = 100000000;
  auto t0 = std::chrono::steady_clock::now();
  float s = loop<NB, NL>(mem, n);
  double ns = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n * 1e9;
  printf("%s: %.3f ns/iter (12 FMA) %s\n", name, ns, s == 1.2345f ? "x" : "");
}
int main() {
  alignas(64) static float mem[256 * 16 + 64];
  for (int i = 0; i < 256 * 16 + 64; ++i) mem[i] = 1e-6f * i;
  run<12, 1>("bcast 12 load 1", mem);
  run<6, 2>("bcast 6 load 2", mem);
  run<4, 3>("bcast 4 load 3", mem);
  run<3, 4>("bcast 3 load 4", mem);
  run<2, 6>("bcast 2 load 6", mem);
  run<12, 0>("bcast 12 load 0", mem);
}
