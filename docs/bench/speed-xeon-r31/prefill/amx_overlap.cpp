#include <initializer_list>
#include <immintrin.h>
#include <x86intrin.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <sys/syscall.h>
#include <unistd.h>
struct alignas(64) Cfg { uint8_t palette, start; uint8_t res[14]; uint16_t colsb[16]; uint8_t rows[16]; };
alignas(64) static char A[64 * 1024];
int main() {
  syscall(SYS_arch_prctl, 0x1023, 18);
  Cfg c; memset(&c, 0, sizeof c); c.palette = 1; for (int i = 0; i < 8; ++i) { c.colsb[i] = 64; c.rows[i] = 16; } _tile_loadconfig(&c);
  uint32_t x = 1; for (size_t i = 0; i < sizeof A / 2; ++i) { x = x * 1664525u + 1013904223u; float f = ((x >> 8) & 0xFFFF) / 32768.0f - 1.0f; uint32_t u; memcpy(&u, &f, 4); ((uint16_t*)A)[i] = u >> 16; }
  for (int t = 0; t < 8; ++t) ;
  _tile_loadd(4, A, 64); _tile_loadd(5, A + 1024, 64); _tile_loadd(6, A + 2048, 64); _tile_loadd(7, A + 3072, 64);
  _tile_loadd(0, A + 4096, 64); _tile_loadd(1, A + 4096, 64); _tile_loadd(2, A + 4096, 64); _tile_loadd(3, A + 4096, 64);
  const int N = 20000;
  for (int nv : {0, 8, 16, 32, 64, 128}) {
    __m512 v[8]; for (int j = 0; j < 8; ++j) v[j] = _mm512_set1_ps(1.0f + j * 1e-3f);
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(1e-4f);
    for (int mode = 0; mode < 3; ++mode) {   // 0: both, 1: tdp only, 2: vector only
      uint64_t t0 = __rdtsc();
      for (int i = 0; i < N; ++i) {
        if (mode != 2) { _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7); }
        if (mode != 1)
          for (int k = 0; k < nv; k += 8) {
            for (int j = 0; j < 8; ++j) v[j] = _mm512_fmadd_ps(v[j], a, b);
            asm volatile("" : "+v"(v[0]), "+v"(v[1]), "+v"(v[2]), "+v"(v[3]), "+v"(v[4]), "+v"(v[5]), "+v"(v[6]), "+v"(v[7]));
          }
      }
      uint64_t t = __rdtsc() - t0;
      printf("nv=%3d mode=%s: %6.1f ticks/iter\n", nv, mode == 0 ? "both" : mode == 1 ? "tdp " : "vec ", (double)t / N);
    }
    float s = 0; for (int j = 0; j < 8; ++j) s += _mm512_reduce_add_ps(v[j]); if (s == 12345) printf("x");
  }
  _tile_release();
}
