#include <immintrin.h>
#include <omp.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
static double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
// read buffer, hint: 0 none, 1 NTA prefetch 2KB ahead, 2 T0 prefetch
static float readbuf(const char* p, size_t n, int hint){
  float tot=0;
  #pragma omp parallel reduction(+:tot)
  {
    int t=omp_get_thread_num(), T=omp_get_num_threads();
    size_t b=n/T*t, e=n/T*(t+1);
    __m512 acc=_mm512_setzero_ps();
    for(size_t i=b;i<e;i+=64){
      if(hint==1) _mm_prefetch(p+i+2048,_MM_HINT_NTA);
      if(hint==2) _mm_prefetch(p+i+2048,_MM_HINT_T0);
      acc=_mm512_add_ps(acc,_mm512_load_ps((const float*)(p+i)));
    }
    tot+=_mm512_reduce_add_ps(acc);
  }
  return tot;
}
int main(int argc,char**argv){
  size_t MB=1<<20;
  char* big=(char*)aligned_alloc(4096, 2048*MB); memset(big,1,2048*MB);
  volatile float sink=0;
  if(argc>1 && !strcmp(argv[1],"sizes")){
    size_t sizes[]={16,32,48,64,96,128,160,192,256,384,512,1024};
    for(size_t s: sizes){ size_t n=s*MB; for(int w=0;w<3;w++) sink+=readbuf(big,n,0);
      double best=1e9; for(int r=0;r<5;r++){double t=now(); sink+=readbuf(big,n,0); t=now()-t; if(t<best)best=t;}
      printf("%5zu MB  %.1f GB/s\n", s, n/best/1e9); fflush(stdout);}
    return 0;
  }
  // pollution: A = first asz MB, B = after, bsz MB, streamed with hint h; then time A.
  size_t asz=atoi(argv[1])*MB, bsz=atoi(argv[2])*MB;
  char* A=big; char* B=big+512*MB;
  for(int h=0;h<3;h++){
    double ta=0,tb=0; int R=6;
    for(int r=0;r<R+1;r++){
      for(int w=0;w<3;w++) sink+=readbuf(A,asz,0);
      double t=now(); sink+=readbuf(B,bsz,h); double t1=now(); sink+=readbuf(A,asz,0); double t2=now();
      if(r){tb+=t1-t; ta+=t2-t1;}
    }
    double warm=1e9; for(int r=0;r<5;r++){double t=now(); sink+=readbuf(A,asz,0); t=now()-t; if(t<warm)warm=t;}
    printf("hint %d: stream B %.2f ms (%.1f GB/s), A after %.2f ms (%.1f GB/s), A warm %.2f ms\n", h, tb/R*1e3, bsz/(tb/R)/1e9, ta/R*1e3, asz/(ta/R)/1e9, warm*1e3);
  }
}
