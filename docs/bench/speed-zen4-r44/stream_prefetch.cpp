#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <initializer_list>
// sum of a 1 GiB buffer, each thread its half, variants of software prefetch
template <int MODE, int DIST>
double run(const char* buf, size_t n, int threads) {
  auto t = std::chrono::steady_clock::now();
  float total = 0;
  #pragma omp parallel num_threads(threads) reduction(+:total)
  {
    int me = omp_get_thread_num();
    size_t lo = n / threads * me, hi = lo + n / threads;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    for (size_t i = lo; i < hi; i += 128) {
      if (MODE == 1) _mm_prefetch(buf + i + DIST * 64, _MM_HINT_T2), _mm_prefetch(buf + i + DIST * 64 + 64, _MM_HINT_T2);
      if (MODE == 2) _mm_prefetch(buf + i + DIST * 64, _MM_HINT_T0), _mm_prefetch(buf + i + DIST * 64 + 64, _MM_HINT_T0);
      if (MODE == 3) _mm_prefetch(buf + i + DIST * 64, _MM_HINT_NTA), _mm_prefetch(buf + i + DIST * 64 + 64, _MM_HINT_NTA);
      acc0 = _mm512_add_ps(acc0, _mm512_load_ps((const float*)(buf + i)));
      acc1 = _mm512_add_ps(acc1, _mm512_load_ps((const float*)(buf + i + 64)));
    }
    total += _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  if (total == 1.2345f) printf("x");
  return n / s / 1e9;
}
int main() {
  size_t n = 1ul << 30;
  char* buf = (char*)aligned_alloc(4096, n); memset(buf, 0, n);
  for (int th : {1, 2}) for (int rep = 0; rep < 2; ++rep) {
    printf("threads=%d none %.1f | T2 d64 %.1f d256 %.1f d1024 %.1f | T0 d64 %.1f d256 %.1f | NTA d64 %.1f GB/s\n", th,
      run<0,0>(buf,n,th), run<1,64>(buf,n,th), run<1,256>(buf,n,th), run<1,1024>(buf,n,th), run<2,64>(buf,n,th), run<2,256>(buf,n,th), run<3,64>(buf,n,th));
  }
}
