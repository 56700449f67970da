#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <time.h>
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
template <int RB, int NV>
__attribute__((noinline)) void pv(const uint32_t* P, const uint32_t* Vp, float* O) {
  __m512 acc[RB][NV];
  for (int r = 0; r < RB; ++r) for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_loadu_ps(O + r * 64 + 16 * j);
  for (int np = 0; np < 32; ++np) {
    __m512bh vv[NV];
    for (int j = 0; j < NV; ++j) vv[j] = (__m512bh)_mm512_loadu_si512(Vp + np * 64 + 16 * j);
    for (int r = 0; r < RB; ++r) {
      __m512bh pb = (__m512bh)_mm512_set1_epi32((int)P[r * 32 + np]);
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], pb, vv[j]);
    }
  }
  for (int r = 0; r < RB; ++r) for (int j = 0; j < NV; ++j) _mm512_storeu_ps(O + r * 64 + 16 * j, acc[r][j]);
}
template <int RB, int NV> void bench(const char* name) {
  static uint32_t P[16*32] __attribute__((aligned(64))), Vp[32*64] __attribute__((aligned(64))); static float O[16*64] __attribute__((aligned(64)));
  for (int i=0;i<16*32;i++) P[i]=0x3f803f80; for(int i=0;i<32*64;i++) Vp[i]=0x3f003f00;
  long N=300000; double ins = (double)N*RB*NV*32;
  double best=0;
  for (int rep=0; rep<3; rep++) { double t0=now(); for(long n=0;n<N;n++) pv<RB,NV>(P,Vp,O); double t=now()-t0; if (ins/t/1e9>best) best=ins/t/1e9; }
  printf("%s: %.3f dpbf16/ns %f\n", name, best, O[3]);
}
int main(){ bench<9,2>("9x2"); bench<12,2>("12x2"); bench<6,4>("6x4"); bench<5,4>("5x4"); bench<4,4>("4x4"); bench<3,4>("3x4"); bench<3,2>("3x2"); }
