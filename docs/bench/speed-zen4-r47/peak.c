#include <immintrin.h>
#include <stdio.h>
#include <omp.h>
int main(){
  double t0=omp_get_wtime(); long N=200000000; float out=0;
  #pragma omp parallel reduction(+:out)
  {
    __m512 a[12]; for(int i=0;i<12;i++) a[i]=_mm512_set1_ps(i);
    __m512bh x=(__m512bh)_mm512_set1_epi32(0x3f803f80), y=(__m512bh)_mm512_set1_epi32(0x3f803f81);
    for(long n=0;n<N/12;n++){ for(int i=0;i<12;i++) a[i]=_mm512_dpbf16_ps(a[i],x,y); }
    for(int i=0;i<12;i++) out+=_mm512_reduce_add_ps(a[i]);
  }
  double t=omp_get_wtime()-t0; int th=omp_get_max_threads();
  printf("dpbf16 zmm: %.1f GFLOP/s (%d thr) %f\n", (double)N/12*12*64*th/t/1e9, th, out);
  t0=omp_get_wtime();
  #pragma omp parallel reduction(+:out)
  {
    __m512 a[12]; for(int i=0;i<12;i++) a[i]=_mm512_set1_ps(i);
    __m512 x=_mm512_set1_ps(1.0001f), y=_mm512_set1_ps(0.9999f);
    for(long n=0;n<N/12;n++){ for(int i=0;i<12;i++) a[i]=_mm512_fmadd_ps(a[i],x,y); }
    for(int i=0;i<12;i++) out+=_mm512_reduce_add_ps(a[i]);
  }
  t=omp_get_wtime()-t0;
  printf("fma zmm: %.1f GFLOP/s %f\n", (double)N/12*12*32*th/t/1e9, out);
}
