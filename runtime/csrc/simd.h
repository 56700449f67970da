// The AVX-512 feature guard and vector helpers shared by the attention and layer kernels.
// TF_AVX512 is 1 where the build targets avx512f, avx512bw and avx512_bf16 (-march=native on such
// a CPU), else 0 (the portable build): the kernels then compile their scalar paths only.
// (quant_cpu.cpp has its own guard: it also needs avx512_vnni.)
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512BF16__)
#define TF_AVX512 1
#include <immintrin.h>
#else
#define TF_AVX512 0
#endif

#if TF_AVX512
// 2^x, 16 lanes: 2^n * p(f), n = round(x), |f| <= 0.5, Taylor degree 7 (rel. error < 1e-8).
// Lanes below -150 give 0 (so -inf gives 0); lanes above 128 overflow to +inf.
inline __m512 exp2_ps(__m512 x) {
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
#endif
